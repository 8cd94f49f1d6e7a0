"""The model report card (`flowledger model eval`): a fixed set of turns through the real chat path, scored per
capability, saying which capabilities a model can serve."""
