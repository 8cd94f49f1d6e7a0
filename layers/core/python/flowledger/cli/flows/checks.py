"""`flowledger flows lint` and `flowledger flows signature-check`: an exported flows file checked offline.

Both read the export's JSONL (no store): a file that cannot be read or a line that is not a record is
exit 2 naming the line; a check that ran and found a critical rule or too much drift is exit 1.
"""

from __future__ import annotations

import argparse
from typing import Any

from flowledger.cli.failures import CommandFailed
from flowledger.cli.options import command, json_option, share
from flowledger.cli.text import counted


def add_command(flows: Any) -> None:
    """Add ``lint`` and ``signature-check`` to the ``flows`` group."""
    lint = command(
        flows,
        "lint",
        "check every flow for shape anomalies: 3 critical rules and 4 warnings",
        cmd_flows_lint,
        "Critical: empty_step_sequence, verdict_before_retrieval, no_model_call_ref. Warnings: empty_agent_set,"
        " aggregate_confidence_one, duplicate_consecutive_kinds, summary_hidden_majority. Exits 1 on any"
        " critical finding (FAIL), 0 on PASS or PASS-WITH-NOTES, 2 when a line is not a flow record.",
    )
    lint.add_argument("file", metavar="FILE", help="the flows file (JSONL, as `flows export --format raw` writes it)")
    json_option(lint, "the verdict, the counts and every finding")
    check = command(
        flows,
        "signature-check",
        "compare every flow's step kinds and outcome with the golden signatures of its trigger type",
        cmd_flows_signature_check,
        "Each flow is matched, sequence_drift, outcome_drift or skipped (its trigger type is not in the corpus)."
        " Exits 1 when the drifted share of the compared flows exceeds --threshold, 0 otherwise,"
        " 2 when a line is not a flow record or the corpus cannot be read.",
    )
    check.add_argument("--input", required=True, metavar="FILE", help="the flows file (JSONL) to check")
    threshold_option(check, "flows")
    corpus_option(check)
    json_option(check, "the counts and every flow's finding")


def threshold_option(parser: argparse.ArgumentParser, compared: str) -> None:
    """``--threshold``: the drifted share of the compared flows (or cases) a check allows."""
    parser.add_argument(
        "--threshold",
        type=share,
        default=0.0,
        help=f"the drifted share of compared {compared} allowed, 0 to 1 (default 0: any drift fails; 0.05 allows 5%%)",
    )


def corpus_option(parser: argparse.ArgumentParser) -> None:
    """``--corpus``: a golden signature corpus instead of the packaged one."""
    parser.add_argument(
        "--corpus",
        metavar="FILE",
        help="a signature corpus to use instead of the packaged one (flowledger/reasoning/expected_signatures.json)",
    )


def _flow_records(path: str, check: Any) -> Any:
    """``check(records)`` over the records of ``path``, streamed; a bad line ends the command naming it."""
    from flowledger.reasoning.dataset import RecordInvalid, read_records

    try:
        with open(path, "rb") as file:
            return check(read_records(file))
    except OSError as exc:
        raise CommandFailed(f"{path}: {exc.strerror or type(exc).__name__}") from None
    except RecordInvalid as exc:
        raise CommandFailed(f"{path} {exc.message}") from None


def cmd_flows_lint(args: argparse.Namespace) -> int:
    from flowledger.reasoning.flow_lint import lint_records

    report = _flow_records(args.file, lint_records)
    if args.json:
        print(report.model_dump_json(indent=2))
    else:
        for finding in report.findings:
            print(f"{finding.severity:<8}  line {finding.line}  {finding.flow_id}  {finding.rule}: {finding.detail}")
        print(
            f"{counted(report.flows, 'flow')}: {report.critical} critical, {counted(report.warnings, 'warning')}:"
            f" {report.verdict}"
        )
    return 1 if report.verdict == "FAIL" else 0


def signature_corpus(path: str | None) -> Any:
    """The golden corpus at ``path`` (``--corpus``), or the packaged one; an unreadable file ends the command."""
    from flowledger.reasoning.signatures import packaged_corpus, parse_corpus

    if path is None:
        return packaged_corpus()
    try:
        with open(path, "rb") as file:
            return parse_corpus(file.read(), path)
    except OSError as exc:
        raise CommandFailed(f"{path}: {exc.strerror or type(exc).__name__}") from None


def cmd_flows_signature_check(args: argparse.Namespace) -> int:
    from flowledger.reasoning.signatures import check_records

    corpus = signature_corpus(args.corpus)

    report = _flow_records(args.input, lambda records: check_records(corpus, records, args.threshold))
    if args.json:
        print(report.model_dump_json(indent=2))
    else:
        for finding in report.findings:
            if finding.finding != "matched":
                print(
                    f"{finding.finding:<14}  line {finding.line}  {finding.flow_id}  {finding.trigger_type}:"
                    f" {finding.detail}"
                )
        print(
            f"{counted(report.flows, 'flow')}: {report.matched} matched, {report.sequence_drift} sequence drift,"
            f" {report.outcome_drift} outcome drift, {report.skipped} skipped; drift {report.drift_share:.2%}"
            f" of {report.compared} compared (threshold {report.threshold:.2%}): {'PASS' if report.passed else 'FAIL'}"
        )
    return 0 if report.passed else 1
