"""Checks on outputs: JSON Schema validation, rules, anomaly detection, bounded regexes."""
