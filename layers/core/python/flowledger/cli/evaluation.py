"""`flowledger eval run`: the researcher benchmarked on a file of cases, a verdict per case."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from flowledger.cli import store
from flowledger.cli.failures import CommandFailed, fail
from flowledger.cli.options import actions, command, json_option, store_option
from flowledger.cli.text import counted


def add_commands(commands: Any) -> None:
    """Add ``eval run``."""
    evaluation = actions(command(commands, "eval", "benchmark the researcher on a file of cases"), "eval_command")
    eval_run = command(
        evaluation,
        "run",
        "run every case of a JSONL file through the researcher and print a verdict per case",
        cmd_eval_run,
        'One case per line: {"case_id", "question", "expected_document_ids"?, "expected_outcome"?}'
        " (at most 1000); a bad line stops it before any case runs (exit 2). Each case is recorded as a"
        " flow user_question benchmark/RUN_ID/CASE_ID when REASONING_FLOW_CAPTURE_ENABLED is on, and never"
        " enqueues research. Exits 0 when every case passed, 1 otherwise.",
    )
    eval_run.add_argument("cases", metavar="CASES.jsonl", help="the cases file (JSON Lines)")
    eval_run.add_argument(
        "--run-id",
        help="name the run: 1 to 64 letters, digits, '_', '.', '-' (default ev_ + a new ULID);"
        " it is the middle of every case's trigger ref",
    )
    json_option(eval_run, "the report")
    store_option(eval_run)


def cmd_eval_run(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    from flowledger.llm.aws_model_config import ModelUnavailable
    from flowledger.research.agents.recording import research_recorder
    from flowledger.research.evaluation import (
        MAX_FILE_BYTES,
        CasesInvalid,
        EvaluationRunner,
        check_run_id,
        parse_cases,
    )

    if args.run_id is not None:
        check_run_id(args.run_id)  # before the file is read or the store is reached
    try:
        with open(args.cases, "rb") as file:
            data = file.read(MAX_FILE_BYTES + 1)  # one byte over says "too large" without reading it all
    except OSError as exc:
        raise CommandFailed(f"{args.cases}: {exc.strerror or type(exc).__name__}") from None
    try:
        cases = parse_cases(data)
    except CasesInvalid as exc:
        return fail(f"{args.cases} {exc.message}")
    services = store.agent_services(args.data_dir)
    try:
        model = store.agent_model(services)
    except ModelUnavailable as exc:
        return fail(exc.message, status=1)
    runner = EvaluationRunner(services, model, research_recorder(services))
    # tqdm draws only on a terminal (disable=None), never over JSON output.
    with tqdm(
        total=len(cases), desc="cases", unit=" cases", leave=False, disable=True if args.json else None, file=sys.stderr
    ) as bar:
        report = runner.run(cases, run_id=args.run_id, on_case=lambda _: bar.update())
    if args.json:
        print(report.model_dump_json(indent=2))
    else:
        _print_evaluation(report)
    return 0 if report.all_passed else 1


def _print_evaluation(report: Any) -> None:
    """The report as a fixed-width table (one row per case, in file order) and a totals line."""
    width = max(len("case"), *(len(case.case_id) for case in report.cases))
    print(
        f"{'case':<{width}}  {'outcome':<24}  {'k':>4}  {'hits':>4}  {'cited':>5}  {'expected':>8}  "
        f"{'result':<6}  {'reason':<26}  flow"
    )
    for case in report.cases:
        expected = "-" if case.expected_found is None else f"{case.expected_found}/{case.expected}"
        print(
            f"{case.case_id:<{width}}  {case.outcome:<24}  {case.composite_k:>4.2f}  {case.hits:>4}  {case.cited:>5}  "
            f"{expected:>8}  {'pass' if case.passed else 'FAIL':<6}  {case.reason or '-':<26}  {case.flow_id or '-'}"
        )
    totals = report.totals
    print(
        f"{counted(totals.cases, 'case')}: {totals.passed} passed, {totals.failed} failed ({totals.gave_up} gave up);"
        f" mean composite_k {totals.mean_composite_k:.2f}; run {report.run_id} via {report.model}"
    )
    missing = sum(case.flow_id is None for case in report.cases)
    if not report.recorded:
        print("flows not recorded: REASONING_FLOW_CAPTURE_ENABLED is off")
    elif missing:  # the recorder is fail-soft: its warning on stderr says what failed
        print(f"{missing} of {counted(totals.cases, 'flow')} not recorded: recording failed")
