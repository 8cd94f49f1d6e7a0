"""Research backlog and claim triage: the self-improvement loop's queues, sweep, health and consumer."""
