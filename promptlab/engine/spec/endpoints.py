"""A run spec's `endpoints:` and `limits:`, checked as written.

A spec can be pasted into a shared app, so the endpoints it declares may only be on this
machine (LOOPBACK_NAMES, or a loopback address) and may not name a key: reaching only
loopback, a spec cannot carry prompts, data or keys elsewhere.
"""

from __future__ import annotations

import ipaddress
import math
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

from promptlab.engine.send.tokenbucket import DEFAULT_BURST_S, Limits
from promptlab.errors import ConfigError, SpecError
from promptlab.providers.batchconfig import batch_settings
from promptlab.providers.config import EndpointConfig
from promptlab.providers.kinds import endpoint_kinds

LIMIT_FIELDS = frozenset({"rpm", "tpm", "concurrency", "burst_s"})
ENDPOINT_FIELDS = frozenset({"kind", "base_url", "rpm", "tpm", "concurrency", "batch"})
#: Hosts an endpoint declared in a run spec may point at, besides loopback addresses.
LOOPBACK_NAMES = frozenset({"localhost"})


def parse_limits(data: Any) -> dict[str, Limits]:
    if not isinstance(data, Mapping):
        raise SpecError("limits: expected a mapping of endpoint name to {rpm, tpm, concurrency}")
    out = {}
    for endpoint, values in data.items():
        where = f"limits.{endpoint}"
        if not isinstance(values, Mapping) or set(values) - LIMIT_FIELDS:
            raise SpecError(f"{where}: allowed keys are {', '.join(sorted(LIMIT_FIELDS))}")
        out[str(endpoint)] = Limits(
            rpm=optional_positive(values.get("rpm"), f"{where}.rpm"),
            tpm=optional_positive(values.get("tpm"), f"{where}.tpm"),
            concurrency=optional_positive(values.get("concurrency"), f"{where}.concurrency"),
            burst_s=positive_number(values.get("burst_s", DEFAULT_BURST_S), f"{where}.burst_s"),
        )
    return out


def parse_endpoints(data: Any) -> dict[str, Mapping[str, Any]]:
    if not isinstance(data, Mapping):
        raise SpecError("endpoints: expected a mapping of endpoint name to fields")
    for name, values in data.items():
        where = f"endpoints.{name}"
        if not isinstance(values, Mapping):
            raise SpecError(f"{where}: expected a mapping of fields")
        if "api_key" in values or "api_key_env" in values:
            raise SpecError(
                f"{where}: a run spec cannot name a key; declare endpoints that need one in "
                "the providers file (PROMPTLAB_PROVIDERS)"
            )
        if isinstance(values, Mapping) and set(values) - ENDPOINT_FIELDS:
            raise SpecError(f"{where}: allowed keys are {', '.join(sorted(ENDPOINT_FIELDS))}")
        kind = values.get("kind")
        known = kind in endpoint_kinds(load=False) or kind in endpoint_kinds()
        if "kind" in values and not known:
            raise SpecError(f"{where}.kind: one of {', '.join(endpoint_kinds())}")
        if "base_url" in values:
            loopback_url(values["base_url"], f"{where}.base_url")
        for key in ("rpm", "tpm", "concurrency"):
            optional_positive(values.get(key), f"{where}.{key}")
        if "batch" in values:  # sizes and polling of provider batches; no address in it
            try:
                batch_settings(values["batch"], where)
            except ConfigError as exc:
                raise SpecError(str(exc)) from exc
    return {str(k): dict(v) for k, v in data.items()}


def loopback_url(value: Any, where: str) -> str:
    """An http(s) URL on this machine; anything else is refused (see LOOPBACK_NAMES)."""
    if not isinstance(value, str):
        raise SpecError(f"{where}: expected a URL string, got {value!r}")
    try:
        parts = urlsplit(value)
        host = parts.hostname or ""
        parts.port  # noqa: B018 - raises ValueError on a malformed port
    except ValueError as exc:
        raise SpecError(f"{where}: not a valid URL ({exc})") from exc
    if parts.scheme not in ("http", "https") or not host:
        raise SpecError(f"{where}: expected an http:// or https:// URL, got {value!r}")
    if not is_loopback(host):
        raise SpecError(
            f"{where}: {host} is not this machine; a run spec may only add endpoints on "
            "loopback (127.0.0.1, ::1, localhost). Declare other servers in the providers file"
        )
    return value


def confine_endpoint(
    name: str, fields: Mapping[str, Any], configured: Mapping[str, EndpointConfig]
) -> None:
    """Refuse what a caller of a shared server may not set for an endpoint: a key
    variable or a URL that the providers file does not pair (a key read here must only
    go where this machine's owner sent it), or a new endpoint off this machine."""
    known = configured.get(name)
    if known is not None:
        for field in ("base_url", "api_key_env"):
            if field in fields and fields[field] != getattr(known, field):
                raise SpecError(
                    f"endpoint {name!r}: {field} differs from the providers file's; through a "
                    "server an endpoint's URL and key variable are the ones configured there"
                )
        return
    if "api_key_env" in fields:
        raise SpecError(
            f"endpoint {name!r}: a key variable for an endpoint the providers file does not "
            "declare; through a server, declare it in the providers file (PROMPTLAB_PROVIDERS)"
        )
    loopback_url(fields.get("base_url"), f"endpoint {name!r}: base_url")


def is_loopback(host: str) -> bool:
    if host.lower() in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def positive_int(value: Any, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise SpecError(f"{where}: expected a positive integer, got {value!r}")
    return value


def positive_number(value: Any, where: str) -> float:
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not math.isfinite(value)
        or value <= 0
    ):
        raise SpecError(f"{where}: expected a positive number of seconds, got {value!r}")
    return float(value)


def optional_positive(value: Any, where: str) -> int | None:
    return None if value is None else positive_int(value, where)
