"""Experiments: variant configs, deterministic assignment, exposures, sampling schedules."""
