"""One frozen Settings object, read from the environment."""

from __future__ import annotations

import functools
import os
import pwd
import re
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path

from promptlab.errors import ConfigError

#: The repository root in a source checkout (editable install), where data/ lives.
PROJECT_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_DB = PROJECT_ROOT / "data" / "promptlab.duckdb"
DATA_DIR = PROJECT_ROOT / "data"
DEMO_DIR = DATA_DIR / "demo"
#: Items one run may plan (rows x variants x repeats), unless PROMPTLAB_MAX_ITEMS says
#: otherwise: ten times the largest run we measured (1M items), and far below what
#: would exhaust memory or disk with a typo like `repeats: 100000000000`.
DEFAULT_MAX_ITEMS = 10_000_000
#: Seconds between the gateway journal's folds (promptlab/gateway/journal.py).
GATEWAY_FOLD_S = 0.25
#: Seconds between a server's checks of its guarded rollouts (server/periodic.py).
ROLLOUT_CHECK_S = 5.0
#: Rotating backups kept by the owner unless PROMPTLAB_BACKUP_KEEP says otherwise.
DEFAULT_BACKUP_KEEP = 48
_PERIOD = re.compile(r"(\d+)([smhd])")
_PERIOD_S = {"s": 1, "m": 60, "h": 3600, "d": 86400}
#: How log lines are written (PROMPTLAB_LOG_FORMAT): text for people, json for a
#: collector (one object a line; see promptlab.audit.logjson).
LOG_FORMATS = ("text", "json")


def _flag(value: str | None, default: bool) -> bool:
    if value is None or value == "":
        return default
    return value.strip().lower() not in {"0", "false", "no", "off"}


def _positive_int(name: str, value: str | None, default: int) -> int:
    if value is None or value.strip() == "":
        return default
    try:
        number = int(value.replace("_", ""))
    except ValueError:
        number = 0
    if number < 1:
        raise ConfigError(f"{name}: expected a positive integer, got {value!r}")
    return number


def parse_period(name: str, value: str) -> float:
    """`90s`, `30m`, `1h`, `1d` as seconds (one at least); ConfigError naming `name`."""
    match = _PERIOD.fullmatch(value.strip())
    seconds = int(match.group(1)) * _PERIOD_S[match.group(2)] if match else 0
    if seconds < 1:
        raise ConfigError(f"{name}: expected a period like 90s, 30m, 1h or 1d, got {value!r}")
    return float(seconds)


def _positive_seconds(name: str, value: str | None, default: float) -> float:
    if value is None or value.strip() == "":
        return default
    try:
        seconds = float(value)
    except ValueError:
        seconds = 0.0
    if not (0 < seconds < float("inf")):
        raise ConfigError(f"{name}: expected a positive number of seconds, got {value!r}")
    return seconds


def parse_mask_names(value: str | None) -> tuple[str, ...]:
    """PROMPTLAB_MASK's pattern names; ConfigError names the first unknown one."""
    from promptlab.audit.chain import MASK_PATTERNS

    names = tuple(n.strip().lower() for n in (value or "").split(",") if n.strip())
    unknown = [n for n in names if n not in MASK_PATTERNS]
    if unknown:
        raise ConfigError(
            f"PROMPTLAB_MASK: unknown pattern {unknown[0]!r} (known: {', '.join(MASK_PATTERNS)})"
        )
    return names


def parse_log_format(value: str | None) -> str:
    """PROMPTLAB_LOG_FORMAT's format: text (unset or empty) or json; nothing else."""
    chosen = (value or "").strip().lower() or "text"
    if chosen not in LOG_FORMATS:
        raise ConfigError(f"PROMPTLAB_LOG_FORMAT: expected text or json, got {value!r}")
    return chosen


