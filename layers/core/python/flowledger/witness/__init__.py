"""A witness of other logs' checkpoints: it keeps the last checkpoint it cosigned per log, checks that each new
one extends it, and cosigns it as a C2SP ``tlog-cosignature`` (``flowledger witness serve``, or its own Lambda).

The protocol is in ``flowledger.ledger.witnessing`` (the submitting side) and ``service`` (the checks).
"""
