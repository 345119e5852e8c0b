"""``python -m lab new NAME``: a new method's family, written from templates (``family``);
docs/new-method.md is the guide from there to a verdict on the dashboard."""
