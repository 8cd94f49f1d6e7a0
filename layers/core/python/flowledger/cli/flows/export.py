"""`flowledger flows export`: closed flows of a time window as JSONL, raw records or DPO preference pairs.

Every flag is checked before the store is read or a file is made. Records stream from the store to the
output one line at a time; ``--out FILE`` is written to a temporary file beside it and renamed over it
only when the export has finished, so a failed or interrupted export leaves no half file. A progress bar
draws on stderr when it is a terminal (not with ``--quiet``); the last line on stderr says what was written.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import tempfile
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from flowledger.cli import store
from flowledger.cli.failures import CommandFailed
from flowledger.cli.options import command, share, store_option
from flowledger.cli.text import counted

if TYPE_CHECKING:
    from flowledger.reasoning.export import ExportWindow

MAX_LIMIT = 100_000  # reasoning.dataset.MAX_RECORDS: a file `flows lint` reads (a unit test holds them equal)
FORMATS = ("raw", "dpo")


def add_command(flows: Any) -> None:
    """Add ``export`` to the ``flows`` group."""
    export = command(
        flows,
        "export",
        "write the closed flows of a time window as JSONL: raw records or DPO preference pairs",
        cmd_flows_export,
        "raw: one flow record per line (what `flows lint` and `flows signature-check` read), oldest close"
        " first; no step inputs or outputs, no trigger summary, no patient id, back-refs as booleans, a summary"
        " the guard flags shown as a placeholder. dpo: prompt/chosen/rejected pairs of flows of one trigger"
        " family with opposite outcomes (a reused pathway against an aborted flow or a demoted pathway, an"
        " accepted claim against a rejected one), for TRL's DPOTrainer. Reads the window through the closed-flow"
        " index: flows closed before that index existed are not exported.",
    )
    export.add_argument("--format", choices=FORMATS, default="raw", help="raw records (default) or dpo pairs")
    add_window_options(export)
    export.add_argument("--out", default="-", metavar="FILE|-", help="where to write (default -: stdout)")
    export.add_argument("--quiet", action="store_true", help="no progress bar (the summary line stays)")
    store_option(export)


def add_window_options(parser: argparse.ArgumentParser) -> None:
    """``--since --until --outcome --min-confidence --limit``: which closed flows (shared with otel-export)."""
    parser.add_argument(
        "--since", type=utc_instant, help="closed at or after this UTC time, ISO-8601 (2026-01-01 or ...T08:00:00Z)"
    )
    parser.add_argument("--until", type=utc_instant, help="closed before this UTC time, ISO-8601")
    parser.add_argument(
        "--outcome",
        type=outcome_filter,
        help="only flows in this state (completed, aborted) or with this outcome type (claim_created,"
        " recommendation_delivered, no_action, insufficient_evidence, error, timeout)",
    )
    parser.add_argument(
        "--min-confidence",
        type=share,
        help="only flows whose lowest confidence across steps and outcome is at least this (0 to 1);"
        " a flow with no confidence is left out",
    )
    parser.add_argument(
        "--limit",
        type=record_limit,
        default=MAX_LIMIT,
        help=f"at most this many flows, 1 to {MAX_LIMIT:,} (default {MAX_LIMIT:,}: one file's worth)",
    )


def window_from_args(args: argparse.Namespace) -> ExportWindow:
    """The window the flags name; raises ``InvalidInput`` when since is not before until."""
    from flowledger.reasoning.export import ExportWindow

    return ExportWindow(
        since=args.since, until=args.until, outcome=args.outcome, min_confidence=args.min_confidence, limit=args.limit
    )


def utc_instant(value: str) -> str:
    """An argparse type: an ISO-8601 UTC date or time as the ledger writes timestamps (text order is time order).

    A date alone is midnight UTC; a time needs ``Z`` or ``+00:00``, since a local time would move the window.
    """
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not an ISO-8601 date or time") from None
    if moment.tzinfo is None:
        if "T" in value or " " in value.strip():
            raise argparse.ArgumentTypeError(f"{value!r} has no time zone: add Z for UTC")
        moment = moment.replace(tzinfo=UTC)
    if moment.utcoffset() != UTC.utcoffset(None):
        raise argparse.ArgumentTypeError(f"{value!r} is not UTC: use Z or +00:00")
    if moment.year < 1000:
        raise argparse.ArgumentTypeError(f"{value!r} is before the year 1000")
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def outcome_filter(value: str) -> str:
    """An argparse type: a flow state or an outcome type."""
    from typing import get_args

    from flowledger.reasoning.models import Outcome

    known = ("completed", "aborted", *get_args(Outcome.model_fields["type"].annotation))
    if value not in known:
        raise argparse.ArgumentTypeError(f"{value!r} is not one of {', '.join(known)}")
    return value


def record_limit(value: str) -> int:
    """An argparse type: a whole number of flows from 1 to :data:`MAX_LIMIT`."""
    try:
        number = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not a whole number") from None
    if not 1 <= number <= MAX_LIMIT:
        raise argparse.ArgumentTypeError(f"{value} is not between 1 and {MAX_LIMIT:,}")
    return number


def cmd_flows_export(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    window = window_from_args(args)  # before any file is made or the store is reached
    target = "stdout" if args.out == "-" else args.out
    with _output(args.out) as out:
        services = store.services(args.data_dir)
        from flowledger.reasoning.export import ClosedFlowReader

        reader = ClosedFlowReader(services, window)
        # tqdm draws only on a terminal (disable=None), and never on stdout, where the records go.
        with tqdm(
            desc="flows", unit=" flows", leave=False, disable=True if args.quiet else None, file=sys.stderr
        ) as bar:
            records = _Counted(reader.records(), bar)
            if args.format == "raw":
                for record in records:
                    out.write(record.model_dump_json(exclude_none=True))
                    out.write("\n")
                summary = f"{counted(records.count, 'flow')} written to {target}"
            else:
                from flowledger.reasoning.preference import PreferencePairs

                pairer = PreferencePairs(services)
                pairer.add_all(records)
                for pair in pairer.pairs():
                    out.write(pair.model_dump_json())
                    out.write("\n")
                counts = pairer.counts
                summary = (
                    f"{counted(counts.pairs, 'pair')} written to {target} from {counted(counts.flows, 'flow')}"
                    f" ({counts.chosen} chosen, {counts.rejected} rejected, {counts.unlabelled} unlabelled"
                    + (f", {counts.too_long} too long" if counts.too_long else "")
                    + (f", {counts.over_family_cap} over the family cap" if counts.over_family_cap else "")
                    + ")"
                )
    if reader.skipped:
        summary += f"; {counted(reader.skipped, 'flow')} skipped (unreadable, logged)"
    if reader.erased:
        summary += f"; {counted(reader.erased, 'flow')} erased (tombstones: admin.subject.flow_erased in the ledger)"
    if reader.limit_reached:
        summary += f"; stopped at --limit {window.limit:,}: narrow the window for the rest"
    print(f"flowledger: {summary}", file=sys.stderr)
    return 0


class _Counted:
    """The records, counted and ticked on the progress bar as they pass."""

    def __init__(self, records: Iterator[Any], bar: Any) -> None:
        self._records = records
        self._bar = bar
        self.count = 0

    def __iter__(self) -> Iterator[Any]:
        for record in self._records:
            self.count += 1
            self._bar.update()
            yield record


@contextlib.contextmanager
def _output(name: str) -> Iterator[IO[str]]:
    """stdout for ``-``; otherwise a temporary file beside ``name``, renamed over it only on success."""
    if name == "-":
        yield sys.stdout
        return
    path = Path(name)
    try:
        handle, temporary = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".partial", dir=path.parent)
    except OSError as exc:
        raise CommandFailed(f"{name}: cannot write in {path.parent} ({exc.strerror or type(exc).__name__})") from None
    try:
        with os.fdopen(handle, "w", encoding="utf-8", newline="\n") as file:
            yield file
            file.flush()
            os.fsync(file.fileno())
        _finish(Path(temporary), path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temporary)  # a failed export leaves nothing behind; after the rename it is gone already


def _finish(temporary: Path, path: Path) -> None:
    """Give the finished file an ordinary file's mode (mkstemp makes 0600) and move it into place."""
    umask = os.umask(0)
    os.umask(umask)
    try:
        temporary.chmod(0o666 & ~umask)
        os.replace(temporary, path)
    except OSError as exc:
        raise CommandFailed(f"{path}: {exc.strerror or type(exc).__name__}") from None
