"""The diagnosis agent: a ReAct loop over logs, SQL and knowledge, its budget, and its release guards."""
