"""The exception tree of promptlab.

    PromptlabError
    ├── ConfigError                  bad settings or providers file
    │   └── SpecError                a run spec is invalid (names the field)
    ├── StoreError                   DuckDB storage problems
    │   ├── RunNotFoundError         no run has that id
    │   ├── ScheduleNotFoundError    no schedule has that name
    │   ├── DatabaseLockedError      another process holds the database file
    │   └── FileReadError            DuckDB's reader refused a file (file and line)
    ├── TemplateError                a template cannot be saved or rendered
    │   ├── TemplateSyntaxError      not valid template syntax (with line)
    │   ├── UnsafeTemplateError      reaches for Python internals or unknown constructs
    │   ├── RoleOrderError           system/user/assistant order is wrong (with index)
    │   ├── VariableError            values do not fit the variable schema (all problems)
    │   ├── TemplateLimitError       too big, too deep or loops too much (names the limit)
    │   └── PatternError             a regex RE2 cannot run (in promptlab.checks.patterns)
    ├── RegistryError                prompt registry problems
    │   ├── NotFoundError            a prompt, version or label does not exist
    │   ├── PromptExistsError        creating a prompt under a name already in use
    │   └── VersionError             a semantic version override is not allowed
    ├── PromptFileError              a YAML prompt file is malformed (file and field)
    ├── ExperimentError              an experiment file, config, unit id or exposure is wrong
    ├── DatasetError                 a dataset cannot be imported or changed (file, line, column)
    ├── FeedbackError                a feedback or log file has a bad row (file, row, column)
    ├── EngineError                  a run cannot be submitted, resumed or cancelled as asked
    ├── ItemKeyError                 an item key or prefix is malformed or matches several
    ├── OutputFileError              a file of outputs or a schema to check them is wrong (line)
    ├── ExportError                  a table cannot be exported as asked (table, format, file)
    ├── ReviewError                  a review item does not exist or cannot be decided as asked
    ├── StaleChangeError             a change was based on what someone else has changed since
    ├── ServerError                  the server refused a request, or is gone (promptlab.server)
    └── ProviderError                a provider call failed; `kind` says how (ErrorKind)

Inside a batch, a ProviderError is data: it is recorded on the item, not raised
out of the run. DuckDB's own exceptions never leave `promptlab.store`: the store raises
a StoreError (a file it cannot read: FileReadError, which the data layer says as a
DatasetError or FeedbackError).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime


class PromptlabError(Exception):
    """Base class of every error promptlab raises on purpose."""


class ConfigError(PromptlabError):
    """Settings or the providers file are invalid."""


class SpecError(ConfigError):
    """The run spec is invalid; the message names the field."""


class StoreError(PromptlabError):
    """The DuckDB store cannot do what was asked."""


class RunNotFoundError(StoreError):
    """No run has that id."""


class ScheduleNotFoundError(StoreError):
    """No schedule has that name."""


class DatabaseLockedError(StoreError):
    """Another process holds the database file open for writing."""

    def __init__(self, path: str, holder: str | None = None) -> None:
        self.path = path
        self.holder = holder
        who = f" ({holder})" if holder else ""
        super().__init__(
            f"database {path} is in use by another process{who}; "
            "stop it or point PROMPTLAB_DB / --db at another file"
        )


class FileReadError(StoreError):
    """DuckDB's reader refused a file being imported; the message is one line naming the
    file and, when DuckDB says, the line."""


class TemplateError(PromptlabError):
    """A template cannot be saved or rendered."""


class TemplateSyntaxError(TemplateError):
    """The template text is not valid template syntax."""


class UnsafeTemplateError(TemplateError):
    """The template uses a construct outside the safe subset."""


class RoleOrderError(TemplateError):
    """Messages are not in a valid system/user/assistant order."""


class TemplateLimitError(TemplateError):
    """A template, or what it renders, goes past a size, nesting or loop limit."""


@dataclass(frozen=True)
class VariableProblem:
    """One thing wrong with one variable value."""

    variable: str
    message: str

    def __str__(self) -> str:
        return f"{self.variable}: {self.message}"


class VariableError(TemplateError):
    """Variable values do not fit the template's variable schema."""

    def __init__(self, problems: Sequence[VariableProblem]) -> None:
        self.problems = list(problems)
        super().__init__("; ".join(str(p) for p in self.problems))


