"""Lambda entrypoint: subjects, legal holds and erasure (/admin/v1/subjects/...), with the erasure's own role."""

from flowledger.api.registry import capability_handler

handler = capability_handler("subjects")
