"""Lambda entrypoint: the ledger witness behind a function URL (POST /add-checkpoint)."""

from flowledger.witness.lambda_handler import witness_handler

handler = witness_handler()
