"""Lambda entrypoint: API Gateway TOKEN authorizer for client routes (JWT bearer)."""

from flowledger.api.authorizer import authorizer_handler

handler = authorizer_handler()
