"""Prompts, their versions and label moves in DuckDB: every SQL statement the registry needs.

The rules (names, semantic versions, what a reference means) stay in
`promptlab.prompts.registry`; this module only reads and writes rows and returns records.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime
from typing import Any

import duckdb

from promptlab.prompts.templates import Template
from promptlab.records import LabelEvent, PromptVersion
from promptlab.records.prompts import GitSource
from promptlab.store.connection import Store

_VERSION_COLUMNS = (
    "v.prompt_name, v.id, v.semver, v.content, v.author, v.message, v.created_at, "
    "v.parent_id, s.git_commit, s.git_dirty, s.git_path"
)
#: Versions with the commit each was added from, when known.
_VERSIONS = (
    "prompt_versions v LEFT JOIN version_sources s "
    "ON s.prompt_name = v.prompt_name AND s.version_id = v.id"
)
#: Label moves as `LabelEvent`s, with the semantic version each one moved to.
_LABEL_EVENTS = (
    "SELECT e.prompt_name, e.label, e.version_id, v.semver, e.moved_at, e.actor "
    "FROM label_events e JOIN prompt_versions v "
    "ON v.prompt_name = e.prompt_name AND v.id = e.version_id"
)
#: Newest version first: by number, not by time (a version may be raised by hand).
_NEWEST_FIRST = "ORDER BY v.major DESC, v.minor DESC, v.patch DESC"


class PromptStore:
    """Reads and writes of the `prompts`, `prompt_versions` and `label_events` tables."""

    def __init__(self, store: Store) -> None:
        self.store = store

    # ---- writing -------------------------------------------------------------------

    @contextmanager
    def saving(self) -> Iterator[PromptWrites]:
        """One transaction for saving a version: read the latest, then write the next."""
        with self.store.transaction() as tx:
            yield PromptWrites(tx)

    def move_label(
        self,
        name: str,
        label: str,
        version_id: str,
        *,
        actor: str,
        at: datetime,
        check: Callable[[LabelEvent | None], None] | None = None,
    ) -> None:
        """Append a move of `label` to `version_id` to the label's history.

        `check` is given the label's latest move (None: never moved) inside the same
        transaction and may raise to refuse the move: two movers cannot both pass it.
        """
        with self.store.transaction() as tx:
            if check is not None:
                row = tx.execute(
                    f"{_LABEL_EVENTS} WHERE e.prompt_name = ? AND e.label = ? "
                    "ORDER BY e.seq DESC LIMIT 1",
                    [name, label],
                ).fetchone()
                check(None if row is None else LabelEvent(*row))
            seq = tx.execute(
                "SELECT coalesce(max(seq), 0) + 1 FROM label_events "
                "WHERE prompt_name = ? AND label = ?",
                [name, label],
            ).fetchone()
            assert seq is not None
            tx.execute(
                "INSERT INTO label_events VALUES (?, ?, ?, ?, ?, ?)",
                [name, label, version_id, at, actor, seq[0]],
            )

    # ---- reading -------------------------------------------------------------------

    def prompt_count(self) -> int:
        with self.store.read() as cur:
            row = cur.execute("SELECT count(*) FROM prompts").fetchone()
        return int(row[0]) if row else 0

    def prompts(self) -> list[tuple[str, str]]:
        """(name, description) of every prompt, by name."""
        with self.store.read() as cur:
            rows = cur.execute("SELECT name, description FROM prompts ORDER BY name").fetchall()
        return [(r[0], r[1]) for r in rows]

    def version_counts(self) -> dict[str, int]:
        """Versions per prompt name; prompts without versions are absent."""
        with self.store.read() as cur:
            rows = cur.execute(
                "SELECT prompt_name, count(*) FROM prompt_versions GROUP BY prompt_name"
            ).fetchall()
        return {r[0]: int(r[1]) for r in rows}

    def description(self, name: str) -> str | None:
        """The prompt's description; None when there is no such prompt."""
        with self.store.read() as cur:
            row = cur.execute("SELECT description FROM prompts WHERE name = ?", [name]).fetchone()
        return None if row is None else str(row[0])

    def versions(self, name: str) -> list[PromptVersion]:
        """Every version of `name`, newest first (empty when there is no such prompt)."""
        with self.store.read() as cur:
            rows = cur.execute(
                f"SELECT {_VERSION_COLUMNS} FROM {_VERSIONS} WHERE v.prompt_name = ? "
                + _NEWEST_FIRST,
                [name],
            ).fetchall()
        return [_version_from_row(r) for r in rows]

    def current_labels(self, name: str) -> list[tuple[str, str]]:
        """(label, version id) for each label of `name` as it points now, by label."""
        with self.store.read() as cur:
            rows = cur.execute(
                "SELECT label, version_id FROM label_events WHERE prompt_name = ? "
                "QUALIFY row_number() OVER (PARTITION BY label ORDER BY seq DESC) = 1 "
                "ORDER BY label",
                [name],
            ).fetchall()
        return [(r[0], r[1]) for r in rows]

    def label_history(self, name: str, label: str | None = None) -> list[LabelEvent]:
        """Label moves of `name` (of one `label` when given), newest first."""
        query = f"{_LABEL_EVENTS} WHERE e.prompt_name = ?"
        params: list[Any] = [name]
        if label is not None:
            query += " AND e.label = ?"
            params.append(label)
        with self.store.read() as cur:
            rows = cur.execute(query + " ORDER BY e.moved_at DESC, e.seq DESC", params).fetchall()
        return [LabelEvent(*row) for row in rows]


