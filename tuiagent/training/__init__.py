"""Applications that fit a guard to a model (collecting runs, training, reports); they drive the
runner, so they live above it and outside the plug-in package ``guards``."""
