"""Token percentiles and the exact in-flight peaks, over every accepted request as numpy arrays.

Both sources hand over the same :class:`RequestRows`: one entry per accepted request that starts in the
window or is still running in it, times in microseconds since 1970. Sorting 2N events once per track is
what a 10-million-row week costs here (about a second on one core); the definition the sweep implements is
:func:`seatplan.usage.sweep.peak_inflight`, kept small and obvious so tests can hold this one to it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from seatplan.usage.models import TokenPercentiles

PERCENTILE_FRACTIONS = (0.50, 0.90, 0.99)


@dataclass(frozen=True)
class RequestRows:
    """Accepted requests: ``seat`` indexes ``seat_names``; ``starts_in_window`` marks the calls the window counts."""

    seat_names: tuple[str, ...]
    seat: np.ndarray  # int32
    start_us: np.ndarray  # int64, microseconds since 1970-01-01 (UTC)
    end_us: np.ndarray  # int64
    prompt_tokens: np.ndarray  # int64
    completion_tokens: np.ndarray  # int64
    starts_in_window: np.ndarray  # bool

    @staticmethod
    def empty(seat_names: Sequence[str] = ()) -> RequestRows:
        integers = np.zeros(0, dtype=np.int64)
        return RequestRows(tuple(seat_names), np.zeros(0, dtype=np.int32), integers, integers, integers, integers,
                           np.zeros(0, dtype=bool))


@dataclass(frozen=True)
class Peaks:
    tokens: int = 0
    requests: int = 0
    tokens_without_runaways: int = 0
    requests_without_runaways: int = 0


def percentiles(values: np.ndarray) -> TokenPercentiles:
    """Nearest rank, as :func:`seatplan.usage.sweep.nearest_rank`: the value at rank ceil(p*N); no sort, a partition."""
    count = len(values)
    if count == 0:
        return TokenPercentiles(p50=None, p90=None, p99=None, max=None)
    ranks = sorted({max(1, math.ceil(fraction * count)) - 1 for fraction in PERCENTILE_FRACTIONS} | {count - 1})
    chosen = np.partition(values, ranks)
    at_rank = {rank: int(chosen[rank]) for rank in ranks}
    p50, p90, p99 = (at_rank[max(1, math.ceil(fraction * count)) - 1] for fraction in PERCENTILE_FRACTIONS)
    return TokenPercentiles(p50=p50, p90=p90, p99=p99, max=at_rank[count - 1])


def seat_percentiles(rows: RequestRows, column: np.ndarray) -> tuple[dict[str, TokenPercentiles], TokenPercentiles]:
    """(per seat, over all seats) percentiles of ``column`` over the calls that start in the window."""
    calls = rows.starts_in_window
    per_seat = {name: percentiles(column[calls & (rows.seat == index)]) for index, name in enumerate(rows.seat_names)}
    return per_seat, percentiles(column[calls])


def runaway_mask(rows: RequestRows, threshold_tokens_by_seat: Mapping[str, int]) -> np.ndarray:
    """Requests whose completion reaches their seat's runaway threshold."""
    never = np.iinfo(np.int64).max
    thresholds = np.array([threshold_tokens_by_seat.get(name, never) for name in rows.seat_names], dtype=np.int64)
    return rows.completion_tokens >= thresholds[rows.seat]


def peak_loads(rows: RequestRows, runaway: np.ndarray, since_us: int | None, until_us: int | None) -> tuple[dict[str, Peaks], Peaks]:
    """The exact peaks per seat and over all seats: tokens, requests, and both without runaway replies.

    One sort orders every event by time, ends (0) before starts (1) at equal times; ties beyond that only
    reorder events of one sign, which cannot change the highest prefix sum. A stable sort by seat of that
    order gives each seat's events, still in time order, as one contiguous run, so each load takes one
    gather and one running sum per ordering.
    """
    start = rows.start_us if since_us is None else np.maximum(rows.start_us, since_us)
    # In flight on [start, end): a request clipped to nothing, or starting at the window's end, never is.
    live = rows.end_us > start
    if until_us is not None:
        live &= start < until_us
    live_rows = np.flatnonzero(live).astype(np.int32)
    start, end = start[live_rows], rows.end_us[live_rows]
    # Ends at or after the window's end come after every start in it and only lower the load: left out.
    ending = np.flatnonzero(end < until_us).astype(np.int32) if until_us is not None else np.arange(len(end), dtype=np.int32)
    keys = np.concatenate((end[ending] * 2, start * 2 + 1))
    del start, end
    order = np.argsort(keys)
    del keys
    event_rows = np.concatenate((live_rows[ending], live_rows))[order]
    event_signs = np.concatenate((np.full(len(ending), -1, dtype=np.int8), np.ones(len(live_rows), dtype=np.int8)))[order]
    del order, ending
    seat_of_event = rows.seat[event_rows].astype(np.int16)  # 16 bits: numpy's stable sort is then a radix sort
    by_seat = np.argsort(seat_of_event, kind="stable").astype(np.int32)
    seat_runs = np.searchsorted(seat_of_event[by_seat], np.arange(len(rows.seat_names) + 1))
    del seat_of_event
    tokens = rows.prompt_tokens + rows.completion_tokens
    ordinary = ~runaway
    weights = {
        "tokens": lambda: tokens[event_rows] * event_signs,
        "requests": lambda: event_signs.astype(np.int64),
        "tokens_without_runaways": lambda: (tokens * ordinary)[event_rows] * event_signs,
        "requests_without_runaways": lambda: ordinary[event_rows] * event_signs.astype(np.int64),
    }
    any_runaway = bool(runaway[live_rows].any())
    overall: dict[str, int] = {}
    per_seat: dict[str, dict[str, int]] = {name: {} for name in rows.seat_names}
    for load_name, deltas_of in weights.items():
        if load_name.endswith("_without_runaways") and not any_runaway:
            plain = load_name.removesuffix("_without_runaways")
            overall[load_name] = overall[plain]
            for figures in per_seat.values():
                figures[load_name] = figures[plain]
            continue
        deltas = deltas_of()
        overall[load_name] = _highest_prefix(deltas)
        for name, peak in zip(rows.seat_names, _highest_prefix_per_run(deltas[by_seat], seat_runs)):
            per_seat[name][load_name] = peak
    return {name: Peaks(**figures) for name, figures in per_seat.items()}, Peaks(**overall)


def _highest_prefix(deltas: np.ndarray) -> int:
    return max(0, int(np.cumsum(deltas).max())) if len(deltas) else 0


def _highest_prefix_per_run(deltas: np.ndarray, run_bounds: np.ndarray) -> list[int]:
    """The highest prefix sum within each run ``run_bounds[i]:run_bounds[i + 1]``, from one running sum."""
    running = np.cumsum(deltas)
    peaks = []
    for first, last in zip(run_bounds[:-1].tolist(), run_bounds[1:].tolist()):
        if last <= first:
            peaks.append(0)
            continue
        before = int(running[first - 1]) if first > 0 else 0
        peaks.append(max(0, int(running[first:last].max()) - before))
    return peaks
