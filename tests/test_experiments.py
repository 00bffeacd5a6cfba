"""Experiments, pure: the file format, buckets, allocation, ramp, kill switch, exposures."""

from __future__ import annotations

import json
from collections import Counter
from datetime import UTC, datetime
from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from promptlab.errors import ExperimentError
from promptlab.experiments import (
    BUCKETS,
    REASON_ASSIGNED,
    REASON_KILLED,
    REASON_OUTSIDE_RAMP,
    ExperimentConfig,
    allocate,
    assign,
    bucket_counts,
    bucket_of,
    check_exposure,
    config_from_mapping,
    describe_changes,
    export_yaml,
    exposure_line,
    load_experiment_config,
    owners,
    parse_experiment_file,
    read_exposures,
    unit_text,
)

NOW = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)


def file_data(**overrides: Any) -> dict[str, Any]:
    data: dict[str, Any] = {
        "name": "triage-tone",
        "variants": [
            {
                "name": "control",
                "prompt": "ticket-triage@production",
                "weight": 70,
                "control": True,
            },
            {"name": "concise", "prompt": "ticket-triage@staging", "weight": 30},
        ],
    }
    data.update(overrides)
    return data


def config_for(weights: dict[str, float], **fields: Any) -> ExperimentConfig:
    """A stored-looking revision with `weights` (the first variant is control)."""
    variants = [
        {"name": name, "prompt": f"p@{name}", "weight": w, "prompt_version_id": f"sha256:{name}"}
        for name, w in weights.items()
    ]
    variants[0]["control"] = True
    data = {
        "name": "exp",
        "variants": variants,
        "revision": 1,
        "allocation": {k: [list(r) for r in v] for k, v in allocate(weights).items()},
        "author": "tester",
        "created_at": NOW.isoformat(),
        **fields,
    }
    return config_from_mapping(data)


# ---- the file format ----------------------------------------------------------------------


def test_a_minimal_file_gets_its_defaults() -> None:
    parsed = parse_experiment_file(file_data())
    assert (parsed.salt, parsed.mode, parsed.ramp, parsed.killed) == (
        "triage-tone",
        "split",
        100,
        False,
    )
    assert parsed.weights == {"control": 70, "concise": 30}


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"name": "Bad Name"}, "name 'Bad Name' is not allowed"),
        ({"colour": "red"}, "unknown field(s) colour"),
        ({"mode": "sometimes"}, "mode: expected one of split, all"),
        ({"ramp": 101}, "ramp: expected a percentage from 0 to 100"),
        ({"ramp": 12.345}, "ramp: at most two decimals"),
        ({"killed": "yes"}, "killed: expected true or false"),
        ({"variants": [{"name": "a", "prompt": "p", "weight": 1, "control": True}]}, "two or more"),
        (
            {
                "variants": [
                    {"name": "a", "prompt": "p", "weight": 1},
                    {"name": "b", "prompt": "p", "weight": 1},
                ]
            },
            "exactly one variant needs control: true, found 0",
        ),
        (
            {
                "variants": [
                    {"name": "a", "prompt": "p", "weight": 1, "control": True},
                    {"name": "a", "prompt": "p", "weight": 1},
                ]
            },
            "variants[1].name: 'a' is used twice",
        ),
        (
            {
                "variants": [
                    {"name": "a", "prompt": "p", "weight": 0, "control": True},
                    {"name": "b", "prompt": "p", "weight": 0},
                ]
            },
            "at least one weight must be above 0",
        ),
    ],
)
def test_bad_files_are_refused_naming_the_field(overrides: dict[str, Any], message: str) -> None:
    with pytest.raises(ExperimentError) as caught:
        parse_experiment_file(file_data(**overrides), source="x.yaml")
    assert str(caught.value).startswith("x.yaml: ") and message in str(caught.value)


@pytest.mark.parametrize(
    ("variant", "message"),
    [
        ({"weight": -1}, "variants[1].weight: expected a number from 0 to 1,000,000"),
        ({"weight": True}, "variants[1].weight"),
        ({"model": "gpt"}, "variants[1].model: expected 'endpoint:model'"),
        (
            {"params": {"temperature": 3}},
            "variants[1].params.temperature: expected a number from 0.0 to 2.0",
        ),
        ({"params": {"seed": 1}}, "variants[1].params: unknown seed"),
        (
            {"params": {"max_tokens": 0}},
            "variants[1].params.max_tokens: expected a positive integer",
        ),
        ({"sampling": [1, 2]}, "variants[1].sampling: expected a mapping"),
        ({"prompt": None}, "variants[1]: field 'prompt' is required"),
        ({"prompt_version_id": "abc"}, "variants[1].prompt_version_id: expected 'sha256:...'"),
        ({"extra": 1}, "variants[1]: unknown field(s) extra"),
    ],
)
def test_bad_variants_are_refused_naming_the_variant(variant: dict[str, Any], message: str) -> None:
    data = file_data()
    data["variants"][1].update(variant)
    with pytest.raises(ExperimentError, match=r"^x\.yaml: ") as caught:
        parse_experiment_file(data, source="x.yaml")
    assert message in str(caught.value)


