"""The checks every model text passes before anything reads it as an answer: no chat-template or control
token inside it, and no degenerate loop.

A small model served with a mismatched or missing chat template keeps generating past its turn: it writes
the template's own tokens (``<|im_end|>``, ``<end_of_turn>``, ``<|eot_id|>``...) and then a new turn, and
often the same lines again until the token limit. Nothing of that is an answer. The tokens below are the
turn and control tokens of the common open-weight families; they are sent as stop sequences where a server
takes them (so generation ends at the first), and any that still comes back refuses the reply.
"""

from __future__ import annotations

import re
from collections import Counter

from flowledger.llm.ports import ModelDegenerateOutput, Reply

# DeepSeek's tokens are written with a full-width vertical bar and a lower one-eighth block for spaces.
_BAR, _SPACE = "\uff5c", "\u2581"
# Each family's turn and control tokens, as they appear in generated text.
TEMPLATE_TOKENS: dict[str, tuple[str, ...]] = {
    "chatml": ("<|im_start|>", "<|im_end|>", "<|im_sep|>", "<|endoftext|>"),
    "gemma": ("<start_of_turn>", "<end_of_turn>", "<bos>", "<eos>"),
    "llama3": (
        "<|begin_of_text|>",
        "<|end_of_text|>",
        "<|start_header_id|>",
        "<|end_header_id|>",
        "<|eot_id|>",
        "<|eom_id|>",
        "<|python_tag|>",
    ),
    "mistral": ("[INST]", "[/INST]", "[SYSTEM_PROMPT]", "[/SYSTEM_PROMPT]", "[TOOL_CALLS]", "[TOOL_RESULTS]"),
    "llama2": ("<<SYS>>", "<</SYS>>", "</s>"),
    "phi": ("<|system|>", "<|user|>", "<|assistant|>", "<|end|>"),
    "deepseek": (
        f"<{_BAR}begin{_SPACE}of{_SPACE}sentence{_BAR}>",
        f"<{_BAR}end{_SPACE}of{_SPACE}sentence{_BAR}>",
        f"<{_BAR}User{_BAR}>",
        f"<{_BAR}Assistant{_BAR}>",
        f"<{_BAR}tool{_SPACE}calls{_SPACE}begin{_BAR}>",
    ),
}
# What a server is asked to stop at: the tokens that end a turn or begin the next one, in each family. A
# server that takes ``stop`` ends generation at the first (the text before it is the answer).
STOP_SEQUENCES: tuple[str, ...] = (
    "<|im_end|>",
    "<|im_start|>",
    "<|endoftext|>",
    "<end_of_turn>",
    "<start_of_turn>",
    "<eos>",  # Gemma's end of sequence, written out by a server that renders special tokens as text
    "<|eot_id|>",
    "<|end_of_text|>",
    "<|start_header_id|>",
    "[INST]",
    "</s>",  # Llama 2's and Mistral's end of sequence
    "<|end|>",
    "<|user|>",
    f"<{_BAR}end{_SPACE}of{_SPACE}sentence{_BAR}>",
    f"<{_BAR}User{_BAR}>",
)
# Any token of the shapes the families share, named or not: <|word|>, the same between DeepSeek's full-width bars,
# and the Gemma and Mistral spellings above, matched whatever their case.
_TOKEN = re.compile(
    r"<\|[A-Za-z0-9_]{1,40}\|>|<\uff5c[^\uff5c<>\n]{1,40}\uff5c>|</?(?:start_of_turn|end_of_turn|bos|eos|s)>|\[/?INST\]|<</?SYS>>"
    r"|\[/?(?:SYSTEM_PROMPT|TOOL_CALLS|TOOL_RESULTS|AVAILABLE_TOOLS)\]",
    re.IGNORECASE,
)
# The unit a loop is measured in: words and single punctuation marks, lower-cased.
_WORD = re.compile(r"\w+|[^\w\s]")
MIN_LOOP_TOKENS = 16  # a loop shorter than this is not told from emphasis ("no, no, no")
MIN_LOOP_REPEATS = 3
MAX_LOOP_PERIOD = 60  # tokens: longer periods are repeated paragraphs, which the line check finds
MIN_REPEATED_LINE_WORDS = 3
MAX_LINE_REPEATS = 2  # a line of three words or more may appear twice (a refrain); a third time is a loop
NGRAM = 4
MIN_NGRAMS = 24
MAX_REPEATED_NGRAM_SHARE = 0.5


