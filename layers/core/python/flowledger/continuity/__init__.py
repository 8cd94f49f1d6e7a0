"""Conversation continuity across mixed sources (seed: mixed-source-continuity, issue #14).

Not yet wired into the executors. The pieces, each pure or behind a port:

- ``request.py``: the chat request's source fields (``SourceRequest``);
- ``refs.py``: the grounded refs of a session's latest grounded turn, and their store on ``runs``;
- ``precedence.py``: which sources a turn uses, by the seed's fixed precedence (``resolve_sources``);
- ``sufficiency.py``: whether history suffices or which engines must rerun (``assess``);
- ``reauthorize.py``: every prior source checked again before reuse (``reauthorize``, ``disclosure``).
"""