def test_sampling_params_and_model_are_kept() -> None:
    data = file_data()
    cosine = {"strategy": "cosine", "base": 0.9, "amplitude": 0.1}
    data["variants"][1].update(
        model="sim:fast", params={"temperature": 0.2, "max_tokens": 300}, sampling=cosine
    )
    concise = parse_experiment_file(data).variants[1]
    assert concise.model == "sim:fast" and concise.params == {"temperature": 0.2, "max_tokens": 300}
    assert concise.sampling == cosine


def test_sampling_is_checked_like_a_run_spec_s() -> None:
    data = file_data()
    data["variants"][1]["sampling"] = {"strategy": "cosine", "anything": [1, 2]}
    with pytest.raises(
        ExperimentError, match=r"variants\[1\]\.sampling: unknown field\(s\) anything"
    ):
        parse_experiment_file(data)


def test_the_exported_form_round_trips_and_carries_what_assign_needs(tmp_path: Path) -> None:
    config = config_for({"control": 70, "concise": 30}, ramp=50, unit_column="customer_id")
    assert config_from_mapping(config.to_dict()) == config
    path = tmp_path / "exp.yaml"
    path.write_text(export_yaml(config), encoding="utf-8")
    loaded = load_experiment_config(path)
    assert loaded == config
    assert "- [0, 7000]" in path.read_text(encoding="utf-8")  # ranges stay one per line
    # JSON works too, and assign takes the mapping as is.
    mapping = json.loads(json.dumps(config.to_dict()))
    assert assign(mapping, "u1") == assign(config, "u1")


def test_an_experiment_file_is_not_an_exported_config() -> None:
    with pytest.raises(ExperimentError, match="not an exported config"):
        config_from_mapping(file_data(), source="x.yaml")


@pytest.mark.parametrize(
    ("allocation", "message"),
    [
        ({"control": [[0, 7000]], "concise": [[7000, 9999]]}, "covers 9999 buckets"),
        ({"control": [[0, 7001]], "concise": [[7000, 10000]]}, "overlap at 7000"),
        ({"control": [[0, 10000]]}, "expected bucket ranges for each of control, concise"),
        ({"control": [[0, 7000]], "concise": [[7000, 10001]]}, "is not a range"),
    ],
)
def test_a_broken_allocation_is_refused(allocation: dict[str, Any], message: str) -> None:
    data = config_for({"control": 70, "concise": 30}).to_dict()
    data["allocation"] = allocation
    with pytest.raises(ExperimentError, match="allocation") as caught:
        config_from_mapping(data)
    assert message in str(caught.value)


# ---- buckets ----------------------------------------------------------------------------


def test_bucket_is_sha256_of_salt_and_unit() -> None:
    import hashlib

    digest = hashlib.sha256(b"triage-tone\x1fcustomer-7").digest()
    assert bucket_of("triage-tone", "customer-7") == int.from_bytes(digest[:8], "big") % BUCKETS
    assert bucket_of("triage-tone", 42) == bucket_of("triage-tone", "42")
    assert bucket_of("other-salt", "customer-7") != bucket_of("triage-tone", "customer-7")


@pytest.mark.parametrize("unit", [None, True, 4.0, "", [1]])
def test_unit_ids_are_text_or_integers(unit: object) -> None:
    with pytest.raises(ExperimentError, match="unit id"):
        unit_text(unit)


@given(unit=st.one_of(st.text(min_size=1, max_size=40), st.integers()))
def test_same_unit_same_variant_across_calls(unit: str | int) -> None:
    config = SPLIT_70_30
    first = assign(config, unit)
    assert assign(config, unit) == first
    assert assign(config.to_dict(), str(unit)) == first
    assert 0 <= first.bucket < BUCKETS


SPLIT_70_30 = config_for({"control": 70, "concise": 30})


