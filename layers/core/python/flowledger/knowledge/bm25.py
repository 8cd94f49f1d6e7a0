"""Okapi BM25 over a small in-memory corpus of chunks (k1 = 1.5, b = 0.75)."""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

_WORD = re.compile(r"[a-z0-9]+")
K1 = 1.5
B = 0.75


# Function words carry no topic; left in, "what about X" would match any document saying "about".
STOP_WORDS = frozenset(
    {
        "a",
        "about",
        "above",
        "after",
        "again",
        "all",
        "am",
        "an",
        "and",
        "any",
        "are",
        "as",
        "at",
        "be",
        "because",
        "been",
        "being",
        "below",
        "between",
        "both",
        "but",
        "by",
        "can",
        "could",
        "did",
        "do",
        "does",
        "doing",
        "down",
        "during",
        "each",
        "few",
        "for",
        "from",
        "further",
        "had",
        "has",
        "have",
        "having",
        "he",
        "her",
        "here",
        "hers",
        "him",
        "his",
        "how",
        "i",
        "if",
        "in",
        "into",
        "is",
        "it",
        "its",
        "itself",
        "just",
        "me",
        "more",
        "most",
        "my",
        "no",
        "nor",
        "not",
        "now",
        "of",
        "off",
        "on",
        "once",
        "only",
        "or",
        "other",
        "our",
        "out",
        "over",
        "own",
        "same",
        "she",
        "should",
        "so",
        "some",
        "such",
        "than",
        "that",
        "the",
        "their",
        "them",
        "then",
        "there",
        "these",
        "they",
        "this",
        "those",
        "through",
        "to",
        "too",
        "under",
        "until",
        "up",
        "very",
        "was",
        "we",
        "were",
        "what",
        "when",
        "where",
        "which",
        "while",
        "who",
        "whom",
        "why",
        "will",
        "with",
        "would",
        "you",
        "your",
    }
)


def tokenize(text: str) -> list[str]:
    return [word for word in _WORD.findall(text.lower()) if word not in STOP_WORDS]


@dataclass(frozen=True)
class Scored:
    index: int
    score: float


class Bm25:
    def __init__(self, documents: Sequence[str]) -> None:
        self._docs = [Counter(tokenize(text)) for text in documents]
        self._lengths = [sum(doc.values()) for doc in self._docs]
        self._average = (sum(self._lengths) / len(self._lengths)) if self._lengths else 0.0
        frequency: Counter[str] = Counter()
        for doc in self._docs:
            frequency.update(doc.keys())
        n = len(self._docs)
        # The "plus one" IDF keeps scores positive for terms in more than half of the corpus.
        self._idf = {term: math.log(1 + (n - df + 0.5) / (df + 0.5)) for term, df in frequency.items()}

    def score(self, query: str) -> list[Scored]:
        """Every document with a positive score, best first (ties by position)."""
        terms = tokenize(query)
        results = []
        for index, doc in enumerate(self._docs):
            total = 0.0
            for term in terms:
                tf = doc.get(term, 0)
                if tf:
                    norm = tf + K1 * (1 - B + B * self._lengths[index] / self._average)
                    total += self._idf[term] * tf * (K1 + 1) / norm
            if total > 0:
                results.append(Scored(index, total))
        return sorted(results, key=lambda s: (-s.score, s.index))
