"""Context shards, the pure part (issue 27, item 3): where a session's history is cut
when it would not fit, each boundary kind in its order of preference, the window, the
same shards from every turn, and the spec's `shards:` field."""

from __future__ import annotations

import pytest

from promptlab.conversations.shards import (
    ShardSpec,
    ShardTooLarge,
    boundary_kinds,
    is_intent_switch,
    parse_shards,
    shard_history,
    sharded,
)


def tokens_of(message: dict[str, str]) -> int:
    """One token a word: the tests count in words."""
    return len(message["content"].split())


def chat(*turns: tuple[str, str, str]) -> list[dict[str, str]]:
    return [{"role": role, "content": text, "at": at} for role, text, at in turns]


def words(n: int, word: str = "billing") -> str:
    return " ".join([word] * n)


def test_a_history_that_fits_is_one_shard() -> None:
    history = chat(("user", words(5), ""), ("assistant", words(5), ""), ("user", words(5), ""))
    (only,) = shard_history(history, 100, tokens_of)
    assert (only.seq_no, only.start, only.end, only.tokens, only.cut) == (0, 0, 3, 15, "start")


def test_an_intent_switch_is_preferred_to_a_gap_and_a_type_change() -> None:
    history = chat(
        ("user", words(10), "2026-11-02T09:00:00"),
        ("assistant", words(10), "2026-11-02T09:01:00"),
        ("user", "By the way, " + words(6, "password"), "2026-11-02T09:02:00"),  # intent
        ("assistant", words(10, "password"), "2026-11-02T09:03:00"),
        ("user", words(8, "password"), "2026-11-02T09:20:00"),  # a gap of 17 minutes
        ("assistant", words(10, "password"), "2026-11-02T09:21:00"),
        ("user", words(8, "password"), "2026-11-02T09:22:00"),  # the turn
    )
    shards = shard_history(history, 60, tokens_of)
    assert [(s.seq_no, s.start, s.cut) for s in shards] == [(0, 0, "start"), (1, 2, "intent")]
    # The turn's shard starts where its topic began; the shard before ends before the
    # turn that opened the new one, sharing the messages between.
    assert shards[0].end == 6 and shards[1].end == 7


def test_a_gap_is_preferred_to_a_type_change() -> None:
    history = chat(
        ("user", words(10), "2026-11-02T09:00:00"),
        ("assistant", words(10), "2026-11-02T09:01:00"),
        ("user", words(10), "2026-11-02T09:02:00"),
        ("assistant", words(10), "2026-11-02T09:03:00"),
        ("user", words(10), "2026-11-02T09:30:00"),  # after a gap
        ("assistant", words(10), "2026-11-02T09:31:00"),
        ("user", words(10), "2026-11-02T09:32:00"),
    )
    shards = shard_history(history, 60, tokens_of)
    assert [(s.seq_no, s.start, s.cut) for s in shards] == [(0, 0, "start"), (1, 4, "gap")]


def test_a_type_change_leaves_half_the_room_free() -> None:
    history = chat(*[(("user", "assistant")[i % 2], words(10), "") for i in range(7)])
    shards = shard_history(history, 60, tokens_of)
    # Message 6 (the turn) does not fit with 0..5; the first exchange from which the
    # rest takes at most half the room (30 words) starts at message 4.
    assert [(s.seq_no, s.start, s.end, s.cut) for s in shards] == [
        (0, 0, 6, "start"),
        (1, 4, 7, "type"),
    ]


def test_without_a_boundary_the_shard_is_cut_at_the_window() -> None:
    history = chat(*[("user", words(10), "") for _ in range(7)])  # a customer alone
    shards = shard_history(history, 60, tokens_of)
    assert [(s.start, s.cut) for s in shards] == [(0, "start"), (4, "window")]
    assert all(s.tokens <= 60 for s in shards)


def test_every_turn_computes_the_same_shards_before_its_own() -> None:
    history = chat(*[(("user", "assistant")[i % 2], words(7 + i % 5), "") for i in range(41)])
    turns = [i for i, m in enumerate(history) if m["role"] == "user"]
    whole = shard_history(history, 50, tokens_of)
    for turn in turns:
        prefix = shard_history(history[: turn + 1], 50, tokens_of)
        assert [(s.seq_no, s.start) for s in prefix] == [
            (s.seq_no, s.start) for s in whole[: len(prefix)]
        ]
        assert prefix[-1].end == turn + 1  # the turn's own shard runs to the turn
        assert sum(tokens_of(m) for m in history[prefix[-1].start : turn + 1]) <= 50


