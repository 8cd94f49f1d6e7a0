"""`flowledger flows replay`: run replay cases through an invoker and check the flows they record.

The shape mirrors ``flows signature-check``: a table of the cases that did not match and a totals line
(or ``--json``), exit 0 when the drift share is within ``--threshold``, 1 when it is not, 2 when the
replay cannot run (a bad case file or corpus, an unknown invoker, a real invoker without the dev
install, no case for the invoker). The real invokers run on the offline model against a fresh embedded
store per case, whatever model or store the environment configures: a replay is reproducible or useless.
"""

from __future__ import annotations

import argparse
from typing import Any

from flowledger.cli.flows.checks import corpus_option, signature_corpus, threshold_option
from flowledger.cli.options import command, json_option
from flowledger.cli.text import counted

INVOKERS = ("stub", "chat", "diagnosis", "researcher", "critic", "correlator")


def cmd_flows_replay(args: argparse.Namespace) -> int:
    from pathlib import Path

    from flowledger.replay.cases import load_cases, packaged_cases
    from flowledger.replay.harness import ReplayHarness

    corpus = signature_corpus(args.corpus)

    cases = packaged_cases() if args.cases is None else load_cases(Path(args.cases))
    report = ReplayHarness(_invoker(args.invoker), corpus).run(cases, args.threshold)
    if args.json:
        print(report.model_dump_json(indent=2))
        return 0 if report.passed else 1
    for result in report.results:
        if result.finding not in ("matched", "skipped"):
            print(f"{result.finding:<14}  {result.case_id}  {result.trigger_type}: {result.detail}")
    print(
        f"{counted(report.cases, 'case')} via {report.invoker}: {report.matched} matched, {report.sequence_drift}"
        f" sequence drift, {report.outcome_drift} outcome drift, {report.error} error, {report.skipped} skipped;"
        f" drift {report.drift_share:.2%} of {report.compared} compared (threshold {report.threshold:.2%}):"
        f" {'PASS' if report.passed else 'FAIL'}"
    )
    return 0 if report.passed else 1


def _invoker(name: str) -> Any:
    """The invoker ``name`` names; a real one on the settings of this environment, its store embedded."""
    if name == "stub":
        from flowledger.replay.invokers import StubAgentInvoker

        return StubAgentInvoker()
    from flowledger.config import load_settings
    from flowledger.replay.agents import REAL_INVOKERS

    return REAL_INVOKERS[name](load_settings())


def add_command(flows: Any) -> None:
    """Add ``replay`` to the ``flows`` group."""
    replay = command(
        flows,
        "replay",
        "run replay cases through an agent and compare the flows they record with the golden signatures",
        cmd_flows_replay,
        "Each case is matched, sequence_drift, outcome_drift, error (no flow could be read back) or skipped"
        " (a real invoker runs only its own agent's cases). The stub records nothing and checks the cases against"
        " the corpus; a real invoker runs the agent on the offline model against an embedded store (needs the dev"
        " install). Exits 1 when the drifted share of the compared cases exceeds --threshold, 0 otherwise,"
        " 2 when a case file or the corpus cannot be read, or the invoker runs none of the cases.",
    )
    replay.add_argument(
        "--cases",
        metavar="DIR",
        help="a directory of replay cases (*.json) to use instead of the packaged ones (flowledger/replay/cases)",
    )
    replay.add_argument(
        "--invoker", choices=INVOKERS, default="stub", help="who runs the cases (default stub: no agent runs)"
    )
    threshold_option(replay, "cases")
    corpus_option(replay)
    json_option(replay, "the counts and every case's result")
