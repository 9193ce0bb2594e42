"""Token percentiles and the exact in-flight peaks, over every accepted request as numpy arrays.

Both sources hand over the same :class:`RequestRows`: one entry per accepted request that starts in the
window or is still running in it, times in microseconds since 1970. The definition the sweep implements
is :func:`seatplan.usage.sweep.peak_inflight`, kept small and obvious so tests can hold this one to it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import numpy as np

from seatplan.usage.models import TokenPercentiles

PERCENTILE_FRACTIONS = (0.50, 0.90, 0.99)


@dataclass(frozen=True)
class RequestRows:
    """Requests as arrays: ``seat`` indexes ``seat_names``. Only the ``included`` entries are accepted requests
    that start in the window or run in it (a source may pass all its rows, to save copying them);
    ``starts_in_window`` marks, among those, the calls the window counts."""

    seat_names: tuple[str, ...]
    seat: np.ndarray  # int32
    start_us: np.ndarray  # int64, microseconds since 1970-01-01 (UTC)
    end_us: np.ndarray  # int64
    prompt_tokens: np.ndarray  # int64
    completion_tokens: np.ndarray  # int64
    starts_in_window: np.ndarray  # bool, False wherever not included
    included: np.ndarray  # bool


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


def seat_percentiles(rows: RequestRows, *columns: np.ndarray) -> list[tuple[dict[str, TokenPercentiles], TokenPercentiles]]:
    """For each column, (per seat, over all seats) percentiles over the calls that start in the window."""
    calls = rows.starts_in_window
    seat_calls = [calls & (rows.seat == index) for index in range(len(rows.seat_names))]
    return [({name: percentiles(column[on_seat]) for name, on_seat in zip(rows.seat_names, seat_calls)},
             percentiles(column[calls])) for column in columns]


def runaway_mask(rows: RequestRows, threshold_tokens_by_seat: Mapping[str, int]) -> np.ndarray:
    """Requests whose completion reaches their seat's runaway threshold."""
    never = np.iinfo(np.int64).max
    # The extra last entry answers seat -1 (a row without a model name, never included).
    thresholds = np.array([threshold_tokens_by_seat.get(name, never) for name in rows.seat_names] + [never], dtype=np.int64)
    return rows.completion_tokens >= thresholds[rows.seat]


STARTS_PER_BUCKET = 8


def peak_loads(rows: RequestRows, runaway: np.ndarray, since_us: int | None, until_us: int | None,
               bucket_us: int | None = None) -> tuple[dict[str, Peaks], Peaks]:
    """The exact peaks per seat and over all seats: tokens, requests, and both without runaway replies.

    Events are swept in time order, ends before starts at equal times (``sweep.peak_inflight``). Sorting
    every event would cost more than everything else together, so time is cut into buckets first (about
    STARTS_PER_BUCKET starts per seat each, unless ``bucket_us`` is given): the load entering a bucket is
    a load the track really carried, so the highest one is a lower bound on the peak; inside a bucket the
    load never exceeds what entered plus everything that starts in it. Only the buckets whose bound beats
    the lower bound are swept event by event. Any bucket length gives the same peaks.
    """
    events = _Events.of(rows, since_us, until_us, bucket_us)
    tokens = (rows.prompt_tokens + rows.completion_tokens)[events.live]
    ordinary = ~runaway[events.live]
    # Float weights for np.bincount: exact, as every partial sum of token counts stays far below 2**53.
    weights = {"tokens": lambda: tokens.astype(np.float64), "requests": lambda: np.ones(len(tokens)),
               "tokens_without_runaways": lambda: (tokens * ordinary).astype(np.float64),
               "requests_without_runaways": lambda: ordinary.astype(np.float64)}
    overall: dict[str, int] = {}
    per_seat: dict[str, dict[str, int]] = {name: {} for name in rows.seat_names}
    for load_name, weight_of in weights.items():
        if load_name.endswith("_without_runaways") and ordinary.all():
            plain = load_name.removesuffix("_without_runaways")
            overall[load_name] = overall[plain]
            for figures in per_seat.values():
                figures[load_name] = figures[plain]
            continue
        seat_peaks, overall[load_name] = events.peaks(weight_of(), len(rows.seat_names))
        for name, peak in zip(rows.seat_names, seat_peaks):
            per_seat[name][load_name] = peak
    return {name: Peaks(**figures) for name, figures in per_seat.items()}, Peaks(**overall)


