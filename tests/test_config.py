"""Settings from the environment: who changes are recorded for."""

from __future__ import annotations

from pathlib import Path


def test_changes_are_by_the_person_at_the_keyboard_never_anonymous(tmp_path: Path) -> None:
    """Without PROMPTLAB_AUTHOR: git's user.name, else USER, else the OS user."""
    import os
    import pwd
    import subprocess

    from promptlab.config import Settings

    bare = tmp_path / "bare"
    bare.mkdir()
    me = pwd.getpwuid(os.getuid()).pw_name
    assert Settings.from_env({"HOME": str(bare)}).author == me
    assert Settings.from_env({"HOME": str(bare), "USER": "dana"}).author == "dana"
    home = tmp_path / "home"
    home.mkdir()
    subprocess.run(
        ["git", "config", "--global", "user.name", "Ada Lovelace"],
        env={"HOME": str(home), "PATH": os.environ["PATH"]},
        check=True,
    )
    assert Settings.from_env({"HOME": str(home), "USER": "dana"}).author == "Ada Lovelace"
    named = {"HOME": str(home), "PROMPTLAB_AUTHOR": "erin"}
    assert Settings.from_env(named).author == "erin"
    assert "anonymous" not in {Settings().author, Settings.from_env({}).author}
