"""Workspaces (personal, group, public) and the documents uploaded into them or into a conversation."""