class RegistryError(PromptlabError):
    """The prompt registry cannot do what was asked."""


class NotFoundError(RegistryError):
    """A prompt, version or label does not exist."""


class PromptExistsError(RegistryError):
    """A new prompt was asked for under a name that already has other content."""

    def __init__(self, name: str, latest_ref: str) -> None:
        self.name = name
        self.latest_ref = latest_ref
        super().__init__(
            f"a prompt named {name!r} already exists (latest {latest_ref}); "
            "to change it, save a new version of it"
        )


class VersionError(RegistryError):
    """A requested semantic version is not allowed."""


class PromptFileError(PromptlabError):
    """A YAML prompt file is malformed; the message names file and field."""


class ExperimentError(PromptlabError):
    """An experiment file, exported config, unit id or exposure line is wrong (names where)."""


class DatasetError(PromptlabError):
    """A dataset file cannot be imported, or a dataset changed as asked; the message
    names the file and the place (line, byte, column)."""


class FeedbackError(PromptlabError):
    """A feedback or production log file cannot be imported, or a rating is wrong; the
    message names the file, the row and the column."""


class OutputFileError(PromptlabError):
    """A file given to `promptlab validate` (outputs or schema) is malformed; names the line."""


class ExportError(PromptlabError):
    """A table cannot be exported as asked; names the table, format, filter or file."""


class ReviewError(PromptlabError):
    """A review item does not exist, or cannot be added or decided as asked."""


class StaleChangeError(PromptlabError):
    """A change was based on a version someone else has changed since (a review item's
    version, where a label pointed, an experiment's revision); nothing was changed.

    The message names who made the newer change and when; the server answers 409.
    """

    def __init__(self, message: str, *, changed_by: str | None, changed_at: datetime | None):
        self.changed_by = changed_by
        self.changed_at = changed_at
        super().__init__(message)


def moment(at: datetime | None) -> str:
    """A stored time as people read it in a refusal: `2026-12-03 10:02 UTC`."""
    if at is None:
        return "an unknown time"
    return at.astimezone(UTC).strftime("%Y-%m-%d %H:%M UTC")


class EngineError(PromptlabError):
    """A run cannot be submitted, resumed or cancelled as asked."""


class ItemKeyError(PromptlabError):
    """An item key (or prefix) that is malformed or matches more than one item."""


class ErrorKind(enum.StrEnum):
    """How a provider call failed; adapters map every SDK error to one of these."""

    RATE_LIMIT = "rate_limit"
    QUOTA = "quota"
    OVERLOADED = "overloaded"
    TIMEOUT = "timeout"
    CONNECTION = "connection"
    SERVER = "server"
    BAD_REQUEST = "bad_request"
    AUTH = "auth"
    NOT_FOUND = "not_found"
    CONTEXT_LENGTH = "context_length"
    CONTENT_FILTER = "content_filter"


class ProviderError(PromptlabError):
    """A provider call failed.

    `retry_after_s` is the server's hint (Retry-After / retry-after-ms) when it gave one;
    `should_retry` mirrors the `x-should-retry` header when present.

    The message and header values are a provider's text, which may echo the key it was
    sent: they are redacted here, once, so no path that stores, logs, shows or forwards
    an error (a batch's refusal, a worker's answer, a status line) can carry a key.
    """

    def __init__(
        self,
        kind: ErrorKind,
        message: str,
        *,
        status: int | None = None,
        provider: str | None = None,
        retry_after_s: float | None = None,
        should_retry: bool | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        # Imported here: promptlab.audit.redact imports this module.
        from promptlab.audit.redact import Redactor

        redactor = Redactor.from_environ()
        message = redactor(message)
        self.kind = kind
        self.status = status
        self.provider = provider
        self.retry_after_s = retry_after_s
        self.should_retry = should_retry
        self.headers = {name: redactor(str(value)) for name, value in (headers or {}).items()}
        self.provider_message = message
        #: The worker that made the call, when a Celery worker did (set by the owner).
        self.served_by: str | None = None
        where = f"{provider} " if provider else ""
        code = f" {status}" if status is not None else ""
        super().__init__(f"{where}{kind.value}{code}: {message}")
