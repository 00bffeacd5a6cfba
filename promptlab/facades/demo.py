"""`wb.demo`: the demo content of data/demo, and its experiment run once for real.

What the demo holds is in promptlab/data/demo.py; this facade loads it through the
other facades (experiment variants get pinned, changes audited) and runs the demo
experiment in the background on a fresh database, recording its simulated clicks.
"""

from __future__ import annotations

import logging
import threading

from promptlab.data.datasets import DatasetStore
from promptlab.data.demo import (
    DEMO_DATASET,
    DEMO_EXPERIMENT,
    DEMO_FEEDBACK_SOURCE,
    DEMO_SCORING,
    demo_experiment_files,
    demo_feedback_events,
    load_demo_datasets,
    load_demo_prompts,
)
from promptlab.engine import Engine
from promptlab.experiments import load_experiment_file
from promptlab.facades.context import Context
from promptlab.facades.datasets import Datasets
from promptlab.facades.experiments import Experiments
from promptlab.facades.runs import Runs
from promptlab.prompts.registry import SaveResult
from promptlab.records import RunStatus
from promptlab.store.feedback import FeedbackTables

__all__ = ["DEMO_FEEDBACK_JOIN_S", "Demo"]

log = logging.getLogger(__name__)
#: How long closing waits for the demo run's clicks to be written.
DEMO_FEEDBACK_JOIN_S = 30.0


class Demo:
    """Load the demo content; run the demo experiment once and record its clicks."""

    def __init__(
        self, context: Context, experiments: Experiments, datasets: Datasets, runs: Runs
    ) -> None:
        self._context = context
        self._experiments = experiments
        self._datasets = datasets
        self._runs = runs
        self._thread: threading.Thread | None = None

    def load(self) -> list[SaveResult]:
        """The demo prompts, datasets and experiments; what is already there is kept."""
        results = load_demo_prompts(self._context.registry)
        load_demo_datasets(DatasetStore(self._context.store))
        present = {c.name for c in self._experiments.list()}
        for path in demo_experiment_files():
            experiment = load_experiment_file(path)
            if experiment.name not in present:
                self._experiments.add(experiment, note="demo")
        return results

    def start_run(self) -> str | None:
        """Run the demo experiment on the demo dataset, once, into a database with no runs.

        It runs for real through the simulated model, so a newcomer's first look shows
        a finished A/B experiment. Returns the run id, or None when there was nothing to do.
        """
        names = {c.name for c in self._experiments.list()}
        if DEMO_EXPERIMENT not in names or self._runs.list(limit=1):
            return None
        if DEMO_DATASET not in {d.name for d in self._datasets.list()}:
            return None
        spec = self._runs.experiment_spec(
            DEMO_EXPERIMENT, DEMO_DATASET, run_name=f"demo: {DEMO_EXPERIMENT} on {DEMO_DATASET}"
        )
        spec = self._runs.spec_from_data({**spec.raw, **DEMO_SCORING})  # accuracy per version
        run_id = self._runs.start(spec)
        # The run goes on in the background: its simulated clicks are recorded once it ends.
        self._thread = threading.Thread(
            target=self._feedback_when_done,
            args=(self._context.engine(), run_id),
            name="demo-feedback",
            daemon=True,
        )
        self._thread.start()
        return run_id

    def record_feedback(self, run_id: str) -> int:
        """Simulated impressions and clicks for a finished demo run's results (the
        simulator's click model: the version's prompt, the answer; seeded by each
        result's key); once per run. Returns how many events were added."""
        messages = self._messages_by_version()
        return FeedbackTables(self._context.store).add_run_events(
            run_id,
            DEMO_FEEDBACK_SOURCE,
            lambda shown: demo_feedback_events(shown, lambda vid: messages.get(vid, [])),
            self._context.store.clock.now(),
        )

    def _messages_by_version(self) -> dict[str, list[dict[str, str]]]:
        """Every prompt version's messages by its id (the click model reads their cues)."""
        registry = self._context.registry
        return {
            version.id: [{"role": m.role, "content": m.content} for m in version.template.messages]
            for prompt in registry.list_prompts()
            for version in registry.versions(prompt.name)
        }

    def join(self) -> None:
        """Wait (a while) for the demo run's clicks to be written: the workbench closes
        its store after this."""
        if self._thread is not None:
            self._thread.join(DEMO_FEEDBACK_JOIN_S)
            self._thread = None

    def _feedback_when_done(self, engine: Engine, run_id: str) -> None:
        # `engine`, not context.engine(): once the workbench closes, that would start another.
        try:
            if engine.wait(run_id).status == RunStatus.COMPLETED:
                self.record_feedback(run_id)
        except Exception as exc:  # closed first, or the run failed: the demo has no clicks
            log.warning("demo feedback for run %s not recorded: %s", run_id, exc)
