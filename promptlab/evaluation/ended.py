"""After-run work: what a run's end sets going, from the one place the engine notifies.

`run_ended` is the engine's run-ended hook (promptlab/engine/ended.py; the Workbench gives
it to the engine): the engine calls it when a run reaches a final state, before it
records that state (a process killed during this work leaves the run resumable, and its
resume ends it again). A pause is not an end: nothing runs. Which work runs on which end:

| work | completed | cancelled, failed |
|---|---|---|
| `scores` (plain scorers) | yes | yes: what finished is scored |
| `alerts` (anomaly detectors over every stored result) | yes | yes |
| `judge NAME` (a judge's run) | yes | no |
| `crosscheck` (row decisions and the review queue) | yes | no |
| `crosscheck validation` (a validation's run) | yes | no |
| `verdicts` (a judge's own run: its answers as scores) | yes | yes (`judge NAME` fails) |
| `drift` (`drift:` in the spec: each rendering against its version's typical prompt) | yes | yes |

Scores, alerts, decisions and the review queue are recomputed whole at each end, so an
end that comes again (a cancelled run resumed and completed) leaves one set. A judge's
or validation's run is keyed by (run, work) in `after_run`: an end that comes again
finds it started and starts nothing. Each piece's outcome is recorded there; a failure
is one line that `promptlab status`, the Runs page, `promptlab metrics` and the run
commands' exit code (5) show.
"""

from __future__ import annotations

import functools
import logging
import os
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from promptlab.checks.anomalies import detect, observation_of, schema_fields
from promptlab.errors import PromptlabError
from promptlab.evaluation.crossruns import crosscheck_ended, decide_run, validation_ended
from promptlab.evaluation.drift import check_run
from promptlab.evaluation.judges import judge_spec, judges_of, store_verdicts, write_judge_dataset
from promptlab.evaluation.runs import plain_scorers, score_results
from promptlab.evaluation.scorers import Scorer
from promptlab.providers.embeddings import Embedder
from promptlab.records import RunStatus
from promptlab.records.afterrun import AfterRunState
from promptlab.store.afterrun import AfterRunStore
from promptlab.store.alerts import AlertStore
from promptlab.store.connection import Store
from promptlab.store.runs import RunStore

if TYPE_CHECKING:
    from promptlab.engine.ended import RunEnd

log = logging.getLogger(__name__)

#: Work done at any final state; everything else waits for `completed`.
ANY_END = frozenset({"scores", "alerts", "verdicts", "drift"})
VALIDATION = "crosscheck validation"


def run_ended(ended: RunEnd) -> None:
    """The run ended in `ended.status` (a final one): run its after-run work (see the
    module docstring), each piece recorded; never raises (the run's results are what
    counts). A judge's or validation's run is started through `ended.submit`."""
    store, run_id, spec = ended.store, ended.run_id, ended.spec
    completed = ended.status == RunStatus.COMPLETED
    if spec.judging:
        _work(ended, "verdicts", lambda: _verdicts(ended))
    elif plain_scorers(spec):
        _work(ended, "scores", lambda: score_results(store, run_id, spec))
    _work(ended, "alerts", lambda: _alerts(store, run_id))
    if spec.drift is not None:
        _work(ended, "drift", lambda: _drift(ended))
    if spec.validating is not None:
        _validation_ended(ended)
    if not completed:
        return
    for judge in judges_of(spec) if not spec.judging else ():
        _start_child(ended, f"judge {judge.name}", functools.partial(_submit_judge, ended, judge))
    check = spec.crosscheck
    if check is not None and spec.validating is None:
        if check.validation is None:
            _work(ended, "crosscheck", lambda: decide_run(store, run_id, check))
        else:
            start = functools.partial(crosscheck_ended, store, run_id, spec, ended.submit)
            _start_child(ended, VALIDATION, start)


def _records(ended: RunEnd) -> AfterRunStore:
    return AfterRunStore(ended.store)


