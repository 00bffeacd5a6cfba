"""What the app draws reads without an emoji font: icons are Streamlit's Material icons
(shipped with Streamlit, drawn from its own font) or words. An emoji showed as an empty
box on a machine without one (the Compare page's verdict marks, the favicon)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
#: Emoji and pictographs, dingbats and the symbols browsers draw from emoji fonts.
EMOJI = re.compile("[\U0001f000-\U0001faff\u2600-\u27bf\u2b00-\u2bff\ufe0f]")


def _drawn_sources() -> list[Path]:
    files = [ROOT / "app.py", *sorted((ROOT / "pages").glob("*.py"))]
    for package in ("ui", "views"):
        files += sorted((ROOT / "promptlab" / package).rglob("*.py"))
    return files


def test_no_page_draws_an_emoji() -> None:
    found = [
        f"{path.relative_to(ROOT)}:{number}: {line.strip()}"
        for path in _drawn_sources()
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if EMOJI.search(line)
    ]
    assert not found, "\n".join(found)
