"""DuckDB storage: the Store that owns the file, its migrations, and every SQL statement."""

# `PromptStore` keeps prompts, versions and labels; `RunStore` the run lifecycle;
# `ItemStore` a run's items, attempts and results as the engine writes them;
# `ReadModels` the typed query results the pages and the CLI read; `ExperimentStore`
# experiments, their revisions, exposures and run assignments. Nothing outside this
# package imports duckdb: DuckDB's errors leave it as promptlab errors (StoreError).

from promptlab.store.connection import Store
from promptlab.store.experiments import ExperimentStore
from promptlab.store.items import ItemStore
from promptlab.store.migrations import MIGRATIONS, Migration, apply_migrations
from promptlab.store.prompts import PromptStore
from promptlab.store.read_models import ReadModels
from promptlab.store.runs import RunStore

__all__ = [
    "ExperimentStore",
    "ItemStore",
    "MIGRATIONS",
    "Migration",
    "PromptStore",
    "ReadModels",
    "RunStore",
    "Store",
    "apply_migrations",
]
