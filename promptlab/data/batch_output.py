"""A request-file run's results written back in the OpenAI Batch output format: the
run's id field (from its spec) and the output file, a line per final result."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from promptlab.data.batchfile import StoredResult, batch_output_lines, field_at
from promptlab.errors import PromptlabError


def id_field(spec: Mapping[str, Any]) -> str | None:
    """The id field of a run over a request file (`promptlab batch`), else None."""
    return next(
        (
            v.get("id_field", "custom_id")
            for v in spec.get("variants", [])
            if v.get("requests") == "as_written"
        ),
        None,
    )


def write(path: Path, rows: Iterable[tuple[Any, ...]], id_field: str) -> int:
    """Each final row with its dataset row (`ReadModels.results_with_rows`) as a line of
    OpenAI Batch output in `path`, its id from the row's `id_field`; returns the count."""
    results = (
        StoredResult(r[0], str(field_at(json.loads(r[1]), id_field)), *r[2:10]) for r in rows
    )
    count = 0
    try:
        with path.open("w", encoding="utf-8") as handle:
            for line in batch_output_lines(results):
                handle.write(line + "\n")
                count += 1
    except OSError as exc:
        raise PromptlabError(f"cannot write {path}: {exc.strerror or exc}") from exc
    return count
