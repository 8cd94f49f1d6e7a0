"""Reasoning flows: capture, the step DAG, the summary guard, patient and admin views, decay."""
