"""Every documented setting yields a valid template (issue #28): synthesize the matrix of
tests/infra/deploy_matrix.py, lint each template with cfn-lint and scan each with checkov.

    .venv/bin/python scripts/check_templates.py [--only NAME ...] [--jobs N]

The templates land in .build/templates/<entry>-<region>.template.json. checkov runs from its own venv
(.venv-iac, ``make template-check`` builds it) with the checked-in .checkov.yaml. Prints a line per template
as it is done, then a table and the findings; exits 1 on a failed synth, a failed synth validation
(cdk-nag), a cfn-lint error, a failed checkov check or a template past MAX_STACK_RESOURCES (450 of
CloudFormation's 500). cfn-lint warnings are listed but pass.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from collections import defaultdict
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass, field
from multiprocessing import get_context
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
# The matrix lives with the tests (tests/infra/deploy_matrix.py), importable from the repository's root.
sys.path.insert(0, str(ROOT))
os.environ.setdefault("JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION", "20")

from tests.infra.deploy_matrix import MAX_STACK_RESOURCES, TARGETS, Target, lint, synthesize  # noqa: E402

SUFFIX = ".template.json"


@dataclass
class Checked:
    """One template's synth and cfn-lint results, then checkov's counts."""

    name: str
    resources: int = 0
    synth_seconds: float = 0.0
    lint_seconds: float = 0.0
    synth_error: str | None = None
    validation_failures: tuple[str, ...] = ()
    lint_errors: tuple[str, ...] = ()
    lint_warnings: tuple[str, ...] = ()
    missing_types: tuple[str, ...] = ()  # the partition lacks them: the synth stops, as it should
    checkov: dict[str, int] = field(default_factory=lambda: {"passed": 0, "failed": 0, "skipped": 0})

    @property
    def failed(self) -> bool:
        return bool(
            self.synth_error
            or self.validation_failures
            or self.lint_errors
            or self.checkov["failed"]
            or self.resources > MAX_STACK_RESOURCES
        )


def synthesize_and_lint(target: Target, out: Path) -> Checked:
    """In a worker process: synthesize ``target``, write its template into ``out`` and lint it."""
    checked = Checked(str(target))
    try:
        synthesis = synthesize(target)
    except Exception as error:  # a context the app refuses: reported in the table, never a traceback
        checked.synth_error = f"{type(error).__name__}: {error}"
        return checked
    (out / f"{target}{SUFFIX}").write_text(json.dumps(synthesis.template, indent=1))
    started = time.monotonic()
    findings = lint(synthesis.template, target.region)
    checked.lint_seconds = time.monotonic() - started
    checked.resources = synthesis.resource_count
    checked.synth_seconds = synthesis.seconds
    # In aws-cn and aws-us-gov the console's resource types do not exist: expected, and listed apart.
    checked.validation_failures = target.unexpected(synthesis.validation_failures)
    checked.lint_errors, checked.lint_warnings = target.unexpected(findings.errors), findings.warnings
    checked.missing_types = target.missing_types if synthesis.validation_failures else ()
    return checked


def run_checkov(checkov: Path, config: Path, templates: list[Path], jobs: int) -> list[dict[str, Any]]:
    """checkov on ``templates``, in ``jobs`` processes at once (each takes one core and seconds a template):
    every passed, failed and skipped check, each with its file. Measured (issue #43): about 2 s to start and
    4 s a template, so one process for all would save a start and leave the other cores idle; cfn-lint, in
    the synth workers, likewise costs about 1 s a process and 5.5 s a template (docs/testing.md)."""
    groups = [templates[i::jobs] for i in range(jobs) if templates[i::jobs]]
    running = [
        subprocess.Popen(  # noqa: S603 (the checkov of .venv-iac, on the templates this run wrote)
            [str(checkov), "--config-file", str(config), "--output", "json", "--file", *map(str, group)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for group in groups
    ]
    results = []
    for process in running:
        stdout, stderr = process.communicate()
        # checkov exits 1 when a check fails; its report on stdout is read either way.
        try:
            report: Any = json.loads(stdout)
        except ValueError:
            raise SystemExit(f"checkov gave no JSON report (exit {process.returncode}):\n{stderr[-3000:]}") from None
        # One framework gives an object, several a list of them; no template found, a bare summary.
        for one in report if isinstance(report, list) else [report]:
            for outcome in ("passed", "failed", "skipped"):
                results += [
                    {**check, "outcome": outcome} for check in one.get("results", {}).get(f"{outcome}_checks", [])
                ]
    return results


def table(rows: list[Checked]) -> str:
    """The summary: a line per template."""
    header = (
        "template",
        "resources",
        "synth s",
        "lint s",
        "lint E",
        "lint W",
        "ckv pass",
        "ckv fail",
        "ckv skip",
        "verdict",
    )
    lines = [header]
    for row in rows:
        verdict = "synth failed" if row.synth_error else ("FAILED" if row.failed else "ok")
        if row.validation_failures:
            verdict += f" (validation: {len(row.validation_failures)})"
        elif row.missing_types:
            verdict = "refused: partition lacks the console" if not row.failed else verdict
        lines.append(
            (
                row.name,
                str(row.resources),
                f"{row.synth_seconds:.1f}",
                f"{row.lint_seconds:.1f}",
                str(len(row.lint_errors)),
                str(len(row.lint_warnings)),
                str(row.checkov["passed"]),
                str(row.checkov["failed"]),
                str(row.checkov["skipped"]),
                verdict,
            )
        )
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    return "\n".join(
        "  ".join(
            cell.ljust(width) if i in (0, len(header) - 1) else cell.rjust(width)
            for i, (cell, width) in enumerate(zip(line, widths, strict=True))
        )
        for line in lines
    )


def findings(rows: list[Checked], checks: list[dict[str, Any]]) -> str:
    """Every error in full, and the warnings and checkov failures grouped by rule, naming their templates."""
    out: list[str] = []
    for row in rows:
        for title, lines in (
            ("synth", (row.synth_error,) if row.synth_error else ()),
            ("validation", row.validation_failures),
            ("cfn-lint errors", row.lint_errors),
            (
                "resources",
                (f"{row.resources} resources, past {MAX_STACK_RESOURCES}",)
                if row.resources > MAX_STACK_RESOURCES
                else (),
            ),
        ):
            if lines:
                out += [f"== {row.name}: {title}", *(f"  {line}" for line in lines)]
    warnings: dict[str, dict[str, set[str]]] = defaultdict(lambda: defaultdict(set))
    for row in rows:
        for line in row.lint_warnings:
            warnings[line.split(" ", 1)[0]][line.split(" ", 1)[1].split(":", 1)[0]].add(row.name)
    if warnings:
        out.append("== cfn-lint warnings (allowed): rule, where, in how many templates")
        for rule, places in sorted(warnings.items()):
            out += [f"  {rule} {where} ({len(names)})" for where, names in sorted(places.items())]
    failed: dict[tuple[str, str], dict[str, set[str]]] = defaultdict(lambda: defaultdict(set))
    for check in checks:
        if check["outcome"] == "failed":
            template = Path(check["file_path"]).name.removesuffix(SUFFIX)
            failed[(check["check_id"], check["check_name"])][check["resource"]].add(template)
    if failed:
        out.append("== checkov failed checks: check, resource, in how many templates")
        for (check_id, name), resources in sorted(failed.items()):
            out.append(f"  {check_id} {name}")
            out += [f"    {resource} ({len(names)})" for resource, names in sorted(resources.items())]
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    """Synthesize, lint and scan the matrix; 0 when every template passes."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=ROOT / ".build" / "templates", help="where the templates go")
    parser.add_argument("--only", action="append", default=[], help="only templates whose name contains this")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="synths at once (default: cores)")
    parser.add_argument("--checkov", type=Path, default=ROOT / ".venv-iac" / "bin" / "checkov")
    parser.add_argument("--config", type=Path, default=ROOT / ".checkov.yaml", help="checkov's config file")
    args = parser.parse_args(argv)
    if not args.checkov.exists():
        print(f"no {args.checkov}: `make template-check` builds .venv-iac", file=sys.stderr)
        return 2
    targets = [t for t in TARGETS if not args.only or any(part in str(t) for part in args.only)]
    args.out.mkdir(parents=True, exist_ok=True)
    for stale in args.out.glob(f"*{SUFFIX}"):  # checkov scans the folder: only this run's templates
        stale.unlink()

    started = time.monotonic()
    print(f"synth and cfn-lint: {len(targets)} templates, {args.jobs} at once", flush=True)
    rows: dict[str, Checked] = {}
    # spawn, not fork: each worker starts its own jsii runtime (a forked one would share the parent's pipes).
    with ProcessPoolExecutor(max_workers=args.jobs, mp_context=get_context("spawn")) as pool:
        futures = [pool.submit(synthesize_and_lint, target, args.out) for target in targets]
        for done, future in enumerate(as_completed(futures), start=1):
            row = future.result()
            rows[row.name] = row
            state = row.synth_error or (
                f"{row.resources} resources, synth {row.synth_seconds:.1f} s, cfn-lint {row.lint_seconds:.1f} s: "
                f"{len(row.lint_errors)} errors, {len(row.lint_warnings)} warnings"
                + (f", {len(row.validation_failures)} validation failures" if row.validation_failures else "")
            )
            print(f"[{done}/{len(targets)}] {row.name}: {state}", flush=True)
    synth_seconds = time.monotonic() - started

    started = time.monotonic()
    print(f"checkov on {args.out}, {args.jobs} at once ...", flush=True)
    written = [args.out / f"{row}{SUFFIX}" for row in rows]
    checks = run_checkov(args.checkov, args.config, [path for path in written if path.exists()], args.jobs)
    for check in checks:
        row = rows[Path(check["file_path"]).name.removesuffix(SUFFIX)]
        row.checkov[check["outcome"]] += 1
    checkov_seconds = time.monotonic() - started

    ordered = [rows[str(t)] for t in targets]
    print()
    print(table(ordered))
    print()
    print(findings(ordered, checks))
    print(f"\nsynth and cfn-lint {synth_seconds:.0f} s, checkov {checkov_seconds:.0f} s")
    failed = [row.name for row in ordered if row.failed]
    if failed:
        print(f"FAILED: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
