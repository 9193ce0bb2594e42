"""The usage summary: the :class:`UsageReport` document from one read of a source: verdicts, counts and clients (``rows.py``),
percentiles, runaway thresholds and in-flight peaks from the request arrays (``loads.py``)."""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path

from seatplan.documents.usage import KvReplay, ModelUsage, RunawayGroup, RunawayRule, TokenPercentiles, UsageReport, UsageWindow
from seatplan.errors import SeatplanError
from seatplan.usage.api import API_TIMEOUT_S, GATEWAY_KEY_ENV
from seatplan.usage.loads import Peaks, RequestRows, peak_loads, runaway_mask, seat_percentiles
from seatplan.usage.queries import Window
from seatplan.usage.replay import BlockRule, default_block_rule, replay_seats
from seatplan.usage.rows import SpendLogSource, judge, runaway_rows, summarize
from seatplan.usage.scan import SeatCounts, microseconds
from seatplan.usage.seat_map import SeatMap
from seatplan.usage.sources import SOURCE_FIX, open_source
from seatplan.usage.sweep import group_runaways, lowest_runaway_threshold_tokens, runaway_threshold_tokens, summarize_keys
from seatplan.usage.timeline import inflight_timeline, token_histograms


def summarize_usage(source: str, window: Window, seat_map: SeatMap, rule: RunawayRule, fast_csv: bool = True,
                 key_env: str = GATEWAY_KEY_ENV, key_file: Path | None = None, timeout_s: float = API_TIMEOUT_S) -> UsageReport:
    """Open ``source`` (a gateway URL, a PostgreSQL DSN or an export file), read it once, and build the report;
    ``fast_csv`` False reads a CSV with DuckDB even where the compiled reader could (``csvscan.py``); ``key_env``
    / ``key_file``: where a gateway's key is; ``timeout_s``: each request to it, connect to last byte."""
    request_id_from_tokens = lowest_runaway_threshold_tokens(rule, (seat.max_model_len for seat in seat_map.seats))
    with open_source(source, request_id_from_tokens, fast_csv, key_env, key_file, timeout_s) as opened:
        return collect_usage(opened, window, seat_map, rule)


def collect_usage(source: SpendLogSource, window: Window, seat_map: SeatMap, rule: RunawayRule) -> UsageReport:
    spend_rows = source.read(window)
    verdicts = judge(spend_rows, seat_map.served_name_by_litellm_name(), window)
    scan = summarize(spend_rows, verdicts, source.request_ids, source.unreadable_lines())
    counts = scan.counts
    rows = scan.rows
    names = sorted(set(counts) | {seat.served_name for seat in seat_map.seats})
    (prompt_by_seat, prompt_overall), (completion_by_seat, completion_overall) = seat_percentiles(
        rows, rows.prompt_tokens, rows.completion_tokens)
    thresholds = {
        name: runaway_threshold_tokens(rule, completion_by_seat[name].p50 if name in completion_by_seat else None,
                                       _max_model_len(seat_map, name))
        for name in names
    }
    runaway = runaway_mask(rows, thresholds)
    peaks_by_seat, peaks_overall = peak_loads(rows, runaway, microseconds(window.since), microseconds(window.until))
    replays = _replays(rows, seat_map, microseconds(window.since), microseconds(window.until))
    runaways_per_seat, runaways_by_key = group_runaways(runaway_rows(spend_rows, verdicts, runaway, source.request_ids))
    keys = summarize_keys(scan.clients, runaways_by_key)
    overall_counts = SeatCounts()
    for seat_counts in counts.values():
        overall_counts.add(seat_counts)
    no_figures = TokenPercentiles(p50=None, p90=None, p99=None, max=None)
    models = {
        name: _model_usage(
            name, seat_map, counts.get(name, SeatCounts()), prompt_by_seat.get(name, no_figures),
            completion_by_seat.get(name, no_figures), peaks_by_seat.get(name, Peaks()), thresholds[name],
            runaways_per_seat.get(name, []),
        ).model_copy(update={"kv_replay": replays.get(name)})
        for name in names
    }
    overall = _model_usage(None, seat_map, overall_counts, prompt_overall, completion_overall, peaks_overall, None,
                           runaways_by_key)
    histograms = token_histograms(rows)
    for name, histogram in histograms.items():
        if name in models:
            models[name].length_histogram = histogram
    served_names = {seat.served_name for seat in seat_map.seats}
    return UsageReport(
        source=source.description,
        source_format=source.source_format,
        reader=source.reader_note(),
        window=UsageWindow(since=window.since, until=window.until, first_request_at=instant(rows.start_us[rows.starts_in_window], min),
                           last_request_at=instant(rows.start_us[rows.starts_in_window], max)),
        runaway_rule=rule,
        models=models,
        overall=overall,
        runaways_by_key=runaways_by_key,
        keys=keys,
        shared_keys=[key.key_alias for key in keys if key.shared],
        unmapped_models=sorted(set(names) - served_names) if seat_map.seats else [],
        rejected_rows=sum(scan.rejected_by_reason.values()),
        rejected_by_reason=dict(sorted(scan.rejected_by_reason.items())),
        rejected_example_request_ids=scan.rejected_examples,
        inflight_timeline=inflight_timeline(rows, microseconds(window.since), microseconds(window.until)),
    )


def _replays(rows: RequestRows, seat_map: SeatMap, since_us: int | None, until_us: int | None) -> dict[str, KvReplay]:
    """Each vLLM seat's KV replay (``replay.py``), with the block rule its fleet seat gives, else the default.
    Seats without traffic get an empty replay: the window needed no block."""
    no_fleet = default_block_rule("no --fleet: the seat's model is not known")

    def rule_of(name: str) -> BlockRule | None:
        seat = seat_map.seat_for(name)
        return no_fleet if seat is None else seat.block_rule

    seats = list(rows.seat_names) + sorted({seat.served_name for seat in seat_map.seats} - set(rows.seat_names))
    rules = [rule_of(name) for name in seats]
    replayed = replay_seats(rows, rules, since_us, until_us)
    return {name: replay.document(rule) for name, rule, replay in zip(seats, rules, replayed)
            if rule is not None and replay is not None}


def _max_model_len(seat_map: SeatMap, served_name: str) -> int | None:
    seat = seat_map.seat_for(served_name)
    return seat.max_model_len if seat else None


def _model_usage(
    name: str | None,
    seat_map: SeatMap,
    counts: SeatCounts,
    prompt: TokenPercentiles,
    completion: TokenPercentiles,
    peaks: Peaks,
    threshold_tokens: int | None,
    runaways: list[RunawayGroup],
) -> ModelUsage:
    seat = seat_map.seat_for(name) if name is not None else None
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


def require_calls(report: UsageReport) -> None:
    """Refuse a report in which every row the window holds was rejected: that is an unreadable file, not a quiet week."""
    if report.overall.calls == 0 and report.rejected_rows > 0:
        reasons = ", ".join(f"{count} {reason.replace('_', ' ')}" for reason, count in report.rejected_by_reason.items() if count)
        raise SeatplanError(f"no call could be read: all {report.rejected_rows} rows were rejected ({reasons})",
                            where=report.source, fix=SOURCE_FIX)


def instant(start_us, pick) -> datetime | None:
    """The first or last start among the calls the window counts (``pick`` is min or max), as naive UTC like the
    window's bounds."""
    if len(start_us) == 0:
        return None
    return datetime(1970, 1, 1) + timedelta(microseconds=int(pick(start_us)))
