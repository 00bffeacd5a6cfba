"""Scores against expected answers: the scorers, and a run's scores computed and stored."""
