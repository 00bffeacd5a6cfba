"""Versions tied to their git commit (issue 63, item 3): a version added from a file in
a git work tree records the commit checked out and whether the file differed from it;
`NAME@git:COMMIT` resolves it; `prompt history` and `prompt show` print it, alone and
through a server. Every repository here is a real one, made with git in the test."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from promptlab.prompts.gitsource import git_source
from promptlab.records.prompts import GitSource
from tests.one_door_helpers import invoke, unserved
from tests.test_server import Served

VERSION_1 = """\
name: greet
versions:
  - version: 1.0.0
    messages:
      - role: user
        content: Hi {{ who }}
"""
#: The same file with a second version (a new message text: a minor bump).
VERSION_2 = (
    VERSION_1
    + """\
  - version: 1.1.0
    messages:
      - role: user
        content: Hello {{ who }}
"""
)


def git(repo: Path, *args: str) -> str:
    done = subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@example.com", *args],
        cwd=repo,
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout.strip()


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    folder = tmp_path / "repo"
    folder.mkdir()
    git(folder, "init", "-q")
    (folder / "prompts").mkdir()
    (folder / "prompts" / "greet.yaml").write_text(VERSION_1, encoding="utf-8")
    git(folder, "add", ".")
    git(folder, "commit", "-qm", "first")
    return folder


def test_a_file_s_commit_and_whether_it_differs_from_it(repo: Path, tmp_path: Path) -> None:
    file = repo / "prompts" / "greet.yaml"
    head = git(repo, "rev-parse", "HEAD")
    assert git_source(file) == GitSource(head, dirty=False, path="prompts/greet.yaml")
    file.write_text(VERSION_2, encoding="utf-8")
    assert git_source(file) == GitSource(head, dirty=True, path="prompts/greet.yaml")
    git(repo, "add", ".")  # staged, not committed: still not what HEAD holds
    assert git_source(file) == GitSource(head, dirty=True, path="prompts/greet.yaml")
    untracked = repo / "new.yaml"
    untracked.write_text(VERSION_1, encoding="utf-8")
    assert git_source(untracked) == GitSource(head, dirty=True, path="new.yaml")
    outside = tmp_path / "outside.yaml"
    outside.write_text(VERSION_1, encoding="utf-8")
    assert git_source(outside) is None
    empty = tmp_path / "empty"
    empty.mkdir()
    git(empty, "init", "-q")  # a work tree without a commit
    (empty / "p.yaml").write_text(VERSION_1, encoding="utf-8")
    assert git_source(empty / "p.yaml") is None


def test_reading_a_repository_runs_nothing_it_configures(repo: Path, tmp_path: Path) -> None:
    """A cloned repository's config and attributes name programs (`git status` runs
    core.fsmonitor; clean filters run when a file is hashed as staged): none runs."""
    ran = tmp_path / "ran"
    git(repo, "config", "core.fsmonitor", f"touch {ran}; false")
    git(repo, "config", "filter.evil.clean", f"touch {ran}; cat")
    (repo / ".gitattributes").write_text("*.yaml filter=evil\n", encoding="utf-8")
    file = repo / "prompts" / "greet.yaml"
    file.write_text(VERSION_2, encoding="utf-8")
    found = git_source(file)
    assert found is not None and found.dirty
    assert not ran.exists()


def test_a_partial_clone_fetches_nothing_and_runs_no_upload_pack(
    repo: Path, tmp_path: Path
) -> None:
    """A clone without its trees (`--filter=tree:0`) would fetch one to read the file's
    blob, through the upload-pack command its own config names: nothing is fetched."""
    ran = tmp_path / "ran"
    git(repo, "config", "uploadpack.allowFilter", "true")
    clone = tmp_path / "clone"
    git(tmp_path, "clone", "-q", "--filter=tree:0", "--no-checkout", f"file://{repo}", str(clone))
    git(clone, "config", "remote.origin.uploadpack", f"touch {ran}; git-upload-pack")
    (clone / "prompts").mkdir()
    (clone / "prompts" / "greet.yaml").write_text(VERSION_1, encoding="utf-8")
    found = git_source(clone / "prompts" / "greet.yaml")
    assert found is not None and found.commit == git(repo, "rev-parse", "HEAD")
    assert not ran.exists()


def test_prompt_add_records_the_commit_and_git_refs_resolve(db_path: Path, repo: Path) -> None:
    file = repo / "prompts" / "greet.yaml"
    first = git(repo, "rev-parse", "HEAD")
    added = invoke(db_path, ["prompt", "add", str(file)])
    assert added.exit_code == 0, added.output
    assert f"from git commit {first[:12]}\n" in added.stdout
    # An edit not yet committed: its version is tied to HEAD, marked as changed.
    file.write_text(VERSION_2, encoding="utf-8")
    edited = invoke(db_path, ["prompt", "add", str(file)])
    assert "saved greet@1.1.0" in edited.stdout
    assert "(the file had uncommitted changes)" in edited.stdout
    history = invoke(db_path, ["prompt", "history", "greet"]).stdout.splitlines()
    assert history[0].split()[:3] == ["VERSION", "ID", "GIT"]
    assert [line.split()[2] for line in history[1:3]] == [f"{first[:7]}+", first[:7]]
    # Committed: the version now comes from the commit that holds it, unchanged.
    git(repo, "commit", "-qam", "second")
    second = git(repo, "rev-parse", "HEAD")
    again = invoke(db_path, ["prompt", "add", str(file)])
    assert "no changes" in again.stdout and "from git commit" not in again.stdout
    shown = invoke(db_path, ["prompt", "show", f"greet@git:{second[:7]}"]).stdout
    assert shown.startswith("greet@1.1.0 ")
    assert f"git: {second} prompts/greet.yaml\n" in shown
    shown = invoke(db_path, ["prompt", "show", f"greet@git:{first[:10]}"]).stdout
    assert shown.startswith("greet@1.0.0 ") and "uncommitted" not in shown


def test_bad_git_refs_say_what_is_wrong(db_path: Path, repo: Path) -> None:
    invoke(db_path, ["prompt", "add", str(repo / "prompts" / "greet.yaml")])
    short = invoke(db_path, ["prompt", "show", "greet@git:ab"])
    assert short.exit_code == 1
    assert "greet@git:ab: give at least 4 hex digits of a commit after 'git:'" in short.stderr
    unknown = invoke(db_path, ["prompt", "show", "greet@git:0000000"])
    assert unknown.exit_code == 1
    assert "no version of 'greet' was added from that commit" in unknown.stderr


def test_a_file_outside_git_records_no_commit(db_path: Path, tmp_path: Path) -> None:
    file = tmp_path / "greet.yaml"
    file.write_text(VERSION_1, encoding="utf-8")
    added = invoke(db_path, ["prompt", "add", str(file)])
    assert added.exit_code == 0 and "git" not in added.stdout
    history = invoke(db_path, ["prompt", "history", "greet"]).stdout.splitlines()
    assert history[1].split()[2] == "-"


def test_through_a_server_the_client_sends_the_commit(db_path: Path, repo: Path) -> None:
    """The server runs no git on a client's path: the commit travels in the body, and is
    checked there like any field."""
    file = repo / "prompts" / "greet.yaml"
    head = git(repo, "rev-parse", "HEAD")
    server = Served(db_path)
    try:
        added = invoke(db_path, ["prompt", "add", str(file)])
        assert unserved(added, server) == "" and added.exit_code == 0
        assert f"from git commit {head[:12]}" in added.stdout
        shown = invoke(db_path, ["prompt", "show", f"greet@git:{head[:7]}"])
        assert f"git: {head} prompts/greet.yaml\n" in shown.stdout
        forged = {"commit": "not a commit", "dirty": False, "path": "x.yaml"}
        body = {"text": VERSION_2, "source": "greet.yaml", "git": forged}
        status, answer = server.call("POST", "/v1/prompts", body)
        assert status == 422 and "commit" in str(answer)
    finally:
        server.stop()


def test_the_prompts_page_shows_each_version_s_commit(db_path: Path, repo: Path) -> None:
    from streamlit.testing.v1 import AppTest

    from tests.test_page_prompts import PAGE, PROMPT_TAB, TIMEOUT_S, by_label

    file = repo / "prompts" / "greet.yaml"
    invoke(db_path, ["prompt", "add", str(file)])
    file.write_text(VERSION_2, encoding="utf-8")
    invoke(db_path, ["prompt", "add", str(file)])
    head = git(repo, "rev-parse", "HEAD")
    at = AppTest.from_file(PAGE, default_timeout=TIMEOUT_S)
    at.session_state[PROMPT_TAB] = "History"
    at.run()
    by_label(at.selectbox, "Prompt").select("greet").run()
    assert not at.exception, at.exception
    versions = next(d.value for d in at.dataframe if "git" in d.value.columns)
    assert list(versions["version"]) == ["1.1.0", "1.0.0"]
    assert list(versions["git"]) == [f"{head[:7]}+", head[:7]]
