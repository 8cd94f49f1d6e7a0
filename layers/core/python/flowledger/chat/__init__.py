"""The chat use case: one persisted run per turn, a strict router, fixed isolated executors."""
