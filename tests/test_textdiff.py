"""Word-level diffs as HTML: differences marked, model text escaped."""

from __future__ import annotations

import html
import re

from promptlab.views.textdiff import tokens, word_diff_html


def plain(marked: str) -> str:
    """The text a reader sees: tags dropped, entities resolved."""
    return html.unescape(re.sub(r"<[^>]+>", "", marked))


def test_changed_words_are_deleted_on_the_left_and_inserted_on_the_right() -> None:
    left, right = word_diff_html("the cat sat down", "the dog sat down")
    assert re.sub(r' style="[^"]*"', "", left) == "the <del>cat</del> sat down"
    assert re.sub(r' style="[^"]*"', "", right) == "the <ins>dog</ins> sat down"
    assert plain(left) == "the cat sat down" and plain(right) == "the dog sat down"


def test_equal_texts_have_no_marks() -> None:
    assert word_diff_html("same text.", "same text.") == ("same text.", "same text.")


def test_hostile_output_is_escaped_before_it_is_marked() -> None:
    evil = '<script>alert("x")</script> <img src=x onerror=alert(1)>'
    left, right = word_diff_html("hello", evil)
    assert "<script" not in right and "<img" not in right
    assert "&lt;script&gt;" in right and "&quot;" in right
    assert plain(right) == evil
    # Only the module's own tags are left in the markup.
    assert set(re.findall(r"<(/?\w+)", left + right)) <= {"del", "/del", "ins", "/ins"}


def test_tokens_join_back_to_the_text() -> None:
    text = "Hi,  there!\nNew line\ttab & <b>"
    assert "".join(tokens(text)) == text


def test_long_outputs_are_diffed_by_line_and_very_long_ones_not_at_all() -> None:
    # Repetitive text is difflib's worst case; word pairs above MAX_PAIRS go by line.
    from promptlab.views.textdiff import MAX_PAIRS

    words = [f"w{i % 8}" for i in range(1_200)]
    a = "\n".join(" ".join(words[i : i + 12]) for i in range(0, len(words), 12))
    b = a.replace("w3 w4", "w4 w3", 1)
    assert len(tokens(a)) * len(tokens(b)) > MAX_PAIRS
    left, right = word_diff_html(a, b)
    (deleted,) = re.findall(r"<del[^>]*>(.*?)</del>", left, re.S)
    assert "\n" in deleted or deleted.count(" ") >= 11  # a whole line, not two words
    assert plain(left) == a and plain(right) == b
    huge = "x y\n" * 1_000  # a thousand lines each: too many line pairs as well
    assert word_diff_html(huge + "<b>", huge) == (html.escape(huge + "<b>"), huge)
