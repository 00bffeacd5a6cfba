"""One item of a run as people open it: what was stored, plus the request it was sent as.

The store keeps an item's dataset row and its variant's template, not the rendered
request. `item_request` renders it again exactly as the engine's `_prepare` does (row
params filled in, text cells coerced to the variables' types, the template rendered;
a request file's line taken as written), so the messages shown are the messages sent.
A row that fails validation gives the render error instead: that is how its item failed.

What is shown passes through the redactor like everything else promptlab shows: a key
that sits in a dataset row is masked in the inputs and the messages (the stored output,
errors and attempts were masked before they were written).
"""

from __future__ import annotations

import json
import string
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from promptlab.audit.redact import Redactor
from promptlab.checks.validation import CheckStatus
from promptlab.conversations.replay import BEFORE_KEY, CONVERSATION_KEY, TURN_KEY, TURN_NO_KEY
from promptlab.data.batchfile import request_from_row
from promptlab.engine.plan.planner import KEY_HEX_DIGITS
from promptlab.engine.record.trace import rendered_messages
from promptlab.engine.send.requests import row_params
from promptlab.engine.spec.runspec import AS_WRITTEN, PARAM_COLUMNS_KEY
from promptlab.errors import ItemKeyError, PromptlabError
from promptlab.records import AttemptRow, FinalRow, ItemDetail, ItemStatus, VariantRecord
from promptlab.records.sessions import SESSION_KEY

#: Fewest hex digits of a key accepted as a prefix of one.
MIN_KEY_PREFIX = 8
#: What a replayed turn's row holds beside the log's columns (conversations/replay.py).
REPLAY_KEYS = frozenset({CONVERSATION_KEY, SESSION_KEY, TURN_KEY, BEFORE_KEY, TURN_NO_KEY})


@dataclass(frozen=True)
class ItemRequest:
    """The request an item's row renders to: its messages and params, or why it cannot."""

    messages: tuple[Mapping[str, str], ...] | None
    params: Mapping[str, Any]
    error: str | None


@dataclass(frozen=True)
class ItemView:
    """An item as the Runs page and `promptlab status --item` show it.

    `detail` is everything stored (read in one snapshot); `request` the rendered
    messages; `params` the params actually sent (the result's, else as they would be).
    """

    detail: ItemDetail
    request: ItemRequest

    @property
    def run_id(self) -> str:
        return self.detail.run_id

    @property
    def key(self) -> str:
        return self.detail.key

    @property
    def status(self) -> ItemStatus:
        return self.detail.status

    @property
    def row(self) -> Mapping[str, Any]:
        return self.detail.row

    @property
    def inputs(self) -> Mapping[str, Any]:
        """The row as the template's inputs: a replayed turn's conversation, session and
        turn, which the messages sent show, left out."""
        return {k: v for k, v in self.row.items() if k not in REPLAY_KEYS}

    @property
    def variant(self) -> VariantRecord:
        return self.detail.variant

    @property
    def result(self) -> FinalRow | None:
        return self.detail.result

    @property
    def attempts(self) -> Sequence[AttemptRow]:
        return self.detail.attempts

    @property
    def messages(self) -> tuple[Mapping[str, str], ...] | None:
        return self.request.messages

    @property
    def render_error(self) -> str | None:
        return self.request.error

    @property
    def params(self) -> Mapping[str, Any]:
        if self.result is not None and self.result.params:
            return self.result.params
        return self.request.params

    @property
    def output_text(self) -> str | None:
        return self.result.output_text if self.result else None

    @property
    def output_json(self) -> Any | None:
        """The output parsed, when it is a JSON object or array; None otherwise."""
        text = (self.output_text or "").strip()
        if not text.startswith(("{", "[")):
            return None
        try:
            return json.loads(text)
        except ValueError:
            return None

    @property
    def check_status(self) -> CheckStatus | None:
        """What the output check found; None for failed items and older results."""
        r = self.result
        return CheckStatus(r.check_status) if r is not None and r.check_status else None

    @property
    def check_errors(self) -> tuple[str, ...]:
        """Every problem the check found, as `PATH: message`."""
        return self.result.check_errors if self.result is not None else ()

    @property
    def rule_status(self) -> str | None:
        """passed, warned or failed; None when the output had no rules to meet."""
        return self.result.rule_status if self.result is not None else None

    @property
    def rule_errors(self) -> tuple[str, ...]:
        """Every rule that failed or raised, as `RULE: why`."""
        return self.result.rule_errors if self.result is not None else ()

    @property
    def error(self) -> tuple[str | None, str] | None:
        """(kind, message) of a failed or cancelled item; None otherwise."""
        r = self.result
        if r is None or r.status == ItemStatus.SUCCEEDED:
            return None
        return r.error_kind, r.error_message or r.status


def item_request(
    variant: VariantRecord,
    row: Mapping[str, Any],
    answers: list[str] | None = None,
    shard: Mapping[str, Any] | None = None,
) -> ItemRequest:
    """Render the item's request from its variant and dataset row (and a replayed turn's
    earlier `answers` and context `shard`), as the engine did."""
    if variant.template.get(AS_WRITTEN):
        try:
            line = request_from_row(row, str(variant.template.get("id_field")))
        except PromptlabError as exc:
            return ItemRequest(None, {}, str(exc))
        return ItemRequest(line.messages, line.params, None)
    params: Mapping[str, Any] = {k: v for k, v in variant.params.items() if k != PARAM_COLUMNS_KEY}
    try:
        params = row_params(variant.params, row)
        messages = rendered_messages(variant, row, answers, shard)
    except PromptlabError as exc:
        return ItemRequest(None, params, str(exc))
    return ItemRequest(tuple(messages), params, None)


def masked(detail: ItemDetail, request: ItemRequest, redactor: Redactor) -> ItemView:
    """The view with any secret in the row, the messages or the render error masked."""
    messages = request.messages
    if messages is not None:
        messages = tuple({**m, "content": redactor(m["content"])} for m in messages)
    request = ItemRequest(messages, request.params, redactor.optional(request.error))
    return ItemView(replace(detail, row=redactor.value(detail.row)), request)


def check_key_prefix(run_id: str, key: str) -> str:
    """The key lower-cased; refuses text that cannot be a key or a long-enough prefix."""
    key = key.strip().lower()
    if not MIN_KEY_PREFIX <= len(key) <= KEY_HEX_DIGITS or not set(key) <= set(
        string.hexdigits.lower()
    ):
        raise ItemKeyError(
            f"run {run_id}: item key {key!r}: give the key or at least "
            f"{MIN_KEY_PREFIX} of its hex digits"
        )
    return key


def ambiguous(run_id: str, prefix: str, keys: Sequence[str]) -> ItemKeyError:
    shown = ", ".join(keys)
    return ItemKeyError(
        f"run {run_id}: item key prefix {prefix!r} matches several items ({shown}, ...); "
        "give more digits"
    )
