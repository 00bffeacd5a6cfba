"""Prompts: templates and their limits, the versioned registry, prompt files."""
