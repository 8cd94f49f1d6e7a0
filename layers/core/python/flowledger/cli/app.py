"""The ``flowledger`` parser tree and the one place a command's failure becomes its exit status.

Building the tree imports each group's module, and those import only ``argparse`` and the standard
library at their top: ``flowledger --help`` costs milliseconds, and each command loads what it needs
(boto3, httpx, the dev server) when it runs.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from flowledger import __version__
from flowledger.cli import (
    audit,
    backlog,
    chat,
    evaluation,
    jobs,
    knowledge,
    model,
    pathways,
    research,
    serve,
    subjects,
    token,
    witness,
)
from flowledger.cli.failures import aws_refusal, fail
from flowledger.cli.flows import group as flows
from flowledger.errors import FlowledgerError

DESCRIPTION = (
    "Flowledger's console: the local dev server, tokens, jobs, the audit ledger, the backlog, pathways,"
    " knowledge documents and chat. Store commands use a running dev server with --data-dir, AWS otherwise."
)
EPILOG = "exit status: 0 done, 1 a check or an answer failed, 2 the command could not run, 130 interrupted"
GROUPS = (
    serve,
    token,
    jobs,
    audit,
    witness,
    backlog,
    pathways,
    knowledge,
    research,
    evaluation,
    flows,
    model,
    chat,
    subjects,
)


def build_parser() -> argparse.ArgumentParser:
    """``flowledger`` and every command group, in the order ``--help`` lists them."""
    parser = argparse.ArgumentParser(prog="flowledger", description=DESCRIPTION, epilog=EPILOG)
    parser.add_argument("--version", action="version", version=f"flowledger {__version__}", help="print the version")
    commands = parser.add_subparsers(
        dest="command",
        required=True,
        metavar="COMMAND",
        title="commands",
        help="`flowledger COMMAND --help` shows its options",
    )
    for group in GROUPS:
        group.add_commands(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; an expected failure is one line on stderr and exit 2 (1 when a check failed)."""
    args = build_parser().parse_args(argv)
    problem = args.options_problem(args) if hasattr(args, "options_problem") else None
    if problem:
        args.command_parser.error(problem)
    # botocore's exceptions alone load in a few milliseconds; boto3 itself loads only for a store command.
    from botocore.exceptions import (
        BotoCoreError,
        ClientError,
        EndpointConnectionError,
        NoCredentialsError,
        PartialCredentialsError,
    )

    data_dir = getattr(args, "data_dir", None)
    try:
        status = int(args.func(args))
        sys.stdout.flush()  # a buffered pipe fails here, inside the handlers below, rather than at exit
        return status
    except FlowledgerError as exc:
        return fail(exc.message)
    except (NoCredentialsError, PartialCredentialsError):
        return fail(
            "no AWS credentials: set AWS_PROFILE or AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY,"
            " or pass --data-dir (FLOWLEDGER_DATA_DIR) of a running `flowledger serve`"
        )
    except EndpointConnectionError as exc:
        url = exc.kwargs.get("endpoint_url", "the AWS endpoint")
        if data_dir is not None:
            return fail(f"cannot reach the store at {url}: is `flowledger serve --data-dir {data_dir}` running?")
        return fail(f"cannot reach {url}: check the network and AWS_REGION")
    except ClientError as exc:
        return fail(aws_refusal(exc, data_dir))
    except BotoCoreError as exc:
        return fail(f"AWS: {exc}")
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # The reader went away (`| head`): stop quietly as other tools do, and keep the exit-time
        # flush of stdout from printing a second traceback.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