@pytest.mark.parametrize(
    "weights", [{"control": 70, "concise": 30}, {"control": 50, "b": 30, "c": 20}], ids=str
)
def test_100k_units_land_within_one_point_of_the_weights(weights: dict[str, float]) -> None:
    config = config_for(weights)
    counts = Counter(assign(config, f"user-{i}").variant for i in range(100_000))
    total = sum(weights.values())
    for name, weight in weights.items():
        assert abs(counts[name] / 100_000 - weight / total) < 0.01, (name, counts)


# ---- allocation -------------------------------------------------------------------------


def test_largest_remainder_counts() -> None:
    assert bucket_counts({"a": 1, "b": 1, "c": 1}) == {"a": 3334, "b": 3333, "c": 3333}
    assert bucket_counts({"a": 70, "b": 30}) == {"a": 7000, "b": 3000}
    assert bucket_counts({"a": 0, "b": 1}) == {"a": 0, "b": 10000}
    assert allocate({"a": 70, "b": 30}) == {"a": ((0, 7000),), "b": ((7000, 10000),)}


weights_strategy = st.dictionaries(
    st.sampled_from(["a", "b", "c", "d", "e"]),
    st.integers(min_value=0, max_value=100),
    min_size=2,
    max_size=5,
).filter(lambda w: sum(w.values()) > 0)


@settings(max_examples=150, deadline=None)
@given(before=weights_strategy, after=weights_strategy)
def test_a_weight_change_moves_the_fewest_buckets(
    before: dict[str, int], after: dict[str, int]
) -> None:
    old = allocate(before)
    new = allocate(after, old)
    old_owner, new_owner = owners(old), owners(new)
    assert "" not in new_owner  # every bucket has a variant
    old_counts = bucket_counts(before)
    new_counts = bucket_counts(after, old_counts)
    assert {n: sum(e - s for s, e in r) for n, r in new.items()} == new_counts
    moved = sum(a != b for a, b in zip(old_owner, new_owner, strict=True))
    growth = sum(max(0, new_counts[name] - old_counts.get(name, 0)) for name in new_counts)
    assert moved == growth

    def share(weights: dict[str, int], name: str) -> Fraction:
        return Fraction(weights.get(name, -1), sum(weights.values()))

    same_share = {n for n in before if share(before, n) == share(after, n)}
    for a, b in zip(old_owner, new_owner, strict=True):
        if a != b:  # only from a variant that shrank (or left) to one that grew
            assert new_counts.get(a, 0) < old_counts[a] and new_counts[b] > old_counts.get(b, 0)
            # ... and never between two variants whose shares did not change
            assert not {a, b} <= same_share
    for ranges in new.values():  # merged: no two ranges touch
        assert all(e1 < s2 for (_, e1), (s2, _) in zip(ranges, ranges[1:], strict=False))


def test_units_of_unchanged_weights_do_not_move_between_each_other() -> None:
    before = {"control": 40, "a": 30, "b": 20, "c": 10}
    after = {"control": 40, "a": 30, "b": 5, "c": 25}  # control and a keep their weights
    old = config_for(before)
    new_alloc = allocate(after, old.allocation)
    data = old.to_dict()
    data["allocation"] = {k: [list(r) for r in v] for k, v in new_alloc.items()}
    for v in data["variants"]:
        v["weight"] = after[v["name"]]
    new = config_from_mapping(data)
    moved = Counter()
    for i in range(50_000):
        was, now = assign(old, i).variant, assign(new, i).variant
        if was != now:
            moved[(was, now)] += 1
    assert set(moved) == {("b", "c")}


@settings(max_examples=50, deadline=None)
@given(low=st.integers(0, 100), high=st.integers(0, 100))
def test_raising_the_ramp_never_moves_a_unit_already_in(low: int, high: int) -> None:
    low, high = min(low, high), max(low, high)
    before = config_for({"control": 50, "b": 50}, ramp=low)
    after = config_for({"control": 50, "b": 50}, ramp=high)
    for i in range(2_000):
        was, now = assign(before, i), assign(after, i)
        if was.in_experiment:
            assert now == was
        else:
            assert was.reason == REASON_OUTSIDE_RAMP and was.variant == "control"


def test_ramp_admits_its_share_of_units() -> None:
    config = config_for({"control": 50, "b": 50}, ramp=20)
    inside = sum(assign(config, i).in_experiment for i in range(20_000))
    assert abs(inside / 20_000 - 0.20) < 0.01


