"""One frozen Settings object, read from the environment."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path

#: The repository root in a source checkout (editable install), where data/ lives.
PROJECT_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_DB = PROJECT_ROOT / "data" / "promptlab.duckdb"
DEMO_DIR = PROJECT_ROOT / "data" / "demo"


def _flag(value: str | None, default: bool) -> bool:
    if value is None or value == "":
        return default
    return value.strip().lower() not in {"0", "false", "no", "off"}


@dataclass(frozen=True)
class Settings:
    """Everything promptlab reads from the environment, in one place."""

    db_path: Path = DEFAULT_DB
    providers_file: Path | None = None
    load_demo: bool = True
    author: str = "anonymous"

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Settings:
        env = os.environ if environ is None else environ
        providers = env.get("PROMPTLAB_PROVIDERS")
        return cls(
            db_path=Path(env.get("PROMPTLAB_DB") or DEFAULT_DB),
            providers_file=Path(providers) if providers else None,
            load_demo=_flag(env.get("PROMPTLAB_DEMO"), True),
            author=env.get("PROMPTLAB_AUTHOR") or env.get("USER") or "anonymous",
        )

    def with_db(self, db_path: str | Path | None) -> Settings:
        """A copy pointing at another database file (the CLI's --db)."""
        return self if db_path is None else replace(self, db_path=Path(db_path))
