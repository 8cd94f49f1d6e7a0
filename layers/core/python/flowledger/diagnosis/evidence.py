"""EvidenceGuard: a deterministic check that a draft says only what this run's observations show.

Every claim must cite at least one observation id of this run, and each cited observation must be
evidence (the tool ran and answered; a refused statement or a failed call is not). Every fact the
claims and the conclusion quote (numbers, dates and times, error codes, identifiers with digits)
must appear in the observations cited. A foreign or unknown id, an uncited claim, or a fact found
in no cited observation refuses the draft; the reason is a fixed code, kept on the server.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from flowledger.diagnosis.draft import Draft
from flowledger.diagnosis.observations import ObservationLedger

# What counts as a quoted fact. Order matters: timestamps before bare numbers.
FACT = re.compile(
    r"\d{4}-\d{2}-\d{2}(?:[T ]\d{2}:\d{2}(?::\d{2}(?:\.\d+)?)?Z?)?"  # dates and timestamps
    r"|\d+(?:[.:/,]\d+)*"  # numbers, versions, clock times, ratios
    r"|(?<![A-Za-z0-9_])[A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+(?![A-Za-z0-9_])"  # ERROR_CODES
    r"|(?<![A-Za-z0-9_])[a-z][a-z0-9]*_[a-z0-9_]*[0-9][a-z0-9_]*(?![A-Za-z0-9_])"  # ids like ord_000123
)


@dataclass(frozen=True)
class EvidenceVerdict:
    passed: bool
    reason: str | None = None  # a fixed code: uncited_claim, unknown_observation, unsafe_observation, unquoted_fact
    # For tests and server-side debugging only: the offending id or fact. Never published or recorded.
    detail: str | None = None


def quoted_facts(text: str) -> list[str]:
    """The facts ``text`` quotes, in order, without repeats."""
    return list(dict.fromkeys(match.group(0).rstrip(".,:/") for match in FACT.finditer(text)))


def appears_in(fact: str, evidence: str) -> bool:
    """True when ``fact`` occurs in ``evidence`` as a whole token (``20`` is not found in ``2026``)."""
    if fact[0].isdigit():
        pattern = rf"(?<![0-9.]){re.escape(fact)}(?![0-9]|\.[0-9])"
        plain = fact.replace(",", "")
        if plain != fact and re.search(rf"(?<![0-9.]){re.escape(plain)}(?![0-9]|\.[0-9])", evidence):
            return True
    else:
        pattern = rf"(?<![A-Za-z0-9_]){re.escape(fact)}(?![A-Za-z0-9_])"
    return re.search(pattern, evidence) is not None


def check_evidence(draft: Draft, ledger: ObservationLedger) -> EvidenceVerdict:
    """Whether ``draft`` may go on to the semantic guard; see the module docstring for the rules."""
    if not draft.conclusion or not draft.claims:
        return EvidenceVerdict(False, "uncited_claim")
    cited: dict[str, str] = {}
    for claim in draft.claims:
        if not claim.observation_ids:
            return EvidenceVerdict(False, "uncited_claim", claim.text[:80])
        texts = []
        for observation_id in claim.observation_ids:
            observation = ledger.get(observation_id)
            if observation is None:
                return EvidenceVerdict(False, "unknown_observation", observation_id)
            if not observation.safe:
                return EvidenceVerdict(False, "unsafe_observation", observation_id)
            texts.append(observation.result.text)
            cited[observation_id] = observation.result.text
        evidence = "\n".join(texts)
        for fact in quoted_facts(claim.text):
            if not appears_in(fact, evidence):
                return EvidenceVerdict(False, "unquoted_fact", fact)
    everything = "\n".join(cited.values())
    for fact in quoted_facts(draft.conclusion):
        if not appears_in(fact, everything):
            return EvidenceVerdict(False, "unquoted_fact", fact)
    return EvidenceVerdict(True)
