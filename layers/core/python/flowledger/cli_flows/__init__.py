"""The ``flowledger flows`` sub-commands that have a module of their own (export, replay, otel-export).

Each module's ``add_command(flows)`` adds its parser to the ``flows`` group built in :mod:`flowledger.cli`;
heavy imports stay inside the command functions so that building the parser stays cheap.
"""
