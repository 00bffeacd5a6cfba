"""`wb.exports`: tables and comparisons as CSV, Parquet or JSON Lines files.

Written by DuckDB's COPY (names and files: promptlab/data/export.py; SQL:
promptlab/store/export.py), every secret value masked, each export recorded as a
``table.exported`` change event. A CSV file's text cells that a spreadsheet would run
as a formula get a leading quote (promptlab/data/export.py) unless `raw` is asked.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from promptlab.analysis.compare import Comparison
from promptlab.atomicfile import check_target, staged_file
from promptlab.data.export import (
    COMPARISON_COLUMNS,
    METRICS_COLUMNS,
    STORED_TABLES,
    ExportFilters,
    arrow_table,
    check_format,
    check_items,
    check_table,
    comparison_records,
    file_name,
    metrics_record,
)
from promptlab.errors import ExportError
from promptlab.facades.analysis import Analysis
from promptlab.facades.context import Context
from promptlab.records import ItemFilter, MetricsRow
from promptlab.store.export import ExportStore

__all__ = ["Exports"]


class Exports:
    """Write or download a table's rows, or a comparison as shown."""

    def __init__(self, context: Context, analysis: Analysis) -> None:
        self._context = context
        self._analysis = analysis

    def write_table(
        self,
        table: str,
        fmt: str,
        path: str | Path,
        *,
        run_id: str | None = None,
        experiment: str | None = None,
        prompt: str | None = None,
        items: ItemFilter | None = None,
        force: bool = False,
        raw: bool = False,
    ) -> int:
        """Write a table's rows that pass the filters to `path`; return the rows written.

        Tables: items, results, attempts, metrics, comparisons, feedback; formats: csv,
        parquet, jsonl. The file appears whole or not at all (promptlab/atomicfile.py:
        written beside it, unnamed where the system allows, then given its name); an
        existing regular file is replaced only with `force`, anything else never.
        In a CSV file, text cells beginning with `=`, `+`, `-`, `@`, a tab or a carriage
        return get a leading `'` so a spreadsheet shows them instead of running them;
        `raw` writes them exactly (for a program reading the file, not a spreadsheet).
        `items` keeps, within the run, the items a filtered items list shows (and their
        results and attempts).
        """
        table, fmt = check_table(table), check_format(fmt)
        filters = ExportFilters(run_id, experiment, prompt, items or ItemFilter())
        target = check_target(path, force=force)
        with staged_file(target, force=force) as staged:
            count = self._export_to(table, fmt, staged, filters, raw=raw)
        self._audit_exported(table, fmt, filters, count, target.name, raw=raw)
        return count

    def table_bytes(
        self,
        table: str,
        fmt: str,
        *,
        run_id: str | None = None,
        experiment: str | None = None,
        prompt: str | None = None,
        items: ItemFilter | None = None,
    ) -> bytes:
        """The file `write_table` would write, as bytes (the app's download buttons). A
        download is for a person: its CSV is always neutralised (JSON Lines and Parquet
        hold every value exactly)."""
        table, fmt = check_table(table), check_format(fmt)
        filters = ExportFilters(run_id, experiment, prompt, items or ItemFilter())
        with tempfile.TemporaryDirectory(prefix="promptlab-export-") as folder:
            temp = Path(folder) / file_name(table, fmt, filters)
            count = self._export_to(table, fmt, temp, filters, raw=False)
            self._audit_exported(table, fmt, filters, count, "download", raw=False)
            return temp.read_bytes()

    def comparison_bytes(self, comparison: Comparison, fmt: str) -> bytes:
        """A comparison as it is shown (any control, versions or logs), as a file written
        by the same COPY as `export --table comparisons` (CSV neutralised, as every
        download's)."""
        fmt = check_format(fmt)
        records = comparison_records(comparison)
        with tempfile.TemporaryDirectory(prefix="promptlab-export-") as folder:
            temp = Path(folder) / f"comparison.{fmt}"
            count = ExportStore(self._context.store).copy_rows(
                arrow_table(records, COMPARISON_COLUMNS),
                fmt,
                temp,
                self._context.secrets(),
            )
            filters = ExportFilters(comparison.run_id or None, None, None)
            self._audit_exported("comparisons", fmt, filters, count, "download", raw=False)
            return temp.read_bytes()

    def file_name(
        self,
        table: str,
        fmt: str,
        *,
        run_id: str | None = None,
        experiment: str | None = None,
        prompt: str | None = None,
        items: ItemFilter | None = None,
    ) -> str:
        """A file name saying what an export holds, e.g. `results-run-3f2a.parquet`, or
        `items-run-3f2a-variant-v20.csv` for a filtered items list's."""
        filters = ExportFilters(run_id, experiment, prompt, items or ItemFilter())
        return file_name(table, fmt, filters)

    def _audit_exported(
        self, table: str, fmt: str, filters: ExportFilters, rows: int, target: str, *, raw: bool
    ) -> None:
        payload = {
            "table": table,
            "format": fmt,
            "rows": rows,
            "to": target,
            "experiment": filters.experiment,
            "prompt": filters.prompt,
        }
        if filters.items.named():
            payload["items"] = dict(filters.items.named())  # the filtered list's items only
        if raw and fmt == "csv":
            payload["raw"] = True  # cells a spreadsheet would run were written as they are
        self._context.audit_change(
            "table.exported", self._context.author(), payload, run_id=filters.run_id
        )

    def _export_to(
        self, table: str, fmt: str, target: Path, filters: ExportFilters, *, raw: bool
    ) -> int:
        check_items(table, filters)  # before a computed table is computed
        rows = ExportStore(self._context.store)
        secrets = self._context.secrets()
        if table in STORED_TABLES:
            return rows.copy_table(table, fmt, target, filters, secrets, raw=raw)
        if table == "metrics":
            records = [metrics_record(m) for m in self._export_metrics(rows, filters)]
            metrics = arrow_table(records, METRICS_COLUMNS)
            return rows.copy_rows(metrics, fmt, target, secrets, raw=raw)
        if filters.prompt is not None:
            raise ExportError("export: comparisons are per run; --prompt does not apply")
        if filters.run_id is not None:
            run_ids = [filters.run_id]
        elif filters.experiment is not None:
            run_ids = rows.experiment_runs(filters.experiment)
        else:
            raise ExportError("export: comparisons are per run; give --run or --experiment")
        compare = self._analysis.compare
        records = [r for run_id in run_ids for r in comparison_records(compare(run_id))]
        comparisons = arrow_table(records, COMPARISON_COLUMNS)
        return rows.copy_rows(comparisons, fmt, target, secrets, raw=raw)

    def _export_metrics(self, rows: ExportStore, filters: ExportFilters) -> list[MetricsRow]:
        """Per run variant with a run or an experiment, else per prompt version."""
        metrics = self._analysis.metrics
        if filters.experiment is not None:
            run_ids = rows.experiment_runs(filters.experiment)
            if filters.run_id is not None:
                run_ids = [r for r in run_ids if r == filters.run_id]
            return [m for r in run_ids for m in metrics(r, prompt=filters.prompt)]
        return metrics(filters.run_id, prompt=filters.prompt)
