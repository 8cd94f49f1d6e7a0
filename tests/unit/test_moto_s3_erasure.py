"""Deleting every version of an S3 object leaves its name and body nowhere in moto's S3 backend."""

from __future__ import annotations

import pickle
from collections.abc import Iterator

import pytest
from moto.s3.exceptions import MissingBucket
from moto.s3.models import FakeDeleteMarker, S3Backend

from flowledger.local import moto_s3_erasure

ACCOUNT = "123456789012"
SECRET_KEY = "patients/erase-me-7f3a/letter.txt"


@pytest.fixture
def backend() -> Iterator[S3Backend]:
    moto_s3_erasure.install()
    backend = S3Backend("us-east-1", ACCOUNT)
    backend.create_bucket("versioned", "us-east-1")
    backend.put_bucket_versioning("versioned", "Enabled")
    backend.create_bucket("plain", "us-east-1")
    yield backend
    backend.reset()


def put(backend: S3Backend, bucket: str, body: bytes, tags: dict[str, str] | None = None) -> str:
    """A PUT as moto's S3 handler makes it: the object, then its tags (none too)."""
    key = backend.put_object(bucket, SECRET_KEY, body)
    backend.put_object_tagging(key, tags or {})
    return str(key.version_id)


def leftovers(backend: S3Backend) -> list[str]:
    return [arn for arn in backend.tagger.tags if "erase-me" in arn]


def test_deleting_each_version_and_marker_removes_the_tags_and_the_markers_link(backend: S3Backend) -> None:
    first = put(backend, "versioned", b"erase-me body one", {"kind": "letter"})
    second = put(backend, "versioned", b"erase-me body two")
    _, marker = backend.delete_object("versioned", SECRET_KEY)  # a marker over the second version
    assert len(leftovers(backend)) == 2

    backend.delete_object("versioned", SECRET_KEY, version_id=second)
    assert len(leftovers(backend)) == 1
    stored = backend.buckets["versioned"].keys.getlist(SECRET_KEY)
    (left,) = [version for version in stored if isinstance(version, FakeDeleteMarker)]
    assert left.key is None  # the marker no longer holds the deleted version (and its body)
    assert b"body two" not in pickle.dumps(stored)

    backend.delete_objects("versioned", [{"Key": SECRET_KEY, "VersionId": first}])  # the batch path too
    backend.delete_object("versioned", SECRET_KEY, version_id=marker["version-id"])
    assert SECRET_KEY not in backend.buckets["versioned"].keys
    assert leftovers(backend) == []


def test_a_marker_over_a_marker_keeps_its_link_and_moto_still_says_so(backend: S3Backend) -> None:
    put(backend, "versioned", b"erase-me body")
    _, lower = backend.delete_object("versioned", SECRET_KEY)
    _, upper = backend.delete_object("versioned", SECRET_KEY)  # a marker over the marker
    _, answer = backend.delete_object("versioned", SECRET_KEY, version_id=upper["version-id"])
    assert answer.get("delete-marker") == "true"  # moto read the link it needed
    backend.delete_object("versioned", SECRET_KEY, version_id=lower["version-id"])
    assert len(leftovers(backend)) == 1  # the version itself is still stored, with its tags


def test_deleting_an_object_of_an_unversioned_bucket_removes_its_tags(backend: S3Backend) -> None:
    put(backend, "plain", b"erase-me body", {"kind": "letter"})
    assert len(leftovers(backend)) == 1
    backend.delete_object("plain", SECRET_KEY)
    assert leftovers(backend) == []


def test_a_missing_bucket_is_still_moto_s_to_refuse(backend: S3Backend) -> None:
    with pytest.raises(MissingBucket):
        backend.delete_object("no-such-bucket", SECRET_KEY)
