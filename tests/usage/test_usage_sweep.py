"""The pure figures (percentiles, runaway rule, grouping) and the SQL sweep held to the reference sweep."""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import seatplan.usage.loads as loads
from kits.spend_scenario import CHAT_MODEL, T0, Call, write_csv
from kits.usage import usage_report
from seatplan.documents.usage import RunawayGroup
from seatplan.usage.loads import RequestRows, peak_loads, percentiles, runaway_mask
from seatplan.usage.queries import Window
from seatplan.usage.rows import SLOT_BITS, distinct
from seatplan.usage.scan import microseconds
from seatplan.usage.sweep import (
    ClientRow,
    Interval,
    RunawayRow,
    default_runaway_rule,
    group_runaways,
    lowest_runaway_threshold_tokens,
    nearest_rank,
    parse_tags,
    peak_inflight,
    runaway_threshold_tokens,
    summarize_keys,
    token_percentiles,
)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def at_ms(milliseconds: int) -> datetime:
    return T0 + timedelta(milliseconds=milliseconds)


def test_nearest_rank_takes_the_value_at_rank_ceil_p_times_n() -> None:
    ten = {value: 1 for value in range(1, 11)}
    assert [nearest_rank(ten, p) for p in (0.5, 0.9, 0.99, 0.01)] == [5, 9, 10, 1]
    assert nearest_rank({10: 1, 20: 1}, 0.5) == 10  # no interpolation between the two
    assert nearest_rank({7: 3, 100: 1}, 0.75) == 7
    assert nearest_rank({}, 0.5) is None
    assert token_percentiles({1: 98, 50: 1, 900: 1}).model_dump() == {"p50": 1, "p90": 1, "p99": 50, "max": 900}


def test_runaway_threshold_rule() -> None:
    rule = default_runaway_rule()
    assert runaway_threshold_tokens(rule, 300, None) == 16384  # the floor
    assert runaway_threshold_tokens(rule, 2000, None) == 64000  # 32 x median
    assert runaway_threshold_tokens(rule, 2000, 40000) == 36000  # near the cap: 0.9 x max_model_len
    assert runaway_threshold_tokens(rule, None, None) == 16384
    assert runaway_threshold_tokens(default_runaway_rule(5000), 2000, 40000) == 5000


@given(medians=st.lists(st.one_of(st.none(), st.integers(0, 100_000)), min_size=1, max_size=4),
       lengths=st.lists(st.one_of(st.none(), st.integers(1, 300_000)), min_size=1, max_size=4),
       operator=st.one_of(st.none(), st.integers(1, 300_000)))
def test_no_seat_threshold_is_below_the_lowest(medians: list[int | None], lengths: list[int | None], operator: int | None) -> None:
    # Files are loaded with request ids only from this many completion tokens up: no runaway may lose its id.
    rule = default_runaway_rule(operator)
    lowest = lowest_runaway_threshold_tokens(rule, lengths)
    assert all(runaway_threshold_tokens(rule, median, length) >= lowest for median in medians for length in lengths)
    assert lowest == min(runaway_threshold_tokens(rule, 0, length) for length in lengths)


def test_reference_sweep_takes_ends_before_starts() -> None:
    back_to_back = [Interval(at(0), at(10), 100), Interval(at(10), at(20), 100)]
    assert peak_inflight(back_to_back) == (100, 1)
    together = [Interval(at(0), at(10), 100), Interval(at(0), at(5), 50), Interval(at(5), at(6), 7)]
    assert peak_inflight(together) == (150, 2)
    assert peak_inflight([Interval(at(3), at(3), 1000)]) == (0, 0)  # zero-length: never in flight


def test_reference_sweep_clips_to_the_window() -> None:
    intervals = [Interval(at(0), at(100), 10), Interval(at(50), at(60), 5), Interval(at(200), at(300), 99)]
    assert peak_inflight(intervals, since=at(55), until=at(200)) == (15, 2)
    assert peak_inflight(intervals, since=at(60), until=at(200)) == (10, 1)
    assert peak_inflight(intervals, since=at(150), until=at(200)) == (0, 0)


