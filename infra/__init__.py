"""CDK app for Flowledger: one stack composed of one construct per capability."""
