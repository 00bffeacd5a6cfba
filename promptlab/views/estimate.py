"""A run's estimate as lines of text: what `experiment run` prints before it starts, the
same whether the estimate was made here or by a server (which sends these lines)."""

from __future__ import annotations

from collections.abc import Iterator

from promptlab.engine.plan.estimate import RunEstimate


def estimate_lines(estimate: RunEstimate) -> Iterator[str]:
    cost = f"${estimate.cost_usd:.4f}" if estimate.cost_usd is not None else "no price"
    yield (
        f"estimate: {estimate.requests:,} requests, {estimate.input_tokens:,} tokens in, "
        f"{estimate.output_tokens:,} out, {cost}, about {estimate.seconds:.0f} s "
        f"(bounded by {estimate.bound})"
    )
    units = estimate.units
    if units is not None:
        per = ", ".join(f"{v.name} {v.units}" for v in estimate.variants)
        yield (
            f"units: {units.units:,}{'' if units.complete else '+'} distinct {units.column} ({per})"
        )
    for v in estimate.variants:
        model = f"{v.endpoint}:{v.model}"
        yield f"  {v.name}: {v.requests:,} requests on {model} (output from {v.basis})"
    for warning in estimate.warnings:
        yield f"warning: {warning}"
