"""HTTP surface: one powertools Router per capability, the error map and the auth helpers."""