@dataclass(frozen=True)
class _Events:
    """Each live request's start and (if before the window's end) its end, with their (seat, bucket) group."""

    live: np.ndarray  # the requests in flight at some instant of the window
    start_key: np.ndarray  # time * 2 + 1 per live request: ends (time * 2) sort before starts at equal times
    end_key: np.ndarray  # per entry of ``ending``
    ending: np.ndarray  # live requests (positions among them) whose end falls before the window's end
    seat_bucket: np.ndarray  # seat * buckets + bucket of each start; seat_end_bucket: of each end
    seat_end_bucket: np.ndarray
    buckets: int

    @staticmethod
    def of(rows: RequestRows, since_us: int | None, until_us: int | None, bucket_us: int | None) -> _Events:
        start = rows.start_us if since_us is None else np.maximum(rows.start_us, since_us)
        # In flight on [start, end): a request clipped to nothing, or starting at the window's end, never is.
        live_mask = rows.end_us > start
        live_mask &= rows.included
        if until_us is not None:
            live_mask &= start < until_us
        live = np.flatnonzero(live_mask).astype(np.int32)
        del live_mask
        start, end = start[live], rows.end_us[live]
        # Ends at or after the window's end come after every start in it and only lower the load: left out.
        ending = (np.flatnonzero(end < until_us) if until_us is not None else np.arange(len(end))).astype(np.int32)
        end = end[ending]
        first = int(start.min()) if len(start) else 0
        last = int(max(start.max(initial=first), end.max(initial=first)))
        seats = max(len(rows.seat_names), 1)
        if bucket_us is None:
            bucket_us = max(1, (last - first + 1) * seats * STARTS_PER_BUCKET // max(len(start), 1))
        buckets = (last - first) // bucket_us + 1
        seat = rows.seat[live].astype(np.int64) * buckets
        seat_bucket = seat + (start - first) // bucket_us
        seat_end_bucket = seat[ending] + (end - first) // bucket_us
        del seat
        np.multiply(start, 2, out=start)
        np.add(start, 1, out=start)
        np.multiply(end, 2, out=end)
        return _Events(live, start, end, ending, seat_bucket, seat_end_bucket, buckets)

    def peaks(self, weight: np.ndarray, seats: int) -> tuple[list[int], int]:
        """(the peak of each seat, the peak over all seats) of one load, ``weight`` per live request."""
        end_weight = weight if len(self.ending) == len(weight) else weight[self.ending]
        groups = max(seats, 1) * self.buckets
        started = np.bincount(self.seat_bucket, weights=weight, minlength=groups).reshape(-1, self.buckets)
        net = started - np.bincount(self.seat_end_bucket, weights=end_weight, minlength=groups).reshape(-1, self.buckets)
        seat_peaks = self._tracks(started, net, lambda groups: groups, weight, end_weight)
        overall = self._tracks(started.sum(axis=0, keepdims=True), net.sum(axis=0, keepdims=True),
                               lambda groups: groups % self.buckets, weight, end_weight)
        return seat_peaks[:seats], overall[0]

    def _tracks(self, started: np.ndarray, net: np.ndarray, track_group: Callable[[np.ndarray], np.ndarray],
                weight: np.ndarray, end_weight: np.ndarray) -> list[int]:
        """Peaks of the tracks whose (track, bucket) sums are the rows of ``started`` and ``net``;
        ``track_group`` maps a (seat, bucket) group to its (track, bucket) group."""
        entering = np.cumsum(net, axis=1) - net  # the load entering each bucket of each track
        known = np.maximum(entering.max(axis=1), 0)
        open_groups = (entering + started > known[:, None]).ravel()
        if not open_groups.any():
            return [int(peak) for peak in known]
        start_group, end_group = track_group(self.seat_bucket), track_group(self.seat_end_bucket)
        starts = np.flatnonzero(open_groups[start_group])
        ends = np.flatnonzero(open_groups[end_group])
        group = np.concatenate((end_group[ends], start_group[starts]))
        del start_group, end_group
        key = np.concatenate((self.end_key[ends], self.start_key[starts]))
        delta = np.concatenate((-end_weight[ends], weight[starts]))
        order = np.lexsort((key, group))
        group, delta = group[order], delta[order]
        new_group = np.concatenate(([True], group[1:] != group[:-1]))
        running = np.cumsum(delta)
        before = np.concatenate(([0.0], running))[np.flatnonzero(new_group)]
        inside = running - before[np.cumsum(new_group) - 1] + entering.ravel()[group]
        # Groups are sorted, so each track's swept events are one run: its highest load is one reduceat away.
        track = group // self.buckets
        track_starts = np.flatnonzero(np.concatenate(([True], track[1:] != track[:-1])))
        highest = dict(zip(track[track_starts].tolist(), np.maximum.reduceat(inside, track_starts).tolist()))
        return [int(max(peak, highest.get(index, 0))) for index, peak in enumerate(known.tolist())]
