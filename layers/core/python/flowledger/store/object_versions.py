"""Every version of objects under a prefix, and deleting them all: what erasing an object for good takes.

In a versioned bucket a plain delete only adds a delete marker and keeps every earlier version; erasure
names each version (and each marker) by id.
"""

from __future__ import annotations

from typing import Any

from flowledger.errors import UpstreamUnavailable

DELETE_OBJECTS_MOST = 1000  # DeleteObjects' limit per request


def object_versions(s3: Any, bucket: str, prefix: str) -> list[dict[str, str]]:
    """Every object version and delete marker under ``prefix``, as ``DeleteObjects`` names them."""
    found: list[dict[str, str]] = []
    for page in s3.get_paginator("list_object_versions").paginate(Bucket=bucket, Prefix=prefix):
        for entry in [*page.get("Versions", []), *page.get("DeleteMarkers", [])]:
            found.append({"Key": entry["Key"], "VersionId": entry["VersionId"]})
    return found


def delete_object_versions(s3: Any, bucket: str, what: str, versions: list[dict[str, str]]) -> None:
    """Delete these versions; ``UpstreamUnavailable`` (retry) naming ``what`` when S3 keeps any."""
    for start in range(0, len(versions), DELETE_OBJECTS_MOST):
        batch = versions[start : start + DELETE_OBJECTS_MOST]
        errors = s3.delete_objects(Bucket=bucket, Delete={"Objects": batch, "Quiet": True}).get("Errors")
        if errors:
            raise UpstreamUnavailable(
                f"S3 kept {len(errors)} object version(s) of {what} ({errors[0].get('Code')}); erase it again"
            )


def delete_every_version(s3: Any, bucket: str, prefix: str) -> int:
    """Delete every object version and delete marker under ``prefix``; how many there were."""
    versions = object_versions(s3, bucket, prefix)
    delete_object_versions(s3, bucket, prefix, versions)
    return len(versions)