def test_runaways_group_by_sender_largest_first() -> None:
    rows = [
        RunawayRow("chat", "r1", 260000, "ci-evals", "ml", "bot", '["eval:nightly"]'),
        RunawayRow("chat", "r2", 261000, "ci-evals", "ml", "bot", '["eval:nightly", "User-Agent: x"]'),
        RunawayRow("chat", "r3", 250000, "ci-evals", "ml", "bot", None),
        RunawayRow("chat", "r4", 262000, "ci-evals", "ml", "bot", "not json"),
        RunawayRow("code", "r5", 262100, "harness", "ml", "bot", "[]"),
    ]
    per_seat, overall = group_runaways(rows)
    chat = per_seat["chat"][0]
    assert (chat.count, chat.max_completion_tokens, chat.total_completion_tokens) == (4, 262000, 1033000)
    assert chat.example_request_ids == ["r4", "r2", "r1"]
    assert chat.request_tags == ["User-Agent: x", "eval:nightly"]
    assert [(group.key_alias, group.count) for group in overall] == [("ci-evals", 4), ("harness", 1)]


def test_shared_keys_by_address_and_tags_not_by_user_agent_tags() -> None:
    rows = [
        ClientRow("laptop", "ml", "chat", "OpenAI/Python 1.0", "10.0.0.1", '["User-Agent: OpenAI"]', 5),
        ClientRow("laptop", "ml", "code", "OpenAI/Python 1.0", "10.0.0.1", '["User-Agent: OpenAI/Python 1.0"]', 2),
        ClientRow("ci", "ml", "chat", "httpx", "10.0.0.8", "[]", 3),
        ClientRow("ci", "ml", "chat", "httpx", "10.0.0.9", "[]", 4),
    ]
    runaway = RunawayGroup(key_alias="ci", team="ml", user=None, count=2, max_completion_tokens=9, total_completion_tokens=18,
                           request_tags=[], example_request_ids=[])
    keys = summarize_keys(rows, [runaway])
    assert [(key.key_alias, key.shared, key.calls, key.runaway_count) for key in keys] == [("ci", True, 7, 2), ("laptop", False, 7, 0)]
    assert keys[0].client_ips == ["10.0.0.8", "10.0.0.9"]
    assert keys[1].request_tag_sets == [[]]


def test_parse_tags_never_fails() -> None:
    assert parse_tags('["a", null, 3]') == ["a", "3"]
    assert parse_tags('{"a": 1}') == []
    assert parse_tags("[broken") == []
    assert parse_tags(None) == [] and parse_tags("") == []


calls_strategy = st.lists(
    st.tuples(st.integers(0, 100), st.integers(0, 15), st.integers(0, 50), st.integers(0, 300)),
    min_size=1, max_size=25,
)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(calls=calls_strategy, since_s=st.integers(0, 80), length_s=st.integers(1, 60), runaway_tokens=st.integers(1, 300))
def test_file_sweep_matches_the_reference(tmp_path_factory: pytest.TempPathFactory, calls, since_s, length_s, runaway_tokens) -> None:
    """End to end through a CSV: small integer times force many equal timestamps, windows cut through requests."""
    spend = [Call(f"q{index}", start, start + duration, prompt, completion)
             for index, (start, duration, prompt, completion) in enumerate(calls)]
    path = write_csv(spend, Path(tmp_path_factory.mktemp("sweep")) / "spend.csv")
    window = Window(since=at(since_s), until=at(since_s + length_s))
    report = usage_report(path, window, runaway_tokens=runaway_tokens)
    chat = report.models.get(CHAT_MODEL)
    intervals = [(Interval(at(call.start_s), at(call.end_s), call.prompt_tokens + call.completion_tokens), call) for call in spend]
    expected = peak_inflight((interval for interval, _ in intervals), window.since, window.until)
    expected_ordinary = peak_inflight((interval for interval, call in intervals if call.completion_tokens < runaway_tokens),
                                      window.since, window.until)
    found = (chat.peak_inflight_tokens, chat.peak_inflight_requests) if chat else (0, 0)
    found_ordinary = (chat.peak_inflight_tokens_without_runaways, chat.peak_inflight_requests_without_runaways) if chat else (0, 0)
    assert found == expected
    assert found_ordinary == expected_ordinary
    assert (report.overall.peak_inflight_tokens, report.overall.peak_inflight_requests) == expected


@settings(max_examples=300, deadline=None)
@given(requests=st.lists(st.tuples(st.integers(0, 2), st.integers(0, 60), st.integers(0, 30), st.integers(0, 50),
                                   st.integers(0, 50)), max_size=40),
       window=st.one_of(st.none(), st.tuples(st.integers(0, 60), st.integers(1, 40))),
       bucket_us=st.one_of(st.none(), st.integers(1, 40_000_000)), runaway_tokens=st.integers(1, 60))
