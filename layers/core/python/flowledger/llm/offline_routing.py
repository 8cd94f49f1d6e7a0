"""The offline model's intent rules: deterministic, explainable, and pinned by a table of phrasings.

The rules, first match wins (``route`` returns the intent and nothing else):

1. **A question about what a document says is KNOWLEDGE_QUERY**, even when it names a symptom: it
   names a document (runbook, policy, guide, docs, playbook, postmortem, ...) and either asks what it
   says (say, describe, recommend, cover, according to, ...) or asks for it (is there a, do we have,
   show me, find, what's in ...), phrased as a question or a request.
   "What does the on-call runbook say about latency?" is a lookup, not an investigation. So is a
   request to break figures down ("now break that down by region"): "down" there is no symptom.
2. **An investigation is DIAGNOSIS**: an explicit ask (diagnose, investigate, troubleshoot, debug,
   root cause); a causal question (what caused, what's wrong, what happened, how come, what changed
   since / last night ...); "why" about an
   event (why did / was / has ...); "why is / are / does X ..." about a system (service, API, checkout,
   database, queue, ...); or an operation that does not work ("can't log in", "not loading").
   A "why" that asks for a rationale (required, decided, designed, should ...) is not one.
3. **A procedure or definition question is KNOWLEDGE_QUERY** even when it names a symptom: "how do
   we handle an outage?", "what is an incident?", "what is our latency SLO?" — documents answer it.
4. **A symptom is DIAGNOSIS**: hangs, stuck, unavailable, down, outage, spike, degraded, 5xx / 503,
   failing, errors, timeouts, slow, crash ...; or a metric (latency, CPU, traffic ...) said to be
   high, rising or tied to a recent time ("latency this morning").
5. **Small talk is SYSTEM_CHAT**: a greeting or thanks, or a question about the assistant itself
   (you, your, capabilities, help), with at most two other content words and no document named.
6. **Anything else is KNOWLEDGE_QUERY.**

Words are compared lower-cased with their apostrophes kept ("can't", "what's"); phrases are matched
on the words joined by single spaces, so punctuation never decides an intent.
"""

from __future__ import annotations

import re

DIAGNOSIS = "DIAGNOSIS"
KNOWLEDGE_QUERY = "KNOWLEDGE_QUERY"
SYSTEM_CHAT = "SYSTEM_CHAT"

_TOKEN = re.compile(r"[a-z0-9]+(?:'[a-z]+)?")


def _set(words: str) -> frozenset[str]:
    return frozenset(words.split())


DOCUMENTS = _set(
    "runbook runbooks playbook playbooks policy policies guide guides guideline guidelines doc docs "
    "document documents documentation handbook manual procedure procedures sop wiki faq readme checklist "
    "postmortem postmortems kb article articles notes spec specification"
)
SAYS = _set(
    "say says said state states describe describes cover covers mention mentions recommend recommends "
    "suggest suggests advise advises require requires explain explains tell tells list lists specify "
    "specifies define defines allow allows documented written instruct instructs"
)
LOOKUP = (
    "is there a",
    "is there an",
    "do we have a",
    "do we have an",
    "show me",
    "find",
    "look up",
    "link to",
    "what's in",
    "what is in",
    "where is",
    "where's",
    "which",
    "summarize",
    "summarise",
    "quote",
    "open",
)
QUESTION_OPENERS = _set(
    "what what's which where where's when who whom how does do did is are can could should would will "
    "according tell show find summarize summarise quote list give explain open look"
)

INVESTIGATE = _set("diagnose diagnosis investigate investigating troubleshoot troubleshooting debug debugging rca")
CAUSAL = (
    "root cause",
    "what caused",
    "what's causing",
    "what is causing",
    "cause of",
    "caused",
    "causing",
    "how come",
    "what happened",
    "what's wrong",
    "what is wrong",
    "what went wrong",
    "going on with",
)
WHY_EVENT = _set("did was were has have had didn't wasn't weren't hasn't haven't")
WHY_STATE = _set("is are does do isn't aren't doesn't don't won't can't can keeps")
RATIONALE = _set(
    "we our choose chose chosen decide decided pick picked adopt adopted design designed required require "
    "requires need needed necessary must should recommended mandatory"
)
SYSTEMS = _set(
    "service services api apis server servers database db checkout payment payments login signup queue "
    "cluster lambda function functions endpoint endpoints site website app application deploy deployment "
    "job jobs worker workers cache pipeline node nodes pod pods host hosts gateway backend "
    "frontend search cart orders order consumer consumers stream"
)
NEGATIONS = _set("not cannot can't won't isn't doesn't don't aren't didn't wasn't never unable")
OPERATIONS = _set(
    "work working load loading connect connecting respond responding start starting log login open opening "
    "complete completing arrive arriving process processing send sending save saving sync syncing boot "
    "booting reachable available accessible render rendering go going through"
)

DEFINITION = (
    "what is a",
    "what is an",
    "what's a",
    "what's an",
    "what counts as",
    "define",
    "definition of",
    "meaning of",
)
PROCEDURE_VERBS = _set(
    "handle escalate report declare respond page prevent avoid classify measure calculate set configure "
    "triage communicate document monitor track prioritize prioritise announce notify recover restore "
    "rollback"
)
PLANNING = _set("slo slos sla slas budget threshold thresholds target targets objective severity sev retention quota")

