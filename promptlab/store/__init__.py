"""DuckDB storage: the Store that owns the file and its migrations."""

from promptlab.store.connection import Store
from promptlab.store.migrations import MIGRATIONS, Migration, apply_migrations

__all__ = ["MIGRATIONS", "Migration", "Store", "apply_migrations"]