def test_bucketed_sweep_matches_the_reference(requests, window, bucket_us, runaway_tokens) -> None:
    """Per seat and overall, with runaways left out, for any bucket length (one bucket per microsecond up to all
    in one). Times are whole milliseconds here, so a microsecond bucket stays cheap."""


    seat_names = ("a", "b", "c")
    rows = RequestRows(
        seat_names=seat_names,
        seat=np.array([seat for seat, *_ in requests], dtype=np.int32),
        start_us=np.array([microseconds(at_ms(start)) for _, start, _, _, _ in requests], dtype=np.int64),
        end_us=np.array([microseconds(at_ms(start + length)) for _, start, length, _, _ in requests], dtype=np.int64),
        prompt_tokens=np.array([prompt for *_, prompt, _ in requests], dtype=np.int64),
        completion_tokens=np.array([completion for *_, completion in requests], dtype=np.int64),
        starts_in_window=np.ones(len(requests), dtype=bool), included=np.ones(len(requests), dtype=bool),
    )
    since, until = (at_ms(window[0]), at_ms(window[0] + window[1])) if window else (None, None)
    runaway = runaway_mask(rows, {name: runaway_tokens for name in seat_names})
    per_seat, overall = peak_loads(rows, runaway, microseconds(since), microseconds(until), bucket_us)

    def reference(selected) -> tuple[int, int]:
        return peak_inflight((Interval(at_ms(start), at_ms(start + length), prompt + completion)
                              for seat, start, length, prompt, completion in requests if selected(seat, completion)), since, until)

    for index, name in enumerate(seat_names):
        found = per_seat[name]
        assert (found.tokens, found.requests) == reference(lambda seat, _, index=index: seat == index)
        assert (found.tokens_without_runaways, found.requests_without_runaways) == reference(
            lambda seat, completion, index=index: seat == index and completion < runaway_tokens)
    assert (overall.tokens, overall.requests) == reference(lambda seat, completion: True)
    assert (overall.tokens_without_runaways, overall.requests_without_runaways) == reference(
        lambda seat, completion: completion < runaway_tokens)


def test_percentiles_by_partition_match_nearest_rank() -> None:
    for values in ([5], [1, 2], list(range(1, 11)), [7, 7, 7, 100], [1] * 98 + [50, 900]):
        histogram: dict[int, int] = {}
        for value in values:
            histogram[value] = histogram.get(value, 0) + 1
        assert percentiles(np.array(values[::-1], dtype=np.int64)) == token_percentiles(histogram)
    assert percentiles(np.zeros(0, dtype=np.int64)).model_dump() == {"p50": None, "p90": None, "p99": None, "max": None}


@settings(max_examples=200, deadline=None)
@given(values=st.lists(st.tuples(st.integers(0, 3), st.integers(0, 300)), max_size=60), huge=st.booleans())
def test_seat_percentiles_by_histogram_and_by_partition_match_nearest_rank(values, huge) -> None:
    """The histogram (token counts that fit in HISTOGRAM_BINS) and the partition fallback give nearest rank."""
    seat_names = ("a", "b", "c", "d")
    tokens = np.array([value + (2**40 if huge and index == 0 else 0) for index, (_, value) in enumerate(values)], dtype=np.int64)
    seat = np.array([seat for seat, _ in values], dtype=np.int32)
    calls = np.ones(len(values), dtype=bool)
    rows = loads.RequestRows(seat_names, seat, tokens, tokens, tokens, tokens, calls, calls)
    [(per_seat, overall)] = loads.seat_percentiles(rows, tokens)

    def reference(selected: list[int]) -> object:
        histogram: dict[int, int] = {}
        for value in selected:
            histogram[value] = histogram.get(value, 0) + 1
        return token_percentiles(histogram)

    for index, name in enumerate(seat_names):
        assert per_seat[name] == reference([int(value) for value, on in zip(tokens, seat == index) if on])
    assert overall == reference([int(value) for value in tokens])


@settings(max_examples=200, deadline=None)
@given(picks=st.lists(st.integers(0, 7), max_size=200))
def test_distinct_hashes_match_a_sort_even_when_they_share_slots(picks) -> None:
    """Hashes that share their low bits, or all the bits of the first rounds, still get their own index."""
    shared = 12345
    keys = np.array([shared, shared + (1 << SLOT_BITS), shared + (1 << (2 * SLOT_BITS)), shared + (3 << (3 * SLOT_BITS)),
                     -shared, 0, -(2**63), 2**63 - 1], dtype=np.int64)
    values = keys[np.array(picks, dtype=np.int64)]
    found_keys, index = distinct(values)
    expected_keys = np.unique(values)
    assert found_keys.tolist() == expected_keys.tolist()
    assert index.tolist() == np.searchsorted(expected_keys, values).tolist()
