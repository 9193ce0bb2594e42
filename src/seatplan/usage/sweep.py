"""Pure figures over spend-log rows: percentiles, runaway rules, the in-flight sweep, runaway and client tables.

The per-row work over millions of rows is numpy (``rows.py``, ``loads.py``); what reaches these functions
is small (runaway rows, one row per distinct client) and is turned into figures here.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime

from seatplan.documents.usage import KeyClients, RunawayGroup, RunawayRule, TokenPercentiles

USER_AGENT_TAG_PREFIX = "User-Agent:"
EXAMPLE_IDS_PER_GROUP = 3
EXAMPLE_VALUES_PER_KEY = 10


def nearest_rank(histogram: Mapping[int, int], fraction: float) -> int | None:
    """The nearest-rank percentile of a ``{value: count}`` histogram: the value at rank ceil(fraction*N)."""
    total = sum(histogram.values())
    if total == 0:
        return None
    rank = max(1, math.ceil(fraction * total))
    seen = 0
    for value in sorted(histogram):
        seen += histogram[value]
        if seen >= rank:
            return value
    raise AssertionError("unreachable: rank never exceeds the total count")


def token_percentiles(histogram: Mapping[int, int]) -> TokenPercentiles:
    return TokenPercentiles(
        p50=nearest_rank(histogram, 0.50),
        p90=nearest_rank(histogram, 0.90),
        p99=nearest_rank(histogram, 0.99),
        max=max(histogram) if histogram else None,
    )


def default_runaway_rule(operator_threshold_tokens: int | None = None) -> RunawayRule:
    # The median, not p90/p99: it stays put even when runaways are a large share of a quiet seat's calls.
    floor_tokens, tail_multiple, cap_fraction = 16384, 32.0, 0.9
    if operator_threshold_tokens is not None:
        description = f"completion_tokens >= {operator_threshold_tokens} (set by the operator)"
    else:
        description = (
            f"completion_tokens >= max({floor_tokens}, {tail_multiple:g} x the seat's median completion), "
            f"lowered to {cap_fraction:g} x max_model_len when the fleet gives the seat's max_model_len "
            "(a reply that long ran into the output cap)"
        )
    return RunawayRule(
        operator_threshold_tokens=operator_threshold_tokens,
        floor_tokens=floor_tokens,
        tail_multiple=tail_multiple,
        cap_fraction=cap_fraction,
        description=description,
    )


def lowest_runaway_threshold_tokens(rule: RunawayRule, max_model_lens: Iterable[int | None]) -> int:
    """No seat's :func:`runaway_threshold_tokens` can be lower, whatever its median turns out to be."""
    if rule.operator_threshold_tokens is not None:
        return rule.operator_threshold_tokens
    capped = [math.floor(rule.cap_fraction * length) for length in max_model_lens if length is not None]
    return min([rule.floor_tokens, *capped])


def runaway_threshold_tokens(rule: RunawayRule, completion_p50_tokens: int | None, max_model_len: int | None) -> int:
    """Where a seat's normal replies end: the operator's number, else far beyond the median, never above the cap."""
    if rule.operator_threshold_tokens is not None:
        return rule.operator_threshold_tokens
    tail_tokens = max(rule.floor_tokens, math.ceil(rule.tail_multiple * (completion_p50_tokens or 0)))
    if max_model_len is not None:
        return min(tail_tokens, math.floor(rule.cap_fraction * max_model_len))
    return tail_tokens


@dataclass(frozen=True)
class Interval:
    """One request as the sweep sees it: in flight on [start, end) and holding ``tokens`` KV tokens."""

    start: datetime
    end: datetime
    tokens: int


def peak_inflight(intervals: Iterable[Interval], since: datetime | None = None, until: datetime | None = None) -> tuple[int, int]:
    """(peak in-flight tokens, peak in-flight requests) over [since, until), ends before starts at equal times.

    This is the definition ``loads.peak_loads`` implements for millions of rows; it is kept here, small and
    obvious, so tests can hold that one to it.
    """
    events: list[tuple[datetime, int, int, int]] = []
    for interval in intervals:
        start = interval.start if since is None else max(interval.start, since)
        if until is not None and start >= until:
            continue
        if interval.end <= start:
            continue
        events.append((start, 1, interval.tokens, 1))
        if until is None or interval.end < until:
            events.append((interval.end, 0, -interval.tokens, -1))
    events.sort(key=lambda event: (event[0], event[1]))
    tokens = requests = peak_tokens = peak_requests = 0
    for _, _, delta_tokens, delta_requests in events:
        tokens += delta_tokens
        requests += delta_requests
        peak_tokens = max(peak_tokens, tokens)
        peak_requests = max(peak_requests, requests)
    return peak_tokens, peak_requests


def parse_tags(tags_json: str | None) -> list[str]:
    """LiteLLM's ``request_tags`` JSON list; anything else (NULL, '', broken JSON) reads as no tags."""
    if not tags_json:
        return []
    try:
        tags = json.loads(tags_json)
    except ValueError:
        return []
    if not isinstance(tags, list):
        return []
    return [str(tag) for tag in tags if tag is not None]


def client_tags(tags: Iterable[str]) -> list[str]:
    """Tags a client chose, without the User-Agent tags LiteLLM adds by itself."""
    return sorted({tag for tag in tags if not tag.startswith(USER_AGENT_TAG_PREFIX)})


