"""Lambda entrypoint: admin reads of the audit ledger (/admin/v1/audit/...)."""

from flowledger.api.registry import capability_handler

handler = capability_handler("audit")
