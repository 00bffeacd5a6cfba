"""An item rendered into the request it sends: its variant's template, params and
sampling schedule, its dataset row (or its request line, sent as written), a replayed
turn's conversation, and the context-window preflight.

An item that cannot be sent (its values do not fit the template, its request is over the
model's window) gets its final row here, as invalid input or as the provider error the
preflight raised, and is never dispatched.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from promptlab.data.batchfile import request_from_row
from promptlab.data.conversations import with_conversation
from promptlab.engine import trace
from promptlab.engine.lanes import Lane
from promptlab.engine.recorder import ItemRecorder
from promptlab.engine.spec import AS_WRITTEN, PARAM_COLUMNS_KEY
from promptlab.errors import PromptlabError, ProviderError, TemplateError
from promptlab.experiments.sampling import SAMPLING_KEY, Sampling
from promptlab.prompts.templates import Template, coerce_text_values, normalize_params
from promptlab.providers import modelrules
from promptlab.providers.base import CompletionRequest
from promptlab.providers.config import sampling_rule
from promptlab.providers.tokens import check_fits, context_window
from promptlab.records import ItemErrorKind, ItemStatus, PendingItem, VariantRecord


@dataclass(frozen=True)
class Prepared:
    request: CompletionRequest
    tokens: int


class RequestBuilder:
    """Renders a run's items into requests (one per run, shared by its lanes)."""

    def __init__(
        self,
        variants: Mapping[int, VariantRecord],
        templates: Mapping[int, Template],
        sampling: Mapping[int, Sampling],
        recorder: ItemRecorder,
        timeout_s: float,
        *,
        repeats: int,
        positions: int,
        top_logprobs: int | None,
    ) -> None:
        self.variants = variants
        self.templates = templates
        #: Variants whose temperature or top_p moves over the batch.
        self.sampling = sampling
        self.recorder = recorder
        self.timeout_s = timeout_s
        #: A sampling schedule runs over the dataset: an item's position is its row (and
        #: repeat), so every variant sweeps the same values whatever the others do.
        self.repeats = repeats
        self.positions = positions
        self.top_logprobs = top_logprobs  # asked of every request (a cross-check's entropy)

    def prepare(
        self, item: PendingItem, lane: Lane, answers: list[str] | None = None
    ) -> Prepared | None:
        """Render the request; an item that cannot be sent gets its final row now. A
        replayed turn with generated history is sent with the model's `answers` to the
        turns before it in place of the logged ones."""
        variant = self.variants[item.variant_index]
        if variant.template.get(AS_WRITTEN):
            return self.prepare_as_written(item, lane, variant)
        template = self.templates[item.variant_index]
        try:
            params = row_params(variant.params, item.values)
            sampling = self.sampling.get(item.variant_index)
            if sampling is not None:
                position = item.row_index * self.repeats + item.repeat
                moved = sampling.apply(params, position, self.positions)
                params = {k: v for k, v in moved.items() if k != SAMPLING_KEY}
            max_tokens = int(params.get("max_tokens") or 256)
            values = coerce_text_values(template, {k: v for k, v in item.values.items()})
            messages = with_conversation(template.render(values), item.values, answers)
            if self.recorder.audit:
                self.recorder.traces[item.key] = trace.render_stage(item.values, messages, answers)
            tokens = check_fits(lane.endpoint, variant.model, messages, max_tokens)
            if self.recorder.audit:
                self.recorder.traces[item.key] |= trace.preflight_stage(
                    tokens, max_tokens, context_window(lane.endpoint, variant.model)
                )
        except ProviderError as exc:
            self.recorder.final(item, ItemStatus.FAILED, False, error=(exc.kind.value, str(exc)))
            return None
        except PromptlabError as exc:
            self.recorder.final(
                item, ItemStatus.FAILED, False, error=(ItemErrorKind.INVALID_INPUT, str(exc))
            )
            return None
        # The model's rule (checked at submit): a template default it does not take is
        # not sent (claude-sonnet-4-5 answers 400 to temperature and top_p together).
        temperature, top_p = modelrules.sent(
            sampling_rule(lane.endpoint, variant.model),
            params.get("temperature"),
            params.get("top_p"),
        )
        request = CompletionRequest(
            model=variant.model,
            messages=tuple(messages),
            max_tokens=max_tokens,
            temperature=temperature,
            top_p=top_p,
            # Only providers that can be held to a schema are sent one; the output is
            # checked on our side either way.
            output_schema=(template.output_schema if lane.provider.supports_json_schema else None),
            request_id=item.key,
            item_key=item.key,
            timeout_s=self.timeout_s,
            top_logprobs=self.top_logprobs,
        )
        if params is not variant.params:
            self.recorder.row_params[item.key] = params
        return Prepared(request, tokens + max_tokens)

    def prepare_as_written(
        self, item: PendingItem, lane: Lane, variant: VariantRecord
    ) -> Prepared | None:
        """A request line sent as it is: its messages, its params, its id as request id."""
        try:
            line = request_from_row(item.values, str(variant.template.get("id_field")))
            max_tokens = int(line.params["max_tokens"])
            if self.recorder.audit:
                self.recorder.traces[item.key] = trace.render_stage(item.values, line.messages)
            tokens = check_fits(lane.endpoint, variant.model, list(line.messages), max_tokens)
            if self.recorder.audit:
                self.recorder.traces[item.key] |= trace.preflight_stage(
                    tokens, max_tokens, context_window(lane.endpoint, variant.model)
                )
        except ProviderError as exc:
            self.recorder.final(item, ItemStatus.FAILED, False, error=(exc.kind.value, str(exc)))
            return None
        except PromptlabError as exc:
            error = (ItemErrorKind.INVALID_INPUT, str(exc))
            self.recorder.final(item, ItemStatus.FAILED, False, error=error)
            return None
        self.recorder.row_params[item.key] = line.params
        request = CompletionRequest(
            model=variant.model,
            messages=line.messages,
            max_tokens=max_tokens,
            temperature=line.params.get("temperature"),
            top_p=line.params.get("top_p"),
            seed=line.params.get("seed"),
            extra=line.extra or None,
            request_id=line.custom_id,
            item_key=item.key,
            timeout_s=self.timeout_s,
        )
        return Prepared(request, tokens + max_tokens)


def row_params(params: Mapping[str, Any], row: Mapping[str, Any]) -> Mapping[str, Any]:
    """The variant's params with those it reads from dataset columns filled in for `row`.

    A blank cell keeps the variant's own value; a value of the wrong type or range
    raises TemplateError naming the column (the item fails as invalid input).
    """
    columns = params.get(PARAM_COLUMNS_KEY)
    if not columns:
        return params
    out = {k: v for k, v in params.items() if k != PARAM_COLUMNS_KEY}
    for param, column in columns.items():
        raw = row.get(column)
        if raw is None or (isinstance(raw, str) and not raw.strip()):
            continue
        try:
            value: Any = int(raw) if param == "max_tokens" else float(raw)
            normalize_params({"model": "check:only", param: value})
        except (TypeError, ValueError, TemplateError) as exc:
            raise TemplateError(
                f"column {column!r} ({param}): {raw!r} is not valid: {exc}"
            ) from exc
        out[param] = value
    return out
