"""Rows and lines for the review queue (the Review page and `promptlab review`). A row
is shown by its number from 1, as every page numbers dataset rows (its `row_index`,
from 0, is for programs)."""

from __future__ import annotations

from typing import Any

from promptlab.records.review import CrosscheckSummary, ReviewDetail, ReviewItem

#: Characters of an answer shown in a list (the item view shows it whole).
SHORT = 80


def item_rows(items: list[ReviewItem]) -> list[dict[str, Any]]:
    """The queue as a table."""
    return [
        {
            "id": i.id,
            "run": i.run_id,
            "row": i.row_index + 1,
            "source": i.source,
            "status": i.status,
            "proposed": _short(i.proposed),
            "answer": _short(i.answer),
            "reason": i.reason,
            "decided by": i.decided_by,
            "version": i.version,
        }
        for i in items
    ]


def answer_rows(detail: ReviewDetail) -> list[dict[str, Any]]:
    """Each variant's (model's) answer to the row, with its scores and, for a
    cross-check, the answer compared, its confidence and weight."""
    inputs = detail.crosscheck.inputs if detail.crosscheck is not None else {}
    rows = []
    for a in detail.answers:
        row: dict[str, Any] = {
            "variant": a.variant,
            "model": a.model,
            "status": a.status,
            "check": a.check_status,
            "output": a.output or a.error,
        }
        fused = inputs.get(a.variant)
        if fused is not None:
            row |= {
                "answer": fused.get("answer"),
                "confidence": fused.get("normalized"),
                "weight": fused.get("weight"),
                "entropy": fused.get("entropy"),
            }
        row |= {f"score: {name}": value for name, value in a.scores.items()}
        rows.append(row)
    return rows


def crosscheck_line(detail: ReviewDetail) -> str | None:
    """The cross-check's decision in one line, or None."""
    d = detail.crosscheck
    if d is None:
        return None
    confidence = "-" if d.confidence is None else f"{d.confidence:.2f}"
    flag = f", ambiguous (token entropies {d.entropy_gap:.2f} apart)" if d.ambiguous else ""
    if d.divergence is not None:
        flag += f", reasoning {d.divergence:.2f} apart"
    if d.reinferred:
        flag += ", re-inferred by the tiebreak model"
    return (
        f"cross-check: {d.decision}, agreement {d.agreement:.0%}, fused confidence "
        f"{confidence}, leading answer {d.answer!r}{flag}"
    )


def detail_lines(detail: ReviewDetail) -> list[str]:
    """The item for a terminal: what it is, the row, then each answer in turn."""
    item = detail.item
    lines = [
        f"review {item.id}: run {item.run_id} row {item.row_index + 1}, {item.status} "
        f"(version {item.version})",
        f"  sent by {item.source} ({item.created_by}): {item.reason}",
        f"  proposed: {item.proposed!r}",
    ]
    if item.decided_by:
        lines.append(
            f"  {item.status} by {item.decided_by}: {item.answer!r}"
            + (f" ({item.note})" if item.note else "")
        )
    elif item.changed_by:
        lines.append(f"  reopened by {item.changed_by}")
    cross = crosscheck_line(detail)
    if cross:
        lines.append(f"  {cross}")
    lines.append("  row:")
    lines += [f"    {k}: {_short(str(v), 200)}" for k, v in detail.row.items()]
    for row in answer_rows(detail):
        lines.append(f"  {row['variant']} ({row['model']}, {row['status']}):")
        lines += [
            f"    {k}: {v}"
            for k, v in row.items()
            if k not in ("variant", "model", "status") and v is not None
        ]
    return lines


def summary_title(summary: CrosscheckSummary) -> str:
    """A cross-checked run in one line: its decisions, and the rows re-inferred."""
    decided = ", ".join(f"{n} {d}" for d, n in summary.decisions.items())
    third = (
        f"; {summary.reinferred} re-inferred by the tiebreak model" if summary.reinferred else ""
    )
    return f"Cross-check of run {summary.run_id}: {decided}{third}"


def weight_rows(summary: CrosscheckSummary) -> list[dict[str, Any]]:
    """Each model's weight; the tiebreak model's is its own (neither F1 nor the ±5% rule
    moves it), said so."""
    rows = []
    for w in summary.weights:
        third = w.variant == summary.tiebreak
        rows.append(
            {
                "model": f"{w.variant} (tiebreak)" if third else w.variant,
                "validation F1": w.f1,
                "weight from F1": None if third else round(w.base_weight, 4),
                "weight (±5% rule)": round(w.weight, 4),
            }
        )
    return rows


def _short(text: str | None, limit: int = SHORT) -> str | None:
    if text is None or len(text) <= limit:
        return text
    return text[: limit - 1] + "…"
