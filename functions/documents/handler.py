"""Lambda entrypoint: workspace and document routes (/api/workspaces, /api/documents)."""

from flowledger.api.registry import capability_handler

handler = capability_handler("documents")
