"""Exporting a result table to CSV, Parquet, JSON Lines or a plugin's format: names,
checks and files.

The tables (`TABLES`) are the ones the app and the CLI show: a run's `items` (as the
items list shows them, with the full output), `results` and `attempts` as stored, the
`metrics` table (per run variant, or per prompt version across runs), a run's
`comparisons` (each variant against control, with significance) and imported
`feedback`. The rows are written by DuckDB's COPY (promptlab/store/export.py); this
module checks what was asked and names the file; promptlab/atomicfile.py checks the
target and puts the file in place whole.

CSV cells a spreadsheet will not run (OWASP's rule against CSV injection): a
spreadsheet opening a CSV file takes a cell that begins with `=`, `+`, `-` or `@` as a
formula (`=HYPERLINK(...)` leaks data on a click, `+cmd|' /C calc'!A0` asks to run a
program), and some strip a leading tab or carriage return first. Model answers, dataset
cells and reviewers' corrections are text anyone could have written, so every CSV the
product writes prefixes such a text cell with a single quote, which the spreadsheet
shows as text and hides. Numbers are written as numbers: a negative latency is a value,
not a formula. The rule is here once, in two forms: `csv_cell` for files Python writes
(the review export), `sql_neutralised` for files DuckDB's COPY writes (every table
export, the API's and the app's downloads). `raw` exports skip it: their reader is a
program, which would otherwise get a quote that was not in the data.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from promptlab.analysis.intervals import completion_interval
from promptlab.errors import ExportError
from promptlab.records.items import ItemFilter

if TYPE_CHECKING:
    import pyarrow as pa

    from promptlab.analysis.compare import Comparison
    from promptlab.records import MetricsRow

#: Tables that can be exported, in the order the CLI lists them.
TABLES = ("items", "results", "attempts", "metrics", "comparisons", "feedback")
#: Tables whose rows DuckDB reads from the store as they are (the others are computed).
STORED_TABLES = ("items", "results", "attempts", "feedback")
#: Tables with a row per item, or per item's result or attempt: the item filters apply.
ITEM_TABLES = ("items", "results", "attempts")
#: Other names people type for a format.
FORMAT_ALIASES = {"json": "jsonl", "ndjson": "jsonl", "pq": "parquet"}


@dataclass(frozen=True)
class Exporter:
    """A file format result tables are exported to: built in (DuckDB's COPY writes it)
    or a plugin's (promptlab/plugins/hookspecs.py `register_exporters`)."""

    name: str
    #: The file extension, with its dot, and the MIME type a download is served as.
    suffix: str
    mime: str
    #: What the app's format picker shows.
    label: str
    #: DuckDB COPY's FORMAT, for the formats COPY writes; None: `write` makes the file.
    copy: str | None = None
    #: `write(rows, target)`: the file at `target` from `rows`, a Parquet file of the
    #: exported rows (secrets masked, as every export's) that promptlab removes after.
    write: Callable[[Path, Path], None] | None = None
    #: Who registered it (set by the plugin manager).
    plugin: str = "promptlab"


def built_in_exporters() -> list[Exporter]:
    """The formats promptlab writes (registered by promptlab/plugins/builtins.py)."""
    return [
        Exporter("csv", ".csv", "text/csv", "CSV", copy="csv"),
        Exporter("parquet", ".parquet", "application/vnd.apache.parquet", "Parquet", "parquet"),
        # DuckDB's JSON COPY writes one object per line (newline-delimited) by default.
        Exporter("jsonl", ".jsonl", "application/x-ndjson", "JSON Lines", copy="json"),
    ]


def exporters() -> dict[str, Exporter]:
    """Every export format by name, the plugins' included."""
    from promptlab.plugins.manager import plugins

    return plugins().exporters()


def exporter_of(fmt: str) -> Exporter:
    """The export format `fmt` names (an alias, any case); ExportError when none does."""
    name = fmt.strip().lower().lstrip(".")
    name = FORMAT_ALIASES.get(name, name)
    from promptlab.plugins.manager import plugins

    known = plugins().exporters(name)
    if name not in known:
        raise ExportError(f"export: unknown format {fmt!r}: one of {', '.join(known)}")
    return known[name]


@dataclass(frozen=True)
class ExportFilters:
    """Which rows to export: one run, the runs of an experiment, one prompt's versions."""

    run_id: str | None = None
    #: Runs whose spec ran this experiment (any revision).
    experiment: str | None = None
    #: Rows of this prompt's versions (results whose prompt_version_id is one of them).
    prompt: str | None = None
    #: Within the run (`run_id` required): the items a filtered Runs page shows, and
    #: their results and attempts.
    items: ItemFilter = ItemFilter()

    def describe(self) -> str:
        parts = [
            f"{name} {value}"
            for name, value in (
                ("run", self.run_id),
                ("experiment", self.experiment),
                ("prompt", self.prompt),
            )
            if value
        ]
        return ", ".join([*parts, *filter(None, [self.items.describe()])]) or "no filter"


def check_table(table: str) -> str:
    name = table.strip().lower()
    if name not in TABLES:
        raise ExportError(f"export: unknown table {table!r}: one of {', '.join(TABLES)}")
    return name


def check_items(table: str, filters: ExportFilters) -> None:
    """Item filters keep one run's items, and their results and attempts: nothing else."""
    if not filters.items.named():
        return
    if filters.run_id is None:
        raise ExportError(f"export: {filters.items.describe()} filters one run's items; give --run")
    if table not in ITEM_TABLES:
        raise ExportError(
            f"export: table {table} has no items; {filters.items.describe()} does not apply"
        )


def check_format(fmt: str) -> str:
    return exporter_of(fmt).name


def mime_type(fmt: str) -> str:
    return exporter_of(fmt).mime


_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


def file_name(table: str, fmt: str, filters: ExportFilters) -> str:
    """A file name saying what is in it, e.g. `results-run-3f2a.parquet`."""
    parts = [check_table(table)]
    for name, value in (
        ("run", filters.run_id),
        ("experiment", filters.experiment),
        ("prompt", filters.prompt),
        *((name.replace(" ", "_"), value[:40]) for name, value in filters.items.named()),
    ):
        if value:
            parts.append(f"{name}-{_UNSAFE.sub('_', value).strip('_') or 'x'}")
    return "-".join(parts) + exporter_of(fmt).suffix


# ---- computed tables ----------------------------------------------------------------

#: Columns of the exported metrics table: (name, Arrow type name).
METRICS_COLUMNS: tuple[tuple[str, str], ...] = (
    ("run_id", "string"),
    ("variant", "string"),
    ("prompt_name", "string"),
    ("prompt_version", "string"),
    ("prompt_version_id", "string"),
    ("model", "string"),
    ("runs", "int64"),
    ("finished", "int64"),
    ("succeeded", "int64"),
    ("failed", "int64"),
    ("cancelled", "int64"),
    ("open", "int64"),
    ("completed", "int64"),
    ("completion_rate", "float64"),
    ("completion_low", "float64"),
    ("completion_high", "float64"),
    ("failed_by_kind", "string"),
    ("latency_mean_ms", "float64"),
    ("latency_p50_ms", "float64"),
    ("latency_p90_ms", "float64"),
    ("latency_p95_ms", "float64"),
    ("latency_p99_ms", "float64"),
    ("input_tokens", "int64"),
    ("output_tokens", "int64"),
    ("cost_usd", "float64"),
    ("first_finished_at", "timestamp"),
    ("last_finished_at", "timestamp"),
    ("checked", "int64"),
    ("valid", "int64"),
    ("repaired", "int64"),
    ("invalid", "int64"),
    ("truncated", "int64"),
    ("rule_failed", "int64"),
    ("validity_rate", "float64"),
    ("repair_rate", "float64"),
    ("invalid_rate", "float64"),
    ("truncation_rate", "float64"),
    ("rule_failure_rate", "float64"),
)

#: Columns of the exported comparisons table.
COMPARISON_COLUMNS: tuple[tuple[str, str], ...] = (
    ("run_id", "string"),
    ("mode", "string"),
    ("control", "string"),
    ("variant", "string"),
    ("metric", "string"),
    ("control_value", "float64"),
    ("variant_value", "float64"),
    ("n_control", "int64"),
    ("n_variant", "int64"),
    ("effect", "float64"),
    ("interval_low", "float64"),
    ("interval_high", "float64"),
    ("p_value", "float64"),
    ("look_alpha", "float64"),
    ("adjusted_p", "float64"),
    ("chance_to_beat", "float64"),
    ("expected_loss", "float64"),
    ("test", "string"),
    ("verdict", "string"),
    ("lower_is_better", "bool"),
    ("requests_control", "int64"),
    ("requests_variant", "int64"),
    ("analysed_by", "string"),
    ("method", "string"),
    ("reason", "string"),
)


def metrics_record(row: MetricsRow) -> dict[str, Any]:
    """One metrics row as the exported table's columns (kinds as a JSON object)."""
    import json

    interval = completion_interval(row)
    return {
        "run_id": row.run_id,
        "variant": row.variant,
        "prompt_name": row.prompt_name,
        "prompt_version": row.prompt_version,
        "prompt_version_id": row.prompt_version_id,
        "model": row.model,
        "runs": row.runs,
        "finished": row.finished,
        "succeeded": row.succeeded,
        "failed": row.failed,
        "cancelled": row.cancelled,
        "open": row.open,
        "completed": row.completed,
        "completion_rate": row.completion_rate,
        "completion_low": interval.low if row.finished else None,
        "completion_high": interval.high if row.finished else None,
        "failed_by_kind": json.dumps(dict(row.failed_by_kind), sort_keys=True),
        "latency_mean_ms": row.latency_mean_ms,
        "latency_p50_ms": row.latency_p50_ms,
        "latency_p90_ms": row.latency_p90_ms,
        "latency_p95_ms": row.latency_p95_ms,
        "latency_p99_ms": row.latency_p99_ms,
        "input_tokens": row.input_tokens,
        "output_tokens": row.output_tokens,
        "cost_usd": row.cost_usd,
        "first_finished_at": row.first_finished_at,
        "last_finished_at": row.last_finished_at,
        "checked": row.checked,
        "valid": row.valid,
        "repaired": row.repaired,
        "invalid": row.invalid,
        "truncated": row.truncated,
        "rule_failed": row.rule_failed,
        "validity_rate": row.validity_rate,
        "repair_rate": row.repair_rate,
        "invalid_rate": row.invalid_rate,
        "truncation_rate": row.truncation_rate,
        "rule_failure_rate": row.rule_failure_rate,
    }


def comparison_records(comparison: Comparison) -> list[dict[str, Any]]:
    """The comparison's rows (variant, metric, units and requests, effect, interval, p,
    adjusted p, verdict and why, the method: fixed horizon or always valid)."""
    return [
        {
            "run_id": comparison.run_id,
            "mode": comparison.mode,
            "control": r.control,
            "variant": r.variant,
            "metric": r.metric,
            "control_value": r.control_value,
            "variant_value": r.variant_value,
            "n_control": r.n_control,
            "n_variant": r.n_variant,
            "effect": r.effect,
            "interval_low": r.interval.low if r.interval else None,
            "interval_high": r.interval.high if r.interval else None,
            "p_value": r.p_value,
            "look_alpha": r.look_alpha,
            "adjusted_p": r.adjusted_p,
            "chance_to_beat": r.chance_to_beat,
            "expected_loss": r.expected_loss,
            "test": r.test,
            "verdict": str(r.verdict),
            "lower_is_better": r.lower_is_better,
            "requests_control": r.requests_control,
            "requests_variant": r.requests_variant,
            "analysed_by": r.analysed_by,
            "method": comparison.method,
            "reason": r.reason,
        }
        for r in comparison.rows
    ]


def arrow_table(
    records: Iterable[dict[str, Any]], columns: tuple[tuple[str, str], ...]
) -> pa.Table:
    """Records as an Arrow table with fixed column types (an empty table keeps them too)."""
    import pyarrow as pa

    types = {
        "string": pa.string(),
        "int64": pa.int64(),
        "float64": pa.float64(),
        "bool": pa.bool_(),
        "timestamp": pa.timestamp("us", tz="UTC"),
    }
    schema = pa.schema([(name, types[kind]) for name, kind in columns])
    return pa.Table.from_pylist(list(records), schema=schema)


# ---- CSV cells a spreadsheet will not run ------------------------------------------

#: First characters that make a spreadsheet read a cell as a formula.
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")
#: What goes before such a cell: spreadsheets show the rest as text.
PREFIX = "'"
#: A text cell that begins with a formula character, as an RE2 pattern for DuckDB
#: (characters spelt `\xNN`: no escaping rules of SQL or RE2 to get right).
_FORMULA_PATTERN = "^([" + "".join(f"\\x{ord(c):02x}" for c in FORMULA_STARTS) + "])"


def neutralised(text: str) -> str:
    """`text`, with the quote before it when a spreadsheet would read it as a formula."""
    return PREFIX + text if text.startswith(FORMULA_STARTS) else text


def csv_cell(value: Any) -> Any:
    """A value as a CSV cell: numbers (and booleans, and None) as they are, anything
    else as text (what the csv module writes, `str(value)`), neutralised."""
    if value is None or isinstance(value, int | float):
        return value
    return neutralised(value if isinstance(value, str) else str(value))


def sql_neutralised(expression: str) -> str:
    """A DuckDB expression: the VARCHAR `expression`, neutralised as `neutralised` does.

    One regular-expression replace names `expression` once (it may be a long chain of
    secret masks); the pattern is anchored, so only a first character is ever touched.
    """
    quote = PREFIX.replace("'", "''")
    return f"regexp_replace({expression}, '{_FORMULA_PATTERN}', '{quote}\\1')"


#: What a CSV export does to such cells, for help texts (CLI, API, app).
NEUTRALISED_HELP = (
    "In CSV, text cells beginning with =, +, -, @, a tab or a carriage return get a "
    "leading ' so a spreadsheet shows them instead of running them as formulas "
    "(numbers stay numbers)."
)
#: The opt-out, for help texts.
RAW_HELP = (
    "Write CSV cells exactly as stored, without the leading ' before formula-like text: "
    "for a file a program reads (values round-trip exactly), not one opened in a "
    "spreadsheet, which would run them."
)