def _work(ended: RunEnd, work: str, do: Callable[[], object]) -> bool:
    try:
        do()
    except Exception as exc:  # noqa: BLE001 - recorded and shown; the run's results stand
        log.warning("run %s: %s failed: %s", ended.run_id, work, exc, exc_info=True)
        _record(_records(ended), ended.run_id, work, AfterRunState.FAILED, one_line(exc))
        return False
    _record(_records(ended), ended.run_id, work, AfterRunState.DONE)
    return True


def _start_child(ended: RunEnd, work: str, start: Callable[[], str | None]) -> None:
    """Start the run of its own that `work` is, once per (run, work)."""
    records = _records(ended)
    try:
        if not records.claim(ended.run_id, work):
            log.info("run %s: %s was started already", ended.run_id, work)
            return
        child = start()
        if child is not None:
            records.started(ended.run_id, work, child)
    except Exception as exc:  # noqa: BLE001 - recorded and shown
        log.warning("run %s: %s not started: %s", ended.run_id, work, exc, exc_info=True)
        _record(records, ended.run_id, work, AfterRunState.FAILED, one_line(exc))


def _record(
    records: AfterRunStore,
    run_id: str,
    work: str,
    state: str,
    detail: str | None = None,
    child: str | None = None,
) -> None:
    try:
        records.record(run_id, work, state, detail, child)
    except Exception:  # noqa: BLE001 - a store that cannot take it is logged
        log.exception("run %s: %s: %s not recorded (%s)", run_id, work, state, detail)


def one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text if isinstance(exc, PromptlabError) else f"{type(exc).__name__}: {text}"


def _alerts(store: Store, run_id: str) -> None:
    """Every detector over the run's stored results in finishing order: the alerts
    raised live (a resumed run's detectors start afresh) become one pass's."""
    alerts = AlertStore(store)
    expected = {
        v.name: schema_fields(v.template.get("output_schema"))
        for v in RunStore(store).variants(run_id)
    }
    stream = (observation_of(*row) for row in alerts.finished_stream(run_id))
    alerts.replace(run_id, list(detect(run_id, stream, expected, now=store.clock.now)))


def _drift(ended: RunEnd) -> None:
    """The spec's `drift:` check over the run's renderings, kept like `promptlab drift`'s."""
    drift = ended.spec.drift
    assert drift is not None
    embedder = Embedder.of(drift.model, ended.endpoints, os.environ)
    check_run(ended.store, ended.run_id, embedder, drift.threshold, drift.reference)


def _submit_judge(ended: RunEnd, judge: Scorer) -> str:
    dataset = write_judge_dataset(ended.store, ended.run_id, ended.spec)
    return ended.submit(judge_spec(judge, dataset, ended.spec, ended.run_id))


def _verdicts(ended: RunEnd) -> None:
    """A judge's run ended: its verdicts stored, and the judged run's `judge NAME` said."""
    judging: Mapping[str, Any] = ended.spec.judging or {}
    target, work = str(judging["run"]), f"judge {judging['scorer']}"
    store_verdicts(ended.store, ended.run_id, judging)
    _child_ended(ended, target, work)


def _validation_ended(ended: RunEnd) -> None:
    target = str(ended.spec.validating)
    if ended.status == RunStatus.COMPLETED:
        done = _work(
            ended, "crosscheck", lambda: validation_ended(ended.store, ended.run_id, ended.spec)
        )
        if not done:
            failed = _records(ended).get(ended.run_id, "crosscheck")
            why = failed.detail if failed else None
            _record(_records(ended), target, VALIDATION, AfterRunState.FAILED, why)
            return
        _record(_records(ended), target, "crosscheck", AfterRunState.DONE)
    _child_ended(ended, target, VALIDATION)


def _child_ended(ended: RunEnd, target: str, work: str) -> None:
    """The judged (validated) run's record of this run: done when it completed."""
    if ended.status == RunStatus.COMPLETED:
        _record(_records(ended), target, work, AfterRunState.DONE, None, ended.run_id)
        return
    why = f"run {ended.run_id} {ended.status}" + (f": {ended.reason}" if ended.reason else "")
    why += f"; `promptlab resume {ended.run_id}` finishes it"
    _record(_records(ended), target, work, AfterRunState.FAILED, why, ended.run_id)
