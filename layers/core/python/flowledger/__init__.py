"""Flowledger: serverless backend for auditable agent chat."""

__version__ = "0.1.0"
