"""`flowledger flows ...`: export closed reasoning flows, check, replay and trace them.

:mod:`.group` builds the group; each command with a module of its own (export, replay, otel-export,
stamp-listing) adds its parser through ``add_command(flows)``. Heavy imports stay inside the command
functions so that building the parser stays cheap.
"""