@dataclass(frozen=True)
class Settings:
    """Everything promptlab reads from the environment, in one place."""

    db_path: Path = DEFAULT_DB
    providers_file: Path | None = None
    load_demo: bool = True
    author: str = field(default_factory=lambda: person_at_keyboard(os.environ))
    max_items: int = DEFAULT_MAX_ITEMS
    #: The only folder the app reads datasets from (specs pasted into a shared app
    #: must not reach other files of the server). The CLI reads any path it is given.
    data_dir: Path = DATA_DIR
    #: Record every item's trace in the audit trail (PROMPTLAB_AUDIT=0 turns it off).
    audit: bool = True
    #: Patterns masked in stored prompts and outputs (PROMPTLAB_MASK=email,phone,key;
    #: see promptlab.audit.chain.MASK_PATTERNS). Off by default: masking changes the outputs.
    mask: tuple[str, ...] = ()
    #: Collect garbage less often while runs are going (PROMPTLAB_TUNE_GC=0 turns it
    #: off; see promptlab.engine.collector). Process-wide while a run is going.
    tune_gc: bool = True
    #: Append every answer to the answer log before counting it (PROMPTLAB_ANSWER_LOG=0
    #: turns it off; see promptlab.engine.record.answerlog): a killed process loses no answer.
    answer_log: bool = True
    #: `HOST:PORT` the app also serves the API on (PROMPTLAB_SERVE; `make run` sets
    #: 127.0.0.1:8765), so the CLI and services share its database and engine.
    serve: str | None = None
    #: `text` or `json` (PROMPTLAB_LOG_FORMAT): how promptlab's log lines are written.
    log_format: str = "text"
    #: Seconds between folds of the gateway's call journal into the store
    #: (PROMPTLAB_GATEWAY_FOLD_S): how soon a live call shows in metrics and on Compare.
    gateway_fold_s: float = GATEWAY_FOLD_S
    #: Seconds between a server's checks of its guarded rollouts (PROMPTLAB_ROLLOUT_CHECK_S).
    rollout_check_s: float = ROLLOUT_CHECK_S
    #: Hosts a rollout's `on_decision_url` may post to (PROMPTLAB_WEBHOOK_HOSTS): an
    #: experiment file is a user's text; where the server posts is the operator's call.
    webhook_hosts: tuple[str, ...] = ()
    #: Seconds between the owner's rotating backups (PROMPTLAB_BACKUP_EVERY, `1h`;
    #: None: none), how many it keeps (PROMPTLAB_BACKUP_KEEP) and where
    #: (PROMPTLAB_BACKUP_DIR; None: `backups/` beside the database).
    backup_every_s: float | None = None
    backup_keep: int = DEFAULT_BACKUP_KEEP
    backup_dir: Path | None = None
    #: Serve `promptlab gateway` processes through the broker (PROMPTLAB_GATEWAY_RELAY=1,
    #: or serve's --gateway-relay): publish what they serve, store what they record.
    gateway_relay: bool = False

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Settings:
        env = os.environ if environ is None else environ
        providers = env.get("PROMPTLAB_PROVIDERS")
        return cls(
            db_path=Path(env.get("PROMPTLAB_DB") or DEFAULT_DB),
            providers_file=Path(providers) if providers else None,
            load_demo=_flag(env.get("PROMPTLAB_DEMO"), True),
            author=env.get("PROMPTLAB_AUTHOR") or person_at_keyboard(env),
            max_items=_positive_int(
                "PROMPTLAB_MAX_ITEMS", env.get("PROMPTLAB_MAX_ITEMS"), DEFAULT_MAX_ITEMS
            ),
            data_dir=Path(env.get("PROMPTLAB_DATA_DIR") or DATA_DIR),
            audit=_flag(env.get("PROMPTLAB_AUDIT"), True),
            mask=parse_mask_names(env.get("PROMPTLAB_MASK")),
            tune_gc=_flag(env.get("PROMPTLAB_TUNE_GC"), True),
            answer_log=_flag(env.get("PROMPTLAB_ANSWER_LOG"), True),
            serve=env.get("PROMPTLAB_SERVE") or None,
            log_format=parse_log_format(env.get("PROMPTLAB_LOG_FORMAT")),
            gateway_fold_s=_positive_seconds(
                "PROMPTLAB_GATEWAY_FOLD_S", env.get("PROMPTLAB_GATEWAY_FOLD_S"), GATEWAY_FOLD_S
            ),
            webhook_hosts=tuple(
                h.strip().lower()
                for h in env.get("PROMPTLAB_WEBHOOK_HOSTS", "").split(",")
                if h.strip()
            ),
            rollout_check_s=_positive_seconds(
                "PROMPTLAB_ROLLOUT_CHECK_S", env.get("PROMPTLAB_ROLLOUT_CHECK_S"), ROLLOUT_CHECK_S
            ),
            backup_every_s=(
                parse_period("PROMPTLAB_BACKUP_EVERY", every)
                if (every := env.get("PROMPTLAB_BACKUP_EVERY", "").strip())
                else None
            ),
            backup_keep=_positive_int(
                "PROMPTLAB_BACKUP_KEEP", env.get("PROMPTLAB_BACKUP_KEEP"), DEFAULT_BACKUP_KEEP
            ),
            backup_dir=Path(backup_dir)
            if (backup_dir := env.get("PROMPTLAB_BACKUP_DIR"))
            else None,
            gateway_relay=_flag(env.get("PROMPTLAB_GATEWAY_RELAY"), False),
        )

    def backup_folder(self) -> Path:
        """Where the owner's rotating backups go."""
        return self.backup_dir or self.db_path.parent / "backups"

    def with_db(self, db_path: str | Path | None) -> Settings:
        """A copy pointing at another database file (the CLI's --db)."""
        return self if db_path is None else replace(self, db_path=Path(db_path))


def person_at_keyboard(env: Mapping[str, str]) -> str:
    """Who changes are recorded for when PROMPTLAB_AUTHOR is unset: git's `user.name`
    (the name a team already knows its people by), else the OS user; never
    "anonymous" (a local app's every change was by "anonymous" where USER was unset)."""
    return _git_user_name(env.get("HOME") or "") or env.get("USER") or _os_user()


@functools.lru_cache(maxsize=8)
def _git_user_name(home: str) -> str:
    """`git config --global user.name` for this HOME ("" without git or a name)."""
    environ = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": home}
    try:
        done = subprocess.run(
            ["git", "config", "--global", "user.name"],
            capture_output=True,
            text=True,
            timeout=5,
            env=environ,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return ""
    return done.stdout.strip() if done.returncode == 0 else ""


def _os_user() -> str:
    try:
        return pwd.getpwuid(os.getuid()).pw_name
    except (KeyError, OSError):
        return f"uid {os.getuid()}"
