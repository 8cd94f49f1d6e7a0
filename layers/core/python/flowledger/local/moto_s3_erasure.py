"""A deleted S3 object version leaves nothing of itself in moto's S3 backend.

moto keeps two things past a version's deletion, and both go into every snapshot of the embedded store
(``moto_state``):

- its tag set, stored under the version's "ARN" (``arn:aws:s3:::bucket/key/version``) in the backend's
  ``tagger``: every PUT makes one, with no tags too, and no delete removes it, so the object's name
  outlives every version of it;
- a delete marker's link to the version it covered (``FakeDeleteMarker.key``): a marker left in place
  keeps that version whole, body included, after the version itself was deleted.

An erasure deletes every version and marker of an object, and the store must not keep its name or its
body: this removes the tags of each version a delete removed and cuts the links of the markers left to
versions no longer stored (moto reads a marker's link only to ask whether it is another marker).
``delete_objects`` deletes through ``delete_object``, so one patch covers both. Installed by the locked
server, like :mod:`moto_transactions`.
"""

from __future__ import annotations

import functools
from typing import Any

from moto.s3.models import FakeDeleteMarker, FakeKey, S3Backend

_INSTALLED = False


def forget_deleted(backend: S3Backend, before: list[Any], after: list[Any]) -> None:
    """Drop what ``backend`` keeps of the versions in ``before`` that are no longer in ``after``."""
    stored = {id(version) for version in after}
    for version in before:
        if isinstance(version, FakeKey) and id(version) not in stored:
            backend.tagger.delete_all_tags_for_resource(version.arn)
    for version in after:
        link = version
        while isinstance(link, FakeDeleteMarker):
            covered = getattr(link, "key", None)
            if isinstance(covered, FakeKey) and id(covered) not in stored:
                link.key = None  # type: ignore[assignment]  # moto only asks whether it is a marker
                break
            link = covered


def install() -> None:
    """Patch moto's ``S3Backend.delete_object`` (idempotent)."""
    global _INSTALLED
    if _INSTALLED:
        return
    original = S3Backend.delete_object

    @functools.wraps(original)
    def delete_object(
        self: S3Backend, bucket_name: str, key_name: str, version_id: str | None = None, bypass: bool = False
    ) -> tuple[bool, dict[str, Any]]:
        try:
            keys = self.get_bucket(bucket_name).keys
        except Exception:  # no such bucket, or not this account's: moto answers that itself
            keys = None
        before = list(keys.getlist(key_name, None) or []) if keys is not None else []
        result = original(self, bucket_name, key_name, version_id=version_id, bypass=bypass)
        if keys is not None:
            forget_deleted(self, before, list(keys.getlist(key_name, None) or []))
        return result

    S3Backend.delete_object = delete_object  # type: ignore[method-assign]
    _INSTALLED = True
