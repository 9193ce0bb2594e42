"""Run the figure queries against one source and assemble the :class:`UsageReport`."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from seatplan.usage.models import ModelUsage, RunawayGroup, RunawayRule, UsageReport, UsageWindow
from seatplan.usage.queries import (
    Window,
    clients_query,
    counts_query,
    histograms_query,
    peak_bounds_query,
    peak_sweep_query,
    rejected_query,
    runaway_rows_query,
)
from seatplan.usage.seats import SeatMap
from seatplan.usage.sources import SpendLogSource
from seatplan.usage.sweep import (
    ClientRow,
    RunawayRow,
    group_runaways,
    merge_histograms,
    nearest_rank,
    sweep_bucket_seconds,
    runaway_threshold_tokens,
    summarize_keys,
    token_percentiles,
)

REJECTED_EXAMPLES_PER_REASON = 3


@dataclass
class _Counts:
    model_names: set[str] = field(default_factory=set)
    calls: int = 0
    errors: int = 0
    calls_with_status: int = 0
    cache_hits: int = 0
    calls_with_cache_flag: int = 0
    rejected_rows: int = 0
    first_start: datetime | None = None
    last_end: datetime | None = None

    def add(self, other: _Counts) -> None:
        self.model_names |= other.model_names
        self.calls += other.calls
        self.errors += other.errors
        self.calls_with_status += other.calls_with_status
        self.cache_hits += other.cache_hits
        self.calls_with_cache_flag += other.calls_with_cache_flag
        self.rejected_rows += other.rejected_rows
        self.first_start = min(filter(None, (self.first_start, other.first_start)), default=None)
        self.last_end = max(filter(None, (self.last_end, other.last_end)), default=None)


@dataclass(frozen=True)
class _Peaks:
    tokens: int = 0
    requests: int = 0
    tokens_without_runaways: int = 0
    requests_without_runaways: int = 0


def collect_usage(source: SpendLogSource, window: Window, seat_map: SeatMap, rule: RunawayRule) -> UsageReport:
    counts = _read_counts(source.fetch_all(counts_query(window)))
    prompt_histograms, completion_histograms = _read_histograms(source.fetch_all(histograms_query(window)))
    names = sorted(set(counts) | {seat.served_name for seat in seat_map.seats})
    thresholds = {
        name: runaway_threshold_tokens(rule, nearest_rank(completion_histograms.get(name, {}), 0.5), _max_model_len(seat_map, name))
        for name in names
    }
    overall_counts = _Counts()
    for seat_counts in counts.values():
        overall_counts.add(seat_counts)
    bucket_seconds = sweep_bucket_seconds(overall_counts.first_start, overall_counts.last_end, window.since, window.until,
                                          len(counts), overall_counts.calls)
    peaks = _peak_loads(source, window, thresholds, bucket_seconds) if thresholds else {}
    runaway_rows = (_runaway_row(row) for row in source.stream(runaway_rows_query(window), thresholds)) if thresholds else ()
    runaways_per_seat, runaways_by_key = group_runaways(runaway_rows)
    client_rows = (_client_row(row) for row in source.stream(clients_query(window)))
    keys = summarize_keys(client_rows, runaways_by_key)
    by_reason, examples = _read_rejected(source.fetch_all(rejected_query(window, REJECTED_EXAMPLES_PER_REASON)))
    unreadable_lines = source.unreadable_lines()
    if unreadable_lines:
        by_reason["unreadable_row"] = by_reason.get("unreadable_row", 0) + unreadable_lines
        examples.setdefault("unreadable_row", [])

    models = {
        name: _model_usage(
            name, seat_map, counts.get(name, _Counts()), prompt_histograms.get(name, {}), completion_histograms.get(name, {}),
            peaks.get(name, _Peaks()), thresholds[name], runaways_per_seat.get(name, []),
        )
        for name in sorted(names)
    }
    overall = _model_usage(
        None, seat_map, overall_counts, merge_histograms(prompt_histograms.values()), merge_histograms(completion_histograms.values()),
        peaks.get(None, _Peaks()), None, runaways_by_key,
    )
    served_names = {seat.served_name for seat in seat_map.seats}
    return UsageReport(
        source=source.description,
        source_format=source.source_format,
        window=UsageWindow(since=window.since, until=window.until),
        runaway_rule=rule,
        models=models,
        overall=overall,
        runaways_by_key=runaways_by_key,
        keys=keys,
        shared_keys=[key.key_alias for key in keys if key.shared],
        unmapped_models=sorted(set(names) - served_names) if seat_map.seats else [],
        rejected_rows=sum(by_reason.values()),
        rejected_by_reason=dict(sorted(by_reason.items())),
        rejected_example_request_ids=examples,
    )


def _max_model_len(seat_map: SeatMap, served_name: str) -> int | None:
    seat = seat_map.seat_for(served_name)
    return seat.max_model_len if seat else None


def _read_counts(rows: Iterable[tuple[Any, ...]]) -> dict[str, _Counts]:
    counts: dict[str, _Counts] = {}
    for name, model_group, model, calls, errors, with_status, cache_hits, with_cache_flag, rejected, first_start, last_end in rows:
        counts.setdefault(name, _Counts()).add(_Counts(
            model_names={text for text in (model, model_group) if text},
            calls=int(calls), errors=int(errors), calls_with_status=int(with_status),
            cache_hits=int(cache_hits), calls_with_cache_flag=int(with_cache_flag), rejected_rows=int(rejected),
            first_start=first_start, last_end=last_end,
        ))
    return counts


def _read_histograms(rows: Iterable[tuple[Any, ...]]) -> tuple[dict[str, dict[int, int]], dict[str, dict[int, int]]]:
    prompt: dict[str, dict[int, int]] = {}
    completion: dict[str, dict[int, int]] = {}
    for name, is_prompt, tokens, calls in rows:
        (prompt if is_prompt else completion).setdefault(name, {})[int(tokens)] = int(calls)
    return prompt, completion


def _peak_loads(source: SpendLogSource, window: Window, thresholds: Mapping[str, int], bucket_seconds: float) -> dict[str | None, _Peaks]:
    """The exact peaks in two queries: bounds and open buckets, then a sweep of the open buckets only."""
    known: dict[str | None, list[int]] = {}
    entering: dict[tuple[str | None, int], list[int]] = {}
    for is_open, is_overall, seat, bucket, *loads in source.fetch_all(peak_bounds_query(window, bucket_seconds), thresholds):
        track = None if is_overall else seat
        if is_open:
            entering[(track, int(bucket))] = [int(load) for load in loads]
        else:
            known[track] = [int(load or 0) for load in loads]
    if entering:
        sweep = peak_sweep_query(window, bucket_seconds, [bucket for _, bucket in entering])
        for is_overall, seat, bucket, *highest in source.fetch_all(sweep, thresholds):
            entered = entering.get((None if is_overall else seat, int(bucket)))
            if entered is not None:
                track_peaks = known[None if is_overall else seat]
                known[None if is_overall else seat] = [max(peak, load + int(rise)) for peak, load, rise in zip(track_peaks, entered, highest)]
    return {track: _Peaks(*(max(0, load) for load in loads)) for track, loads in known.items()}


def _read_rejected(rows: Iterable[tuple[Any, ...]]) -> tuple[dict[str, int], dict[str, list[str | None]]]:
    by_reason: dict[str, int] = {}
    examples: dict[str, list[str | None]] = {}
    for reason, rejected_rows, request_id in rows:
        by_reason[reason] = int(rejected_rows)
        examples.setdefault(reason, []).append(request_id)
    return by_reason, examples


def _runaway_row(row: tuple[Any, ...]) -> RunawayRow:
    seat, request_id, completion_tokens, key_alias, team, user, tags_json = row
    return RunawayRow(seat, request_id, int(completion_tokens), key_alias, team, user, tags_json)


def _client_row(row: tuple[Any, ...]) -> ClientRow:
    key_alias, team, seat, user_agent, client_ip, tags_json, calls = row
    return ClientRow(key_alias, team, seat, user_agent, client_ip, tags_json, int(calls))


def _model_usage(
    name: str | None,
    seat_map: SeatMap,
    counts: _Counts,
    prompt_histogram: Mapping[int, int],
    completion_histogram: Mapping[int, int],
    peaks: _Peaks,
    threshold_tokens: int | None,
    runaways: list[RunawayGroup],
) -> ModelUsage:
    seat = seat_map.seat_for(name) if name is not None else None
    prompt = token_percentiles(prompt_histogram)
    completion = token_percentiles(completion_histogram)
    return ModelUsage(
        seat=seat.name if seat else None,
        max_model_len=seat.max_model_len if seat else None,
        model_names=sorted(counts.model_names),
        calls=counts.calls,
        errors=counts.errors if counts.calls_with_status else None,
        cache_hits=counts.cache_hits if counts.calls_with_cache_flag else None,
        prompt_tokens_p50=prompt.p50,
        prompt_tokens_p90=prompt.p90,
        prompt_tokens_p99=prompt.p99,
        prompt_tokens_max=prompt.max,
        completion_tokens_p50=completion.p50,
        completion_tokens_p90=completion.p90,
        completion_tokens_p99=completion.p99,
        completion_tokens_max=completion.max,
        peak_inflight_tokens=peaks.tokens,
        peak_inflight_tokens_without_runaways=peaks.tokens_without_runaways,
        peak_inflight_requests=peaks.requests,
        peak_inflight_requests_without_runaways=peaks.requests_without_runaways,
        runaway_threshold_tokens=threshold_tokens,
        runaway_count=sum(group.count for group in runaways),
        runaways=runaways,
        rejected_rows=counts.rejected_rows,
    )
