"""The composition root the pages and the CLI open: one database, its facades, one engine.

One Workbench per database. It opens the store, owns the shared engine (started when
first needed, with evaluation's after-run work as its run-ended hook) and the settings,
and composes one facade per domain (promptlab/facades/):
`wb.prompts`, `wb.runs`, `wb.schedules`, `wb.experiments`, `wb.rollouts`, `wb.datasets`,
`wb.analysis`, `wb.exports`, `wb.audit`, `wb.review`, `wb.tokens`, `wb.cache`, `wb.drift`
and `wb.demo`. Pages and commands call the facades; pages' rows and figures come from
`promptlab.views`, record types from `promptlab.records`.
"""

from __future__ import annotations

import logging
import threading
from pathlib import Path

from promptlab.clock import SYSTEM_CLOCK, Clock
from promptlab.config import Settings
from promptlab.engine import Engine
from promptlab.engine.record.spill import spill_dirs, store_spills
from promptlab.errors import StoreError
from promptlab.evaluation.ended import run_ended
from promptlab.facades.analysis import Analysis
from promptlab.facades.audit import Audit
from promptlab.facades.cache import Cache
from promptlab.facades.context import Context
from promptlab.facades.datasets import Datasets
from promptlab.facades.demo import Demo
from promptlab.facades.drift import Drift
from promptlab.facades.experiments import Experiments
from promptlab.facades.exports import Exports
from promptlab.facades.prompts import Prompts
from promptlab.facades.review import Review
from promptlab.facades.rollouts import Rollouts
from promptlab.facades.runs import Runs
from promptlab.facades.schedules import Schedules
from promptlab.facades.tokens import Tokens
from promptlab.prompts.registry import Registry
from promptlab.store import ItemStore, Store

__all__ = ["Workbench"]

log = logging.getLogger(__name__)


class Workbench:
    """Prompts, runs and what they add up to, over one database; see the module docstring."""

    def __init__(
        self,
        store: Store,
        settings: Settings | None = None,
        *,
        engine: Engine | None = None,
        owns_store: bool = False,
    ) -> None:
        self.store = store
        self.settings = settings or Settings.from_env()
        self._registry = Registry(store)
        self._engine = engine
        # The app shares one workbench across browser sessions (threads): two of them
        # must never each build an engine, or the budget doubles and runs are orphaned.
        self._engine_lock = threading.Lock()
        self._owns_store = owns_store
        context = Context(
            store,
            self.settings,
            self._registry,
            engine=lambda: self.engine,
            started_engine=lambda: self._engine,
        )
        self.prompts = Prompts(context)
        self.experiments = Experiments(context)
        self.rollouts = Rollouts(context, self.experiments, self.prompts)
        self.datasets = Datasets(context)
        self.runs = Runs(context, self.experiments, self.datasets)
        self.schedules = Schedules(context, self.runs)
        self.analysis = Analysis(context)
        self.exports = Exports(context, self.analysis)
        self.audit = Audit(context)
        self.review = Review(context)
        self.tokens = Tokens(context)
        self.cache = Cache(context)
        self.drift = Drift(context)
        self.demo = Demo(context, self.experiments, self.datasets, self.runs)
        self._store_spills()

    @classmethod
    def open(cls, settings: Settings | None = None, clock: Clock = SYSTEM_CLOCK) -> Workbench:
        """A workbench on the settings' database file, which it closes on `close()`."""
        settings = settings or Settings.from_env()
        return cls(Store(settings.db_path, clock), settings, owns_store=True)

    @property
    def engine(self) -> Engine:
        """The shared engine, started on first use (reading reports needs none); one per
        workbench whichever threads ask first."""
        with self._engine_lock:
            if self._engine is None:
                # The engine calls evaluation's after-run work at each end of a run.
                self._engine = Engine(
                    self.store,
                    settings=self.settings,
                    registry=self._registry,
                    on_run_ended=run_ended,
                )
            return self._engine

    def backup(self, target: Path) -> int:
        """A consistent copy of the database at `target` (a new file) while it is in use,
        with every answer counted so far; its size in bytes (promptlab/store/backup.py)."""
        from promptlab.store.backup import backup_to

        if self._engine is not None:  # every answer it counted is in the copy
            self._engine.flush()
        return backup_to(self.store, target)

    def close(self) -> None:
        """Stop the engine (if it was started) and close the database if this opened it."""
        with self._engine_lock:
            engine, self._engine = self._engine, None
        if engine is not None:
            engine.close()
        self.demo.join()  # the demo run's clicks may be being written: the store stays open
        if self._owns_store:
            self.store.close()

    def _store_spills(self) -> None:
        """Store the answers an earlier process had to spill (a full disk): the next
        command on the database does, whatever it is, not only `resume`."""
        try:
            store_spills(ItemStore(self.store), spill_dirs(self.store.path))
        except StoreError as exc:
            # Reading still works; the engine refuses to resume a run until they are stored.
            log.warning("%s", exc)

    def __enter__(self) -> Workbench:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def restore(source: Path, target: Path) -> Path | None:
    """Put the backup at `source` in place at `target` (no process may hold it); where
    the database it replaced was kept, if there was one (promptlab/store/backup.py)."""
    from promptlab.store.backup import restore_from

    return restore_from(source, target)
