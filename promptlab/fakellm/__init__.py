"""A fake LLM server (OpenAI and Anthropic wire formats) for tests, demos and benches."""