@dataclass(frozen=True)
class RunawayRow:
    seat: str
    request_id: str | None  # None where the row has none (an empty CSV cell)
    completion_tokens: int
    key_alias: str
    team: str | None
    user: str | None
    tags_json: str | None


@dataclass
class _RunawayAccumulator:
    key_alias: str
    team: str | None
    user: str | None
    count: int = 0
    max_completion_tokens: int = 0
    total_completion_tokens: int = 0
    tags: set[str] = field(default_factory=set)
    largest: list[tuple[int, str | None]] = field(default_factory=list)

    def add(self, row: RunawayRow) -> None:
        self.count += 1
        self.max_completion_tokens = max(self.max_completion_tokens, row.completion_tokens)
        self.total_completion_tokens += row.completion_tokens
        self.tags.update(parse_tags(row.tags_json))
        self.largest.append((row.completion_tokens, row.request_id))
        self.largest.sort(key=lambda item: (-item[0], item[1] or ""))  # a missing id sorts first among equals
        del self.largest[EXAMPLE_IDS_PER_GROUP:]

    def result(self) -> RunawayGroup:
        return RunawayGroup(
            key_alias=self.key_alias,
            team=self.team,
            user=self.user,
            count=self.count,
            max_completion_tokens=self.max_completion_tokens,
            total_completion_tokens=self.total_completion_tokens,
            request_tags=sorted(self.tags),
            example_request_ids=[request_id for _, request_id in self.largest if request_id is not None],
        )


def group_runaways(rows: Iterable[RunawayRow]) -> tuple[dict[str, list[RunawayGroup]], list[RunawayGroup]]:
    """Runaway replies grouped by (key alias, team, user): per seat, and over all seats.

    Groups are ordered by count, then by the largest reply, so the worst sender comes first.
    """
    per_seat: dict[str, dict[tuple[str, str | None, str | None], _RunawayAccumulator]] = {}
    overall: dict[tuple[str, str | None, str | None], _RunawayAccumulator] = {}
    for row in rows:
        sender = (row.key_alias, row.team, row.user)
        for groups in (per_seat.setdefault(row.seat, {}), overall):
            groups.setdefault(sender, _RunawayAccumulator(*sender)).add(row)
    return (
        {seat: _ordered(groups.values()) for seat, groups in per_seat.items()},
        _ordered(overall.values()),
    )


def _ordered(accumulators: Iterable[_RunawayAccumulator]) -> list[RunawayGroup]:
    groups = [accumulator.result() for accumulator in accumulators]
    return sorted(groups, key=lambda group: (-group.count, -group.max_completion_tokens, group.key_alias))


@dataclass(frozen=True)
class ClientRow:
    """One distinct (key, seat, user agent, address, tags) combination and how many calls it made."""

    key_alias: str
    team: str | None
    seat: str
    user_agent: str | None
    client_ip: str | None
    tags_json: str | None
    calls: int


@dataclass
class _KeyAccumulator:
    key_alias: str
    teams: set[str] = field(default_factory=set)
    calls: int = 0
    seats: set[str] = field(default_factory=set)
    user_agents: set[str] = field(default_factory=set)
    client_ips: set[str] = field(default_factory=set)
    tag_sets: set[tuple[str, ...]] = field(default_factory=set)

    def add(self, row: ClientRow) -> None:
        self.calls += row.calls
        self.seats.add(row.seat)
        if row.team:
            self.teams.add(row.team)
        if row.user_agent:
            self.user_agents.add(row.user_agent)
        if row.client_ip:
            self.client_ips.add(row.client_ip)
        self.tag_sets.add(tuple(client_tags(parse_tags(row.tags_json))))

    def result(self, runaway_count: int) -> KeyClients:
        # A key that never sent client tags has one (empty) tag set; that alone does not make it shared.
        tag_sets = sorted(self.tag_sets)
        return KeyClients(
            key_alias=self.key_alias,
            team=", ".join(sorted(self.teams)) or None,
            calls=self.calls,
            seats=sorted(self.seats),
            user_agents=sorted(self.user_agents)[:EXAMPLE_VALUES_PER_KEY],
            client_ips=sorted(self.client_ips)[:EXAMPLE_VALUES_PER_KEY],
            request_tag_sets=[list(tags) for tags in tag_sets[:EXAMPLE_VALUES_PER_KEY]],
            distinct_user_agents=len(self.user_agents),
            distinct_client_ips=len(self.client_ips),
            distinct_request_tag_sets=len(tag_sets),
            shared=len(self.user_agents) > 1 or len(self.client_ips) > 1 or len(tag_sets) > 1,
            runaway_count=runaway_count,
        )


def summarize_keys(rows: Iterable[ClientRow], runaways_by_key: Iterable[RunawayGroup]) -> list[KeyClients]:
    """One entry per key alias, shared keys first, then by calls."""
    accumulators: dict[str, _KeyAccumulator] = {}
    for row in rows:
        accumulators.setdefault(row.key_alias, _KeyAccumulator(row.key_alias)).add(row)
    runaway_counts: dict[str, int] = {}
    for group in runaways_by_key:
        runaway_counts[group.key_alias] = runaway_counts.get(group.key_alias, 0) + group.count
    keys = [accumulator.result(runaway_counts.get(alias, 0)) for alias, accumulator in accumulators.items()]
    return sorted(keys, key=lambda key: (not key.shared, -key.runaway_count, -key.calls, key.key_alias))
