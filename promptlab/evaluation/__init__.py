"""Evaluation: scorers, judges and cross-checks, and the after-run work a run's end sets going."""
