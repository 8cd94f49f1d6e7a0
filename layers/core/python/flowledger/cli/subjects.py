"""`flowledger subjects show|erase|hold|release`: what is held about a patient, legal holds, and erasure."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from flowledger.cli import store
from flowledger.cli.options import actions, bounded_text, command, json_option, pattern, store_option

REASON_PATTERN = r"^[A-Za-z0-9_.:/@+=-]{1,128}$"
# flowledger.subjects.PATIENT_ID_PATTERN, written out: building the parser imports no library (a test holds them equal)
PATIENT_ID_PATTERN = r"^[A-Za-z0-9_.:-]{1,128}$"
ROUND_SECONDS = 5.0  # one round of erasing between progress lines


def add_commands(commands: Any) -> None:
    """Add the ``subjects`` group."""
    subjects = actions(
        command(commands, "subjects", "patients' data: what is held, legal holds, erasure"), "subjects_command"
    )
    show = command(subjects, "show", "what is held about a patient, by class and since when", cmd_show)
    _patient(show)
    json_option(show, "the subject")
    erase = command(
        subjects,
        "erase",
        "erase a patient's data for good (idempotent: run it again to resume); refused under a legal hold",
        cmd_erase,
    )
    _patient(erase)
    erase.add_argument(
        "--reason",
        required=True,
        type=pattern(REASON_PATTERN, "a reason code (letters, digits and _.:/@+=-, no spaces)"),
        help="why, as a code the ledger records: gdpr_art17_request, ticket:INC-2211",
    )
    json_option(erase, "the erasure receipt")
    hold = command(subjects, "hold", "place a legal hold: no erasure or retention touches the patient", cmd_hold)
    _patient(hold)
    hold.add_argument("--reason", required=True, type=bounded_text(500), help="why (shown to whoever tries to erase)")
    release = command(subjects, "release", "lift a patient's legal hold", cmd_release)
    _patient(release)


def _patient(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("patient_id", type=pattern(PATIENT_ID_PATTERN, "a patient id"), help="the patient's id")
    store_option(parser)


def _operator() -> Any:
    import getpass

    from flowledger.identity import Principal

    return Principal(kind="iam", id=f"cli:{getpass.getuser()}")


def cmd_show(args: argparse.Namespace) -> int:
    from flowledger.subjects.holdings import subject_view

    view = subject_view(store.services(args.data_dir), args.patient_id)
    if args.json:
        print(view.model_dump_json(indent=2))
        return 0
    print(f"{view.patient_id} ({view.subject_id}): {view.state}")
    for held in view.classes:
        print(f"  {held.data_class:<14} {held.items:>7,}  since {held.since or '-'}")
    if view.pseudonym:
        print(f"  the ledger names them patient:{view.pseudonym}")
    if view.hold:
        print(f"  legal hold since {view.hold.placed_at} by {view.hold.placed_by}: {view.hold.reason}")
    if view.erasure:
        erasure = view.erasure
        print(f"  erasure {erasure.erasure_id} ({erasure.reason}) {erasure.phase}, begun {erasure.started_at}")
    return 0


def cmd_erase(args: argparse.Namespace) -> int:
    import time

    from tqdm import tqdm

    from flowledger.subjects.erasure import SubjectErasure

    erasure = SubjectErasure(store.services(args.data_dir))
    operator = _operator()
    # tqdm draws only on a terminal (disable=None), never over JSON output.
    with tqdm(desc=f"erasing {args.patient_id}", unit=" flows", disable=None, file=sys.stderr) as bar:
        while True:
            view = erasure.erase(operator, args.patient_id, args.reason, time.monotonic() + ROUND_SECONDS)
            bar.n = view.counts["flows"]
            bar.set_postfix(phase=view.phase, steps=view.counts["steps"], sessions=view.counts["sessions"])
            if view.phase == "completed":
                break
    if args.json:
        print(view.model_dump_json(indent=2))
        return 0
    counts = ", ".join(f"{value:,} {name.replace('_', ' ')}" for name, value in view.counts.items() if value)
    print(f"erased {args.patient_id} ({view.subject_id}): {counts or 'nothing was held'}")
    print(f"receipt: admin.subject.erased at {view.receipt_event or 'the ledger'}; final after {view.final_after}")
    return 0


def cmd_hold(args: argparse.Namespace) -> int:
    from flowledger.subjects.holds import LegalHolds

    hold = LegalHolds(store.services(args.data_dir)).place(_operator(), args.patient_id, args.reason)
    print(f"legal hold placed on {args.patient_id} at {hold.placed_at}")
    return 0


def cmd_release(args: argparse.Namespace) -> int:
    from flowledger.subjects.holds import LegalHolds

    LegalHolds(store.services(args.data_dir)).lift(_operator(), args.patient_id)
    print(f"legal hold on {args.patient_id} lifted")
    return 0