class PromptWrites:
    """The statements of one save, all inside the transaction `PromptStore.saving` opened."""

    def __init__(self, tx: duckdb.DuckDBPyConnection) -> None:
        self._tx = tx

    def ensure_prompt(self, name: str, description: str | None, at: datetime) -> None:
        """Create the prompt if new; replace its description when one is given."""
        row = self._tx.execute("SELECT 1 FROM prompts WHERE name = ?", [name]).fetchone()
        if row is None:
            self._tx.execute("INSERT INTO prompts VALUES (?, ?, ?)", [name, description or "", at])
        elif description is not None:
            self._tx.execute(
                "UPDATE prompts SET description = ? WHERE name = ?", [description, name]
            )

    def version(self, name: str, version_id: str) -> PromptVersion | None:
        row = self._tx.execute(
            f"SELECT {_VERSION_COLUMNS} FROM {_VERSIONS} WHERE v.prompt_name = ? AND v.id = ?",
            [name, version_id],
        ).fetchone()
        return None if row is None else _version_from_row(row)

    def latest(self, name: str) -> PromptVersion | None:
        row = self._tx.execute(
            f"SELECT {_VERSION_COLUMNS} FROM {_VERSIONS} WHERE v.prompt_name = ? "
            + _NEWEST_FIRST
            + " LIMIT 1",
            [name],
        ).fetchone()
        return None if row is None else _version_from_row(row)

    def add_version(self, version: PromptVersion, number: tuple[int, int, int]) -> None:
        self._tx.execute(
            "INSERT INTO prompt_versions VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            [
                version.prompt_name,
                version.id,
                version.semver,
                *number,
                # Key order kept: variables stay in first-use order.
                json.dumps(version.template.canonical()),
                version.author,
                version.message,
                version.created_at,
                version.parent_id,
            ],
        )

    def set_source(self, name: str, version_id: str, git: GitSource, at: datetime) -> None:
        """Record `git` as the commit `version_id` came from (in place of any before)."""
        self._tx.execute(
            "INSERT OR REPLACE INTO version_sources VALUES (?, ?, ?, ?, ?, ?)",
            [name, version_id, git.commit, git.dirty, git.path, at],
        )


def _version_from_row(row: tuple[Any, ...]) -> PromptVersion:
    name, version_id, semver, content, author, message, created_at, parent_id = row[:8]
    commit, dirty, path = row[8:]
    return PromptVersion(
        prompt_name=name,
        id=version_id,
        semver=semver,
        template=Template.from_canonical(json.loads(content)),
        author=author,
        message=message,
        created_at=created_at,
        parent_id=parent_id,
        git=None if commit is None else GitSource(commit, bool(dirty), path),
    )
