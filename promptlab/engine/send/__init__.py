"""Sending a run's items within each endpoint's limits: requests, attempts, retries."""
