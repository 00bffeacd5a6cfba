"""`wb.datasets`: import, list, read, check and change datasets; what is shown is masked.

The rules for files and rows live in promptlab/data/datasets.py; this facade adds the
configured author, the audit trail's change events and the masking of every cell shown.
"""

from __future__ import annotations

import builtins  # `list` below names a method: annotations say builtins.list
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

from promptlab.data.datasets import DatasetStore, check_rows
from promptlab.errors import DatasetError
from promptlab.facades.context import Context
from promptlab.records import Conversation, DatasetInfo, RowCheck, SessionSummary, Turn

__all__ = ["Datasets", "MAX_TURNS_SHOWN"]

#: Most messages of one session shown at once (a page, a terminal).
MAX_TURNS_SHOWN = 2_000


class Datasets:
    """Datasets of one store, as pages and commands see them."""

    def __init__(self, context: Context) -> None:
        self._context = context
        self._datasets = DatasetStore(context.store)

    def import_file(
        self,
        path: str | Path,
        name: str,
        *,
        fmt: str | None = None,
        unit_column: str | None = None,
        replace: bool = False,
        conversation: Conversation | None = None,
        source: str | None = None,
    ) -> DatasetInfo:
        """Import a CSV, JSON Lines or Parquet file as a dataset (see promptlab.data.datasets);
        with `conversation`, as a conversation log (promptlab.conversations.replay).
        `source`: the file the audit trail names (a client's, for a server's upload)."""
        author = self._context.author()
        info = self._datasets.import_file(
            path,
            name,
            fmt=fmt,
            unit_column=unit_column,
            replace=replace,
            author=author,
            conversation=conversation,
        )
        self._context.audit_change(
            "dataset.imported",
            author,
            {
                "dataset": name,
                "source": source or str(path),
                "rows": info.row_count,
                "replace": replace,
            },
        )
        return info

    def get(self, name: str) -> DatasetInfo:
        return self._datasets.get(name)

    def preview(self, name: str, limit: int = 20) -> builtins.list[dict[str, Any]]:
        """The first rows, to show: any key in a cell is masked (`rows`)."""
        return list(self.rows(name, limit))

    def rows(self, name: str, limit: int | None = None) -> Iterator[dict[str, Any]]:
        """Rows in row order (row 1 first), streamed from the store, as they are shown:
        every key value or credential-shaped string in a cell masked. The store keeps
        the rows as imported (a run renders its prompts from them; the engine reads them
        itself, not through here)."""
        redactor = self._context.redactor()
        return (redactor.value(row) for row in self._datasets.iter_rows(name, limit))

    def set_unit_column(self, name: str, column: str | None) -> DatasetInfo:
        """Name the column of dataset `name` that holds the unit id (None: none); a
        column the dataset lacks is a DatasetError naming both."""
        info = self._datasets.set_unit_column(name, column)
        self._context.audit_change(
            "dataset.unit_column_set",
            self._context.author(),
            {"dataset": name, "unit_column": column},
        )
        return info

    def delete(self, name: str) -> None:
        self._datasets.delete(name)

    def sessions(self, name: str, limit: int = 500) -> builtins.list[SessionSummary]:
        """A conversation log's sessions, in order of first appearance."""
        return self._datasets.tables.sessions(name, self._conversation(name), limit)

    def session(self, name: str, session: str, limit: int = MAX_TURNS_SHOWN) -> builtins.list[Turn]:
        """One session's messages in order, masked as every row shown is."""
        redactor = self._context.redactor()
        turns = self._datasets.tables.session_turns(name, self._conversation(name), session, limit)
        return [replace(t, content=redactor(t.content)) for t in turns]

    def _conversation(self, name: str) -> Conversation:
        conversation = self._datasets.get(name).conversation
        if conversation is None:
            raise DatasetError(
                f"dataset {name!r} is not a conversation log (import it with its session, "
                "order, role and content columns)"
            )
        return conversation

    def check_rows(self, name: str, prompt_ref: str, listed: int = 100) -> RowCheck:
        """Every row of the dataset checked against a prompt version's variables."""
        template = self._context.registry.resolve(prompt_ref).template
        result = check_rows(self._datasets.iter_rows(name), template, listed=listed)
        # A problem may quote the cell (`'sk-...' is not one of ...`): masked like the rows.
        redactor = self._context.redactor()
        problems = [replace(p, problem=redactor(p.problem)) for p in result.problems]
        return replace(result, problems=problems)

    def list(self) -> builtins.list[DatasetInfo]:
        return self._datasets.list()
