"""A run's judges checked at its submit: each judge's run (promptlab/evaluation/judges.py)
must be one a submit takes, though it starts only when the judged run completes."""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path

from promptlab.engine.plan.prepare import (
    VersionResolver,
    check_limits,
    merge_endpoints,
    resolve_variants,
)
from promptlab.engine.spec.runspec import RunSpec, parse_spec
from promptlab.errors import PromptlabError, SpecError
from promptlab.evaluation.ended import one_line
from promptlab.evaluation.judges import judge_spec, judges_of
from promptlab.providers.config import EndpointConfig, with_local_endpoints


def check_judges(
    spec: RunSpec, endpoints: Mapping[str, EndpointConfig], registry: VersionResolver
) -> None:
    """Refuse at submit, in one line, a judge whose run could not start when this run
    completes (its rubric, its endpoint, its limits): its spec is checked as a submit
    checks it, but for its dataset (written only then)."""
    judges = judges_of(spec)
    for i, judge in ((i, s) for i, s in enumerate(spec.scorers) if s in judges):
        try:
            checked = parse_spec(judge_spec(judge, Path("judge.jsonl"), spec, "run"), trusted=True)
            local = with_local_endpoints(endpoints, checked.local_endpoints)
            merged = merge_endpoints(local, checked.endpoints)
            check_limits(checked.limits, merged)
            resolve_variants(checked, merged, registry)
        except PromptlabError as exc:
            said = re.sub(r"^variants\[0\] \([^)]*\): ", "", one_line(exc))
            raise SpecError(f"scorers[{i}] (judge {judge.name}): {said}") from exc