def template_token(text: str) -> str | None:
    """The first chat-template or control token in ``text``, or None."""
    found = _TOKEN.search(text)
    return found.group(0) if found else None


def without_template_tokens(text: str) -> str:
    """``text`` with every template token replaced by a space, until none is left (a removal can join the two
    halves of another)."""
    while (cleaned := _TOKEN.sub(" ", text)) != text:
        text = cleaned
    return text


def degenerate_loop(text: str) -> str | None:
    """What makes ``text`` a loop (a repeated line, a phrase repeated to its end, mostly repeated phrases), or None."""
    lines = Counter(" ".join(line.split()).lower() for line in text.splitlines())
    for line, count in lines.items():
        if count > MAX_LINE_REPEATS and len(line.split()) >= MIN_REPEATED_LINE_WORDS:
            return f"a line repeated {count} times"
    words = _WORD.findall(text.lower())
    period = _tail_period(words)
    if period is not None:
        return f"a phrase of {period} words repeated to the end"
    grams = [tuple(words[i : i + NGRAM]) for i in range(len(words) - NGRAM + 1)]
    if len(grams) >= MIN_NGRAMS:
        share = 1 - len(set(grams)) / len(grams)
        if share >= MAX_REPEATED_NGRAM_SHARE:
            return f"{share:.0%} of its {NGRAM}-word phrases repeated"
    return None


def _tail_period(words: list[str]) -> int | None:
    """The shortest period with which the text's last words repeat (at least three times, 16 words), or None."""
    for period in range(1, min(MAX_LOOP_PERIOD, len(words) // MIN_LOOP_REPEATS) + 1):
        unit = words[-period:]
        repeats = 1
        while (start := len(words) - (repeats + 1) * period) >= 0 and words[start : start + period] == unit:
            repeats += 1
        if repeats >= MIN_LOOP_REPEATS and repeats * period >= MIN_LOOP_TOKENS:
            return period
    return None


def check_model_text(text: str) -> None:
    """Raise :class:`ModelDegenerateOutput` when ``text`` holds a template token or is a loop (the message says
    which, never the text itself)."""
    token = template_token(text)
    if token is not None:
        raise ModelDegenerateOutput(f"the answer holds the chat-template token {token[:40]!r}")
    loop = degenerate_loop(text)
    if loop is not None:
        raise ModelDegenerateOutput(f"the answer is a loop: {loop}")


def strings_in(value: object) -> list[str]:
    """Every string inside a parsed JSON value (keys and values), for checking an object's text."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for key, item in value.items() for s in (*strings_in(key), *strings_in(item))]
    if isinstance(value, list | tuple):
        return [s for item in value for s in strings_in(item)]
    return []


def checked_reply(reply: Reply) -> Reply:
    """``reply`` once its text passes the checks: free text whole, an object's every string, a tool call's
    arguments for template tokens (a loop in them is the tool's to refuse). Raises :class:`ModelDegenerateOutput`."""
    for call in reply.tool_calls:
        for text in strings_in(call.arguments):
            token = template_token(text)
            if token is not None:
                raise ModelDegenerateOutput(f"a tool call's arguments hold the chat-template token {token[:40]!r}")
    if reply.data is not None:
        for text in strings_in(reply.data):
            check_model_text(text)
    elif reply.text and not reply.tool_calls:
        check_model_text(reply.text)
    return reply
