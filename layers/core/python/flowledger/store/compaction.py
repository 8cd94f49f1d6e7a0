"""After an erasure, the embedded local store keeps no earlier copy of what was erased.

In AWS a deleted DynamoDB item or S3 object version is gone from what the application can reach. The
embedded store that ``flowledger serve`` runs (``flowledger.local``) also keeps files: a write-ahead journal
holding every write (items as written, object bodies as uploaded) and snapshots of the whole store. An
erasure's deletes are journaled like any write, and the values they deleted stay in the older journal
segments and snapshot until the next periodic snapshot replaces them. :func:`compact_embedded_store` asks
the store to drop them now.

The embedded store is reached only on this machine (``http://127.0.0.1:<port>``, ``aws_endpoint_url``): an
endpoint anywhere else is AWS or a stand-in for it, which keeps no such files here, and nothing is asked.
"""

from __future__ import annotations

import ipaddress
import json
import urllib.error
import urllib.request
from urllib.parse import urlsplit

from flowledger.config import Settings
from flowledger.errors import UpstreamUnavailable

COMPACT_PATH = "/_flowledger/compact"  # answered by the embedded store itself (local/moto_server.py)
# A compaction pickles the whole store in a forked process and waits for any snapshot already running:
# a few seconds for a large store, well inside this.
DEFAULT_TIMEOUT_SECONDS = 60.0
_MAX_ANSWER_BYTES = 4096


def embedded_endpoint(settings: Settings) -> str | None:
    """The embedded local store's endpoint URL, or None (AWS itself, or moto in this process in tests)."""
    endpoint = settings.aws_endpoint_url
    if not endpoint:
        return None
    parts = urlsplit(endpoint)
    if parts.scheme != "http" or not parts.hostname:
        return None
    if parts.hostname != "localhost":
        try:
            if not ipaddress.ip_address(parts.hostname).is_loopback:
                return None
        except ValueError:
            return None
    return endpoint.rstrip("/")


def compact_embedded_store(settings: Settings, *, timeout_seconds: float = DEFAULT_TIMEOUT_SECONDS) -> bool:
    """After an erasure, make the embedded store drop every earlier journal segment and snapshot.

    Call it once the erasure's DynamoDB and S3 deletes were answered: on return the store's files on disk
    hold only what it holds now, so none keeps an erased value. True when the embedded store compacted; on
    AWS (or with moto in this process, in tests) it is a no-op returning False.

    Raises ``UpstreamUnavailable`` when the embedded store could not compact (unreachable, a full disk,
    an older snapshot still running): the erasure is not complete and should be retried.
    """
    endpoint = embedded_endpoint(settings)
    if endpoint is None:
        return False
    url = endpoint + COMPACT_PATH
    # A loopback address: never through a proxy the environment may name.
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    request = urllib.request.Request(url, data=b"", method="POST")  # noqa: S310 (an http loopback URL)
    try:
        with opener.open(request, timeout=timeout_seconds) as response:
            status, answer = response.status, response.read(_MAX_ANSWER_BYTES)
    except urllib.error.HTTPError as exc:
        with exc:
            status, answer = exc.code, exc.read(_MAX_ANSWER_BYTES)
    except (urllib.error.URLError, TimeoutError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise UpstreamUnavailable(f"could not compact the embedded store at {endpoint}: {reason}") from None
    if status != 200 or _compacted(answer) is not True:
        shown = " ".join(answer.decode(errors="replace").split())[:200]
        raise UpstreamUnavailable(f"the embedded store at {endpoint} did not compact: HTTP {status}: {shown}")
    return True


def _compacted(answer: bytes) -> object:
    try:
        body = json.loads(answer)
    except ValueError:
        return None
    return body.get("compacted") if isinstance(body, dict) else None
