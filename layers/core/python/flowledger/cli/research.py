"""`flowledger research run|correlate`: the research agents once against the local or AWS store.

An agent that gives up, or a model whose configuration cannot be read, is an answer that failed: one
line and exit 1, as ``chat`` does; input refused before anything runs is exit 2. The agents load only
when one runs.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict
from typing import Any

from flowledger.cli import store
from flowledger.cli.failures import fail
from flowledger.cli.options import actions, bounded_text, command, json_option, pattern, store_option
from flowledger.cli.text import counted

TRIGGER_TYPE_PATTERN = r"^[a-z][a-z0-9_.-]{0,63}$"  # a trigger type, as a flow records it
MAX_TRIGGER_REF_CHARS = 256
MAX_RESEARCH_QUESTION_CHARS = 2000
NOT_RECORDED = "not recorded (REASONING_FLOW_CAPTURE_ENABLED is off, or recording failed)"


def add_commands(commands: Any) -> None:
    """Add ``research run`` and ``research correlate``."""
    trigger_type = pattern(TRIGGER_TYPE_PATTERN, "a trigger type (lowercase letters, digits, '_', '.', '-')")
    research = actions(
        command(commands, "research", "run the research agents once against the local or AWS store"),
        "research_command",
    )
    run = command(
        research,
        "run",
        "research one question: retrieval, a checked synthesis and an evidence score, recorded as one flow",
        cmd_research_run,
        "A weak result enqueues deeper research when RESEARCH_AUTO_ENQUEUE_ENABLED is on; the flow is"
        " recorded when REASONING_FLOW_CAPTURE_ENABLED is on. Exits 1 when the researcher gives up.",
    )
    run.add_argument("question", type=bounded_text(MAX_RESEARCH_QUESTION_CHARS), help="the question to research")
    run.add_argument("--trigger-type", required=True, type=trigger_type, help="the flow's trigger type, e.g. lab_trend")
    run.add_argument(
        "--trigger-ref",
        required=True,
        type=bounded_text(MAX_TRIGGER_REF_CHARS),
        help="what triggered it, e.g. lab/hba1c-trend (its words are one of the retrieval queries)",
    )
    json_option(run, "the finding")
    store_option(run)
    correlate = command(
        research,
        "correlate",
        "recommend what a trigger family needs from its closed flows of the last 7 days",
        cmd_research_correlate,
        "Exits 1 when the correlator gives up.",
    )
    correlate.add_argument("trigger_type", type=trigger_type, help="the family's trigger type, e.g. user_question")
    json_option(correlate, "the recommendation and its aggregate")
    store_option(correlate)


def cmd_research_run(args: argparse.Namespace) -> int:
    from flowledger.llm.aws_model_config import ModelUnavailable
    from flowledger.research.agents.recording import AgentGaveUp, research_recorder
    from flowledger.research.agents.researcher import Researcher, ResearchQuestion

    services = store.agent_services(args.data_dir)
    question = ResearchQuestion(args.trigger_type, args.trigger_ref, args.question)
    try:
        finding = Researcher(services, store.agent_model(services), research_recorder(services)).research(question)
    except (AgentGaveUp, ModelUnavailable) as exc:
        return fail(exc.message, status=1)
    answer = finding.answer
    if args.json:
        body = {
            "outcome": finding.outcome,
            "composite_k": finding.composite_k,
            "hits": finding.hits,
            "queries": finding.queries,
            "answer": answer.model_dump(mode="json") if answer else None,
            "flow_id": finding.flow_id,
            "claim_id": finding.claim_id,
        }
        print(json.dumps(body, indent=2))
        return 0
    print(f"outcome      {finding.outcome}")
    print(f"composite_k  {finding.composite_k:.2f}")
    queries = f"{finding.queries} {'query' if finding.queries == 1 else 'queries'}"
    print(f"hits         {counted(finding.hits, 'document')} from {queries}")
    print(f"flow         {finding.flow_id or NOT_RECORDED}")
    if answer is not None:
        print(f"\n{answer.text}")
        for reference in answer.references:
            print(f"  [{reference.document_id}] {reference.title}")
        if answer.limitations:
            print(f"limitations: {answer.limitations}")
    return 0


def cmd_research_correlate(args: argparse.Namespace) -> int:
    from flowledger.llm.aws_model_config import ModelUnavailable
    from flowledger.research.agents.correlator import Correlator
    from flowledger.research.agents.recording import AgentGaveUp, research_recorder

    services = store.agent_services(args.data_dir)
    try:
        found = Correlator(services, store.agent_model(services), research_recorder(services)).correlate(
            args.trigger_type
        )
    except (AgentGaveUp, ModelUnavailable) as exc:
        return fail(exc.message, status=1)
    aggregate = found.aggregate
    if args.json:
        body = {
            "trigger_type": found.trigger_type,
            "recommendation": found.recommendation,
            "reason_code": found.reason_code,
            "aggregate": asdict(aggregate),
            "flow_id": found.flow_id,
        }
        print(json.dumps(body, indent=2))
        return 0
    confidence = aggregate.mean_delivered_confidence
    print(f"recommendation  {found.recommendation} ({found.reason_code})")
    print(
        f"family          {found.trigger_type}: {counted(aggregate.flows, 'closed flow')} of the last 7 days,"
        f" {aggregate.aborted} aborted, {counted(aggregate.distinct_refs, 'distinct trigger ref')}"
    )
    outcomes = ", ".join(f"{kind} {count}" for kind, count in aggregate.outcomes.items())
    print(f"outcomes        {outcomes or '-'}")
    print(f"mean delivered  {'-' if confidence is None else f'{confidence:.2f}'}")
    print(f"flow            {found.flow_id or NOT_RECORDED}")
    return 0
