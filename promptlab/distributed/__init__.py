"""Runs on Celery workers through Redis: one rate budget, each attempt sent once."""
