"""Caches for three pure functions of botocore and moto that the tests call hundreds of thousands of times,
and for the TLS trust store each OpenAI client loads.

Each test builds its own boto3 clients (its own moto, its own settings), and a new client starts every cache
botocore keeps per client cold. Profiled over the integration layer, these came to about a tenth of its CPU
time, all of it recomputing answers that depend only on their argument:

- botocore's event aliasing (``EventAliaser._alias_event_name``) is cached per emitter; every emitter built
  with botocore's own alias table now shares one cache, since the answer depends only on the name and table;
- botocore checks that each handler a new client registers accepts ``**kwargs`` by inspecting its signature
  (some 360 registrations a client); a function's signature is fixed, so it is inspected once;
- moto lists a response class's methods with ``inspect.getmembers`` on every request; a class's methods do not
  change while the tests run;
- every OpenAI client (one per test that talks to a scripted model server) builds an SSL context and loads the
  system's CA bundle into it, 28 ms each; the tests' model servers speak plain HTTP on loopback, so one context
  per process is loaded and shared.

Only the cost changes: each cached answer is the one the original computes, and nothing here runs in the
package or in AWS.
"""

from __future__ import annotations

import functools
from typing import Any

import botocore.compat
import botocore.hooks
import httpcore2
import moto.core.responses
import moto.core.utils
from botocore.utils import EVENT_ALIASES

_SHARED_ALIASES: dict[str, str] = {}


def _share_the_default_alias_cache() -> None:
    original = botocore.hooks.EventAliaser.__init__

    def __init__(self: Any, event_emitter: Any, event_aliases: Any = None) -> None:
        original(self, event_emitter, event_aliases)
        if self._event_aliases is EVENT_ALIASES:
            self._alias_name_cache = _SHARED_ALIASES

    botocore.hooks.EventAliaser.__init__ = __init__  # type: ignore[method-assign]


def _inspect_each_handler_once() -> None:
    accepts = functools.cache(botocore.compat.accepts_kwargs)

    def accepts_kwargs(func: Any) -> Any:
        # Bound methods of a new client are new objects: their function is what is inspected.
        target = getattr(func, "__func__", func)
        try:
            hash(target)
        except TypeError:  # an unhashable callable instance: inspected every time, as before
            return botocore.compat.accepts_kwargs(target)
        return accepts(target)

    botocore.hooks.accepts_kwargs = accepts_kwargs


def _list_each_class_once() -> None:
    cached = functools.cache(moto.core.utils.method_names_from_class)
    moto.core.responses.method_names_from_class = cached  # type: ignore[assignment]


def _load_the_trust_store_once() -> None:
    load = functools.cache(httpcore2.default_ssl_context)
    httpcore2.default_ssl_context = load


@functools.cache  # once a process, however many conftests import it
def install() -> None:
    """Patch the four functions for this test process."""
    _share_the_default_alias_cache()
    _inspect_each_handler_once()
    _list_each_class_once()
    _load_the_trust_store_once()
