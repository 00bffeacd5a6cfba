"""The git commit a prompt file was added from, read with git itself.

A version added from a file inside a git work tree records the commit checked out
(HEAD) and whether the file differed from that commit (edited, staged or untracked), so
a version can be found by its semantic version or by the commit it came from
(`name@git:abc1234`, promptlab/prompts/registry.py).

Only commands that run nothing a repository configures are used: `git rev-parse` reads
refs and trees, and `git hash-object --no-filters` hashes the file as it is. `git
status` could run a hook named in the repository's own config (core.fsmonitor) or a
clean filter from its .gitattributes, so a prompt file from a cloned repository could
run code; it is not used. In a partial clone a tree read could fetch what is missing,
through the upload-pack command the repository's config names: lazy fetches and every
transport are switched off. A file whose blob differs from HEAD's only through such a
filter is reported as changed: the safe side.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

from promptlab.records.prompts import GitSource

#: Long enough for a repository on a slow disk, short enough that `prompt add` never hangs.
GIT_TIMEOUT_S = 5.0
#: A commit as git names it: SHA-1 (40 hex digits) or SHA-256 (64).
COMMIT_PATTERN = re.compile(r"^(?:[0-9a-f]{40}|[0-9a-f]{64})$")


def git_source(file: Path) -> GitSource | None:
    """The commit checked out where `file` lies and whether the file differs from it;
    None when git is missing, the file is in no work tree, or the tree has no commit."""
    git = shutil.which("git")
    if git is None:
        return None
    file = file.resolve()  # a link's target: the file git tracks
    folder = file.parent
    head = _git(git, folder, "rev-parse", "--verify", "--quiet", "HEAD^{commit}")
    commit = (head or "").strip()
    if not COMMIT_PATTERN.match(commit):
        return None  # no work tree here, or one without a commit yet
    prefix = (_git(git, folder, "rev-parse", "--show-prefix") or "").strip()
    path = f"{prefix}{file.name}"
    committed = _git(git, folder, "rev-parse", "--verify", "--quiet", f"HEAD:./{file.name}")
    current = _git(git, folder, "hash-object", "--no-filters", "--", file.name)
    dirty = committed is None or current is None or committed.strip() != current.strip()
    return GitSource(commit=commit, dirty=dirty, path=path)


def _git(git: str, folder: Path, *args: str) -> str | None:
    """`git ARGS` run in `folder`: its output, or None when it fails."""
    # Not the user's terminal or pager; no lock taken on the index of their checkout;
    # no fetch of what a partial clone lacks, and no transport at all (a fetch would run
    # the upload-pack command a cloned repository's config names).
    env = {
        **os.environ,
        "GIT_TERMINAL_PROMPT": "0",
        "GIT_OPTIONAL_LOCKS": "0",
        "GIT_NO_LAZY_FETCH": "1",
        "GIT_ALLOW_PROTOCOL": "none",
    }
    try:
        done = subprocess.run(  # noqa: S603 - git from PATH, fixed arguments
            [git, *args],
            cwd=folder,
            env=env,
            capture_output=True,
            text=True,
            timeout=GIT_TIMEOUT_S,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout if done.returncode == 0 else None
