"""Lambda entrypoint: admin reads of the audit ledger (/admin/v1/audit/...)."""

from flowledger.api.app import rest_handler
from flowledger.api.audit import router

handler = rest_handler(router, service="audit")
