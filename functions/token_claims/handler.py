"""Lambda entrypoint: the console user pool's pre token generation trigger (scope and patient_id claims)."""

from flowledger.api.token_claims import token_claims_handler

handler = token_claims_handler()
