"""The gateway's work for one call: what to serve, the request to send, and the record.

`prepare` reads what the call's `model` serves (targets.py), checks the variables
against the version's schema (a CallRefused naming `variables.FIELD`), and builds the
request: the version's rendered messages first, the call's own messages after, the
version's params over the call's. `send` runs it on the engine's loop (sending.py).
`record` writes the call to the journal (journal.py) before its last byte goes out;
the database takes it later, off the call's path.
"""

from __future__ import annotations

import itertools
import secrets
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from promptlab.checks.validation import check_output
from promptlab.engine.send.lanes import LiveLane
from promptlab.errors import ConfigError, ProviderError, TemplateError, VariableError
from promptlab.gateway.calls import CallIn, CallRefused
from promptlab.gateway.journal import CallJournal
from promptlab.gateway.sending import LiveLanes, Sent, Tally, send_live
from promptlab.gateway.targets import Served, Targets
from promptlab.providers import modelrules
from promptlab.providers.base import CompletionRequest
from promptlab.providers.config import cost_usd, sampling_rule

#: Tokens a call may ask for when neither it nor the version says.
DEFAULT_MAX_TOKENS = 256


@dataclass(frozen=True)
class Prepared:
    """A call ready to send: its trace, what it is served, and the request."""

    trace: str
    call: CallIn
    served: Served
    request: CompletionRequest
    #: perf_counter seconds when the call came in.
    started: float
    #: Its attempts, counted as they are made (a failed call's too).
    tally: Tally = field(default_factory=Tally)


class Gateway:
    """Serve calls: prepare, send through the engine's lanes, record in the journal."""

    def __init__(
        self,
        targets: Targets,
        lanes: LiveLanes,
        journal: CallJournal,
        now: Callable[[], Any],
    ) -> None:
        """`now()`: the store's clock (an aware datetime), which stamps each call."""
        self.targets = targets
        self.journal = journal
        self._lanes = lanes
        self._now = now
        self._held: dict[str, LiveLane] = {}
        self._holding = threading.Lock()

    def prepare(self, call: CallIn) -> Prepared:
        started = time.perf_counter()
        served = self.targets.serve(call.model, call.unit)
        template = served.version.template
        try:
            rendered = template.render(call.variables)
        except VariableError as exc:
            first = exc.problems[0]
            raise CallRefused(
                422, f"variables.{first.variable}: {first.message}", "variables"
            ) from None
        except TemplateError as exc:
            raise CallRefused(422, f"variables: {exc}", "variables") from None
        params = served.params
        lane = self.lane(served.endpoint)
        # As a run sends it (engine/send/requests.py): what the model's rule does not take is
        # not sent, and only a provider that takes a schema is sent the version's.
        temperature, top_p = modelrules.sent(
            sampling_rule(lane.endpoint, served.model),
            _first(params.get("temperature"), call.temperature),
            _first(params.get("top_p"), call.top_p),
        )
        schema = template.output_schema if lane.provider.supports_json_schema else None
        request = CompletionRequest(
            model=served.model,
            messages=(*rendered, *call.messages),
            max_tokens=int(params.get("max_tokens") or call.max_tokens or DEFAULT_MAX_TOKENS),
            temperature=temperature,
            top_p=top_p,
            output_schema=schema,
            extra={"stop": list(call.stop)} if call.stop else None,
        )
        return Prepared(_trace(), call, served, request, started)

    def lane(self, endpoint: str) -> LiveLane:
        held = self._held.get(endpoint)
        if held is None:
            with self._holding:
                held = self._held.get(endpoint)
                if held is None:
                    try:
                        held = self._lanes.live_lane(endpoint)
                    except ConfigError as exc:
                        raise CallRefused(503, f"endpoint {endpoint}: {exc}") from None
                    self._held[endpoint] = held
        return held

    async def aclose(self) -> None:
        """Close the connections of the providers the gateway's calls used (on the loop
        they were made on: the server's, as it shuts down)."""
        for lane in list(self._held.values()):
            await lane.provider.aclose()

    async def send(self, prepared: Prepared, deliver: Callable[[str], None] | None) -> Sent:
        """Send on the caller's loop; `deliver` gets each text piece as it arrives (None:
        a call not streamed)."""
        lane = self.lane(prepared.served.endpoint)
        return await send_live(
            lane, prepared.request, deliver, time.perf_counter, tally=prepared.tally
        )

    def record(
        self,
        prepared: Prepared,
        sent: Sent | None,
        error: ProviderError | None,
        caller: str,
    ) -> None:
        """The call in the journal: what was served and what came back (or failed)."""
        self.journal.append(self.call_record(prepared, sent, error, caller))

    def call_record(
        self, prepared: Prepared, sent: Sent | None, error: ProviderError | None, caller: str
    ) -> dict[str, Any]:
        served, call = prepared.served, prepared.call
        record: dict[str, Any] = {
            "trace": prepared.trace,
            "at": self._now().isoformat(),
            "caller": caller,
            "wire": call.wire,
            "stream": call.stream,
            "unit": call.unit,
            "version_id": served.version.id,
            "version": served.version.ref,
            "endpoint": served.endpoint,
            "model": served.model,
            "latency_ms": (time.perf_counter() - prepared.started) * 1000,
        }
        if served.experiment is not None:
            record.update(
                experiment=served.experiment,
                revision=served.revision,
                variant=served.variant,
                bucket=served.bucket,
                in_experiment=served.in_experiment,
            )
        if sent is not None:
            record.update(_answered(sent, prepared, self.lane(served.endpoint)))
        if error is not None:
            record.update(http_status=error.status, error=f"{error.kind.value}: {error}")
        made = prepared.tally.attempts
        record.update(attempts=made, failed_attempts=made - (sent is not None))
        return record


def checked(call: dict[str, Any], targets: Targets) -> dict[str, Any]:
    """The call with what its output check found (`check_status`; `rule_status` when the
    version has rules), as a run's result would have: done while folding, off its path."""
    version = targets.held(call["version_id"])
    if version is None or "output" not in call:
        return call
    template = version.template
    check = check_output(call["output"], template.output_schema, call.get("finish_reason"))
    call["check_status"] = check.status.value
    if template.rules and check.parsed is not None:
        status, _ = template.rule_set.check(check.parsed)
        call["rule_status"] = status.value
    return call


def _answered(sent: Sent, prepared: Prepared, lane: LiveLane) -> Mapping[str, Any]:
    answer = sent.answer
    first = sent.first_piece_at
    return {
        "ttft_ms": (first - prepared.started) * 1000 if first is not None else None,
        "input_tokens": answer.input_tokens,
        "output_tokens": answer.output_tokens,
        "cost_usd": cost_usd(
            lane.endpoint, prepared.served.model, answer.input_tokens, answer.output_tokens
        ),
        "finish_reason": answer.finish_reason.value,
        "http_status": answer.http_status or 200,
        "output": answer.text,
    }


def _first(*values: float | None) -> float | None:
    return next((v for v in values if v is not None), None)


#: Traces are this process's random prefix and a count: unique across processes and
#: restarts, without a system call for randomness on every call (a trace names a call;
#: it grants nothing, so it need not be unguessable).
_TRACE_PREFIX = f"tr_{secrets.token_hex(8)}"
_traces = itertools.count(1)


def _trace() -> str:
    return f"{_TRACE_PREFIX}{next(_traces):08x}"
