"""Replay (``flowledger flows replay``): run agents on fixed cases and hold their recorded flows to the golden corpus.

``cases`` loads the cases, ``invokers`` holds the AgentInvoker port and the stub, ``harness`` compares,
``agents`` runs Flowledger's own agents on the offline model against the embedded store of ``embedded``
(the only module here that reaches moto: the real invokers need the dev install).
"""
