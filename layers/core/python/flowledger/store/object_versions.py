"""Every version of objects under a prefix, and deleting them all: what erasing an object for good takes.

In a versioned bucket a plain delete only adds a delete marker and keeps every earlier version; erasure
names each version (and each marker) by id.
"""

from __future__ import annotations

from typing import Any

from botocore.exceptions import ClientError

from flowledger.errors import UpstreamUnavailable


def object_versions(s3: Any, bucket: str, prefix: str) -> list[dict[str, str]]:
    """Every object version and delete marker under ``prefix``, as ``DeleteObjects`` names them."""
    found: list[dict[str, str]] = []
    for page in s3.get_paginator("list_object_versions").paginate(Bucket=bucket, Prefix=prefix):
        for entry in [*page.get("Versions", []), *page.get("DeleteMarkers", [])]:
            found.append({"Key": entry["Key"], "VersionId": entry["VersionId"]})
    return found


def delete_object_versions(s3: Any, bucket: str, what: str, versions: list[dict[str, str]]) -> None:
    """Delete these versions, one ``DeleteObject`` each; ``UpstreamUnavailable`` (retry) naming ``what`` on a
    refusal. One at a time, not ``DeleteObjects``: the embedded store of ``flowledger serve`` saves a whole
    snapshot for every ``DeleteObjects`` (its journal cannot replay one), and what is erased here is a few
    versions a document or a snapshot family, so a request each costs little on AWS too."""
    for version in versions:
        try:
            s3.delete_object(Bucket=bucket, Key=version["Key"], VersionId=version["VersionId"])
        except ClientError as exc:
            code = exc.response.get("Error", {}).get("Code")
            raise UpstreamUnavailable(f"S3 kept an object version of {what} ({code}); try again") from None


def delete_every_version(s3: Any, bucket: str, prefix: str) -> int:
    """Delete every object version and delete marker under ``prefix``; how many there were."""
    versions = object_versions(s3, bucket, prefix)
    delete_object_versions(s3, bucket, prefix, versions)
    return len(versions)