SYMPTOMS = _set(
    "hang hangs hanging hung stuck freeze freezes freezing frozen unavailable down outage outages spike spikes "
    "spiking spiked degraded degrading degradation 5xx 4xx fail fails failing failed failure failures error "
    "errors erroring errored crash crashes crashing crashed broke broken timeout timeouts timing slow slower slowness "
    "sluggish unresponsive flaky flapping lagging laggy stalled stalling throttled throttling dropped dropping "
    "rejected rejecting declined oom leak leaking exhausted exhaustion saturated overloaded incident alarm "
    "alarms alerting firing"
)
_STATUS_CODE = re.compile(r"^[45]\d\d(?:s)?$")
METRICS = _set("latency latencies cpu memory load traffic retries p99 p95")
ELEVATED = _set(
    "high higher elevated increased increasing rising rose jumped up huge terrible bad worse abnormal unusual "
    "doubled tripled"
)
RECENT = (
    "yesterday",
    "today",
    "tonight",
    "right now",
    "currently",
    "recently",
    "last night",
    "this morning",
    "this afternoon",
    "this evening",
    "since",
    "ago",
)

GREETINGS = _set("hi hello hey hiya howdy greetings yo thanks thank thx cheers bye goodbye")
ASSISTANT = _set("you your yours yourself assistant bot chatbot capabilities help ask")
SMALL_TALK_FILLER = _set(
    "the a an is are am of to in on for and or what what's which how who do does i i'm my me it this that with can "
    "could would will there so much very lot good morning afternoon evening day great nice please again "
    "you're be about tell kind questions question things"
)


# "Break that down by region" asks to regroup figures, not about something that is down.
BREAKDOWN = ("break that down", "break it down", "break this down", "break down", "broken down", "breakdown")


def route(query: str) -> str:
    """The intent of ``query`` under the rules in this module's docstring."""
    tokens = _tokens(query)
    words = set(tokens)
    text = f" {' '.join(tokens)} "
    if _is_document_question(query, tokens, words, text) or _has(text, BREAKDOWN):
        return KNOWLEDGE_QUERY
    if _is_investigation(tokens, words, text):
        return DIAGNOSIS
    if _is_procedure_or_definition(tokens, words, text):
        return KNOWLEDGE_QUERY
    if _names_a_symptom(words, text):
        return DIAGNOSIS
    if _is_small_talk(tokens, words):
        return SYSTEM_CHAT
    return KNOWLEDGE_QUERY


def _tokens(query: str) -> list[str]:
    return _TOKEN.findall(query.lower().replace("\u2019", "'"))


def _has(text: str, phrases: tuple[str, ...]) -> bool:
    return any(f" {phrase} " in text for phrase in phrases)


def _is_request(query: str, tokens: list[str]) -> bool:
    return query.rstrip().endswith("?") or (bool(tokens) and tokens[0] in QUESTION_OPENERS)


def _is_document_question(query: str, tokens: list[str], words: set[str], text: str) -> bool:
    if not words & DOCUMENTS or not _is_request(query, tokens):
        return False
    return bool(words & SAYS) or _has(text, ("according to", *LOOKUP))


def _is_investigation(tokens: list[str], words: set[str], text: str) -> bool:
    if words & INVESTIGATE or _has(text, CAUSAL) or (_has(text, ("what changed",)) and _has(text, RECENT)):
        return True
    if "why" in words and not words & RATIONALE:
        after_why = tokens[tokens.index("why") + 1 : tokens.index("why") + 2]
        if after_why and after_why[0] in WHY_EVENT:
            return True
        if after_why and after_why[0] in WHY_STATE and words & SYSTEMS:
            return True
    # An operation that does not work: a negation, then within two words what failed to happen.
    return any(
        token in NEGATIONS and any(t in OPERATIONS for t in tokens[n + 1 : n + 4]) for n, token in enumerate(tokens)
    )


def _is_procedure_or_definition(tokens: list[str], words: set[str], text: str) -> bool:
    if _has(text, DEFINITION) or words & PLANNING:
        return True
    if tokens[-1:] in (["mean"], ["means"]):
        return True
    # "how do we handle ...", "how should I escalate ...", "who do we page ...": a procedure to look up.
    if tokens[:1] in (["how"], ["who"], ["when"]):
        return any(t in PROCEDURE_VERBS for t in tokens[1:5])
    return False


def _names_a_symptom(words: set[str], text: str) -> bool:
    if words & SYMPTOMS or any(_STATUS_CODE.match(w) for w in words) or _has(text, ("not working",)):
        return True
    return bool(words & METRICS) and (bool(words & ELEVATED) or _has(text, RECENT))


def _is_small_talk(tokens: list[str], words: set[str]) -> bool:
    if words & DOCUMENTS or not tokens:
        return False
    greeted = tokens[0] in GREETINGS or (
        tokens[0] == "good" and tokens[1:2] in (["morning"], ["afternoon"], ["evening"])
    )
    addressed = greeted or bool(words & ASSISTANT)
    other = words - GREETINGS - ASSISTANT - SMALL_TALK_FILLER
    return addressed and len(other) <= 2
