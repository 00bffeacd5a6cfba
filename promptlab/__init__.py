"""promptlab: versioned prompts, A/B batches through one rate-limit-aware executor, DuckDB."""

from promptlab.config import Settings
from promptlab.errors import (
    ErrorKind,
    PromptlabError,
    ProviderError,
    VariableError,
)
from promptlab.registry import PromptVersion, Registry
from promptlab.store import Store
from promptlab.templates import Message, Template

__all__ = [
    "ErrorKind",
    "Message",
    "PromptVersion",
    "PromptlabError",
    "ProviderError",
    "Registry",
    "Settings",
    "Store",
    "Template",
    "VariableError",
]