def test_later_shards_keep_room_for_the_summary() -> None:
    history = chat(*[(("user", "assistant")[i % 2], words(10), "") for i in range(13)])
    shards = shard_history(history, 60, tokens_of, later_budget=40)
    for shard in shards[1:]:
        assert shard.tokens <= 40 or shard.end < len(history)
    last = shards[-1]
    assert sum(tokens_of(m) for m in history[last.start :]) <= 40


def test_a_turn_too_large_for_any_shard_names_the_shard() -> None:
    history = chat(("user", words(10), ""), ("assistant", words(10), ""), ("user", words(70), ""))
    with pytest.raises(ShardTooLarge) as raised:
        shard_history(history, 60, tokens_of)
    assert str(raised.value) == (
        "shard 2 cannot hold message 3 of the session (the turn), ~70 tokens alone, over "
        "the ~60 the window leaves"
    )


def test_the_intent_heuristic() -> None:
    assert is_intent_switch("Also, another question. I'm locked out.", ["My invoice is off."])
    assert is_intent_switch("By the way: the export is slow", ["invoice"])
    # Six content words, none shared with the shard so far: a new topic.
    assert is_intent_switch(
        "Exports of dashboards crash whenever filters change", ["My invoice total looks wrong"]
    )
    assert not is_intent_switch(
        "The invoice total still looks wrong after refunds", ["My invoice total looks wrong"]
    )
    assert not is_intent_switch("Thanks!", ["My invoice is off."])  # too short to tell


def test_boundary_kinds_read_the_log_s_order_values() -> None:
    history = chat(
        ("user", "hello", "2026-11-02T09:00:00+01:00"),
        ("assistant", "hi", "2026-11-02T09:06:00+01:00"),
        ("user", "again", "3"),  # a turn number: no gap can be told
    )
    assert boundary_kinds(history, 0, 1) == {"gap"}
    assert boundary_kinds(history, 0, 2) == {"type"}


def test_a_turn_s_conversation_is_its_shard_after_the_summary() -> None:
    history = chat(("user", "a", ""), ("assistant", "b", ""), ("user", "c", ""))
    assert sharded(history, 1, None, "earlier: a") == [
        {"role": "user", "content": "Summary of the conversation before this part:\nearlier: a"},
        {"role": "assistant", "content": "b", "at": ""},
        {"role": "user", "content": "c", "at": ""},
    ]
    assert sharded(history, 2, None) == [{"role": "user", "content": "c", "at": ""}]


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (None, ShardSpec()),
        ({"ttl": "30m"}, ShardSpec(None, 1800)),
        ({"ttl": "12h", "summary": "recap@production"}, ShardSpec("recap@production", 43200)),
        ({"ttl": 3600}, ShardSpec(None, 3600)),
    ],
)
def test_the_spec_s_shards_field(value: object, expected: ShardSpec) -> None:
    assert parse_shards(value) == expected
    assert ShardSpec().ttl_s == 7 * 24 * 3600


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ({"ttl": "5s"}, "shards.ttl: a duration of at least a minute"),
        ({"ttl": "soon"}, "shards.ttl: a duration"),
        ({"summary": "recap"}, "shards.summary: a prompt version like"),
        ({"sumary": "recap@production"}, "shards: allowed keys are summary, ttl"),
        ("yes", "shards: allowed keys"),
    ],
)
def test_the_spec_s_shards_field_refuses_in_one_line(value: object, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_shards(value)


def test_a_shard_s_context_starts_at_a_user_message() -> None:
    """A pause before the agent's reply is a gap, but a shard opening with the agent's
    message would open the request with it: the cut goes to a user message."""
    history = chat(
        ("user", words(10), "2026-11-02T09:00:00"),
        ("assistant", words(10), "2026-11-02T09:20:00"),  # the agent replied late
        ("user", words(10), "2026-11-02T09:21:00"),
        ("assistant", words(10), "2026-11-02T09:22:00"),
        ("user", words(10), "2026-11-02T09:23:00"),
        ("assistant", words(10), "2026-11-02T09:24:00"),
        ("user", words(10), "2026-11-02T09:25:00"),
    )
    shards = shard_history(history, 60, tokens_of)
    assert all(history[s.start]["role"] == "user" for s in shards)
    assert [(s.start, s.cut) for s in shards] == [(0, "start"), (4, "type")]
