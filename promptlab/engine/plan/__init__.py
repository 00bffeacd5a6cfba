"""Planning a run: a checked spec prepared once into endpoints, variants, rows and keyed items."""
