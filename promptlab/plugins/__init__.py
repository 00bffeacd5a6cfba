"""Plugins: scorers and commands a team adds through the `promptlab` entry-point group."""