def test_kill_switch_sends_everyone_to_control() -> None:
    config = config_for({"control": 10, "b": 90}, killed=True)
    decided = [assign(config, i) for i in range(2_000)]
    assert {(d.variant, d.in_experiment, d.reason) for d in decided} == {
        ("control", False, REASON_KILLED)
    }
    assert decided[0].prompt_version_id == "sha256:control"
    assert assign(config_for({"control": 10, "b": 90}), 1).reason == REASON_ASSIGNED


def test_describe_changes() -> None:
    old = config_for({"control": 70, "b": 30})
    new = config_for({"control": 60, "b": 40}, ramp=50, killed=True)
    assert describe_changes(old, new) == [
        "killed",
        "ramp 100% -> 50%",
        "control weight 70 -> 60",
        "b weight 30 -> 40",
    ]
    assert describe_changes(None, old) == ["created"]


# ---- exposures --------------------------------------------------------------------------


def in_experiment_unit(config: ExperimentConfig) -> str:
    return next(str(i) for i in range(100) if assign(config, i).in_experiment)


def test_exposure_lines_read_back(tmp_path: Path) -> None:
    config = SPLIT_70_30
    unit = in_experiment_unit(config)
    line = exposure_line(assign(config, unit), config, NOW)
    path = tmp_path / "exposures.jsonl"
    path.write_text(line + "\n\n" + line + "\n", encoding="utf-8")
    read = list(read_exposures(path))
    assert [e.line for e in read] == [1, 3]
    assert read[0].time == NOW and read[0].unit == unit and read[0].revision == 1
    check_exposure(read[0], config)


def test_units_outside_the_experiment_are_not_exposures() -> None:
    config = config_for({"control": 50, "b": 50}, killed=True)
    with pytest.raises(ExperimentError, match="not in experiment 'exp' \\(killed\\)"):
        exposure_line(assign(config, 1), config, NOW)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"revision": 0}, "line 2: revision: expected a positive integer"),
        ({"bucket": 10_000}, "line 2: bucket: expected 0 to 9999"),
        ({"time": "yesterday"}, "line 2: time: expected an ISO-8601 time"),
        ({"time": "2026-01-01T00:00:00"}, "line 2: time: '2026-01-01T00:00:00' has no timezone"),
        ({"unit": 1.5}, "line 2: unit: unit id 1.5 is a float"),
        ({"variant": None}, "line 2: variant: expected text"),
    ],
)
def test_bad_exposure_lines_are_named(tmp_path: Path, change: dict[str, Any], message: str) -> None:
    good = json.loads(exposure_line(assign(SPLIT_70_30, "u"), SPLIT_70_30, NOW))
    path = tmp_path / "e.jsonl"
    path.write_text(
        json.dumps(good) + "\n" + json.dumps({**good, **change}) + "\n", encoding="utf-8"
    )
    with pytest.raises(ExperimentError) as caught:
        list(read_exposures(path))
    assert str(caught.value).startswith(f"exposures {path}, ") and message in str(caught.value)


def test_not_json_is_named_by_line(tmp_path: Path) -> None:
    path = tmp_path / "e.jsonl"
    path.write_text("{nope\n", encoding="utf-8")
    with pytest.raises(ExperimentError, match=r"exposures .*, line 1: not valid JSON"):
        list(read_exposures(path))


def test_an_exposure_the_revision_could_not_produce_is_refused() -> None:
    config = SPLIT_70_30
    unit = in_experiment_unit(config)
    good = assign(config, unit)
    exposure = next(iter([_exposure_from(good, config)]))
    check_exposure(exposure, config)
    other = "control" if good.variant != "control" else "concise"
    from dataclasses import replace

    with pytest.raises(ExperimentError, match=f"gets {good.variant!r}"):
        check_exposure(
            replace(exposure, variant=other, prompt_version_id=f"sha256:{other}"), config
        )
    with pytest.raises(ExperimentError, match="has no variant 'nope'"):
        check_exposure(replace(exposure, variant="nope"), config)
    with pytest.raises(ExperimentError, match="under the salt"):
        check_exposure(replace(exposure, bucket=(exposure.bucket + 1) % BUCKETS), config)
    with pytest.raises(ExperimentError, match="prompt_version_id"):
        check_exposure(replace(exposure, prompt_version_id="sha256:zzz"), config)


def _exposure_from(assignment: Any, config: ExperimentConfig) -> Any:
    from promptlab.experiments import Exposure

    return Exposure(
        config.name,
        config.revision,
        assignment.unit,
        assignment.variant,
        assignment.bucket,
        assignment.prompt_version_id,
        NOW,
        1,
    )
