"""Token percentiles and the exact in-flight peaks, over every accepted request as numpy arrays.

Both sources hand over the same :class:`RequestRows`: one entry per accepted request that starts in the
window or is still running in it, times in microseconds since 1970. The definition the sweep implements
is :func:`seatplan.usage.sweep.peak_inflight`, kept small and obvious so tests can hold this one to it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from seatplan.documents.usage import TokenPercentiles

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


HISTOGRAM_BINS = 1 << 24  # 128 MiB of counts; above that, per-seat partitions instead


def seat_percentiles(rows: RequestRows, *columns: np.ndarray) -> list[tuple[dict[str, TokenPercentiles], TokenPercentiles]]:
    """For each column, (per seat, over all seats) percentiles over the calls that start in the window."""
    calls = np.flatnonzero(rows.starts_in_window)
    seat = rows.seat[calls]
    seats = len(rows.seat_names)
    figures = []
    for column in columns:
        values = column[calls]
        top = int(values.max(initial=0))
        # Accepted token counts are never negative, and usually small: one histogram per seat is then
        # one bincount, where partitions would copy each seat's share of the column.
        if seats and (top + 1) * seats <= HISTOGRAM_BINS:
            per_seat, overall = _histogram_percentiles(seat, values, seats, top)
        else:
            per_seat = [percentiles(values[seat == index]) for index in range(seats)]
            overall = percentiles(values)
        figures.append((dict(zip(rows.seat_names, per_seat)), overall))
    return figures


def _histogram_percentiles(seat: np.ndarray, values: np.ndarray, seats: int, top: int) -> tuple[list[TokenPercentiles], TokenPercentiles]:
    counts = np.bincount(seat.astype(np.int64) * (top + 1) + values, minlength=seats * (top + 1)).reshape(seats, top + 1)
    cumulative = np.cumsum(counts, axis=1)
    return ([_ranked(track) for track in cumulative], _ranked(cumulative.sum(axis=0)))


def _ranked(cumulative: np.ndarray) -> TokenPercentiles:
    """Nearest-rank percentiles from the running count of values up to each value."""
    count = int(cumulative[-1]) if len(cumulative) else 0
    if count == 0:
        return TokenPercentiles(p50=None, p90=None, p99=None, max=None)
    ranks = [max(1, math.ceil(fraction * count)) for fraction in PERCENTILE_FRACTIONS] + [count]
    p50, p90, p99, top = (int(value) for value in np.searchsorted(cumulative, ranks))
    return TokenPercentiles(p50=p50, p90=p90, p99=p99, max=top)


def runaway_mask(rows: RequestRows, threshold_tokens_by_seat: Mapping[str, int]) -> np.ndarray:
    """Requests whose completion reaches their seat's runaway threshold."""
    never = np.iinfo(np.int64).max
    # The extra last entry answers seat -1 (a row without a model name, never included).
    thresholds = np.array([threshold_tokens_by_seat.get(name, never) for name in rows.seat_names] + [never], dtype=np.int64)
    return rows.completion_tokens >= thresholds[rows.seat]


STARTS_PER_BUCKET = 8
LOAD_NAMES = ("tokens", "requests", "tokens_without_runaways", "requests_without_runaways")


def peak_loads(rows: RequestRows, runaway: np.ndarray, since_us: int | None, until_us: int | None,
               bucket_us: int | None = None) -> tuple[dict[str, Peaks], Peaks]:
    """The exact peaks per seat and over all seats: tokens, requests, and both without runaway replies.

    Events are swept in time order, ends before starts at equal times (``sweep.peak_inflight``). Sorting
    every event would cost more than everything else together, so time is cut into buckets first (about
    STARTS_PER_BUCKET starts per seat each, unless ``bucket_us`` is given): the load entering a bucket is
    a load the track really carried, so the highest one is a lower bound on the peak; inside a bucket the
    load never exceeds what entered plus everything that starts in it. Only the buckets whose bound beats
    the lower bound, for any of the four loads, are swept event by event, once for all four. Any bucket
    length gives the same peaks.
    """
    events = _Events.of(rows, since_us, until_us, bucket_us)
    ordinary = ~events.take(runaway)
    runaways = np.flatnonzero(~ordinary)
    weights: dict[str, _Weights] = {"tokens": _Weights(events.take(rows.prompt_tokens + rows.completion_tokens)),
                                    "requests": _Weights(None)}
    sums = {name: events.bucket_sums(weight) for name, weight in weights.items()}
    for name, weight in list(weights.items()):
        # Runaways are a handful of requests: their share is taken off the bucket sums instead of summing again.
        started, ended = sums[name]
        runaway_started, runaway_ended = events.bucket_sums(weight, runaways)
        sums[f"{name}_without_runaways"] = (started - runaway_started, ended - runaway_ended)
        weights[f"{name}_without_runaways"] = _Weights(weight.tokens, ordinary)
    seat_tracks = {name: (started.reshape(-1, events.buckets), (started - ended).reshape(-1, events.buckets))
                   for name, (started, ended) in sums.items()}
    overall_tracks = {name: (started.sum(axis=0, keepdims=True), net.sum(axis=0, keepdims=True))
                      for name, (started, net) in seat_tracks.items()}
    seat_peaks = events.sweep(seat_tracks, weights)
    overall_peaks = events.sweep(overall_tracks, weights)
    per_seat = {name: Peaks(**{load: seat_peaks[load][index] for load in LOAD_NAMES})
                for index, name in enumerate(rows.seat_names)}
    return per_seat, Peaks(**{load: overall_peaks[load][0] for load in LOAD_NAMES})


@dataclass(frozen=True)
class _Weights:
    """What each live request adds to a load: its token count, or 1 where ``tokens`` is None; 0 where not
    ``kept``. Summed as floats by np.bincount: exact, as every partial sum of token counts stays far below
    2**53."""

    tokens: np.ndarray | None
    kept: np.ndarray | None = None

    def of_all(self) -> np.ndarray | None:
        """Every live request's weight, for np.bincount; None where all are 1 (it then counts)."""
        if self.kept is not None:
            raise ValueError("a load without some requests is summed from the full load, not on its own")
        return self.tokens

    def of(self, picked: np.ndarray) -> np.ndarray:
        weights = np.ones(len(picked)) if self.tokens is None else self.tokens[picked].astype(np.float64)
        return weights if self.kept is None else weights * self.kept[picked]


@dataclass(frozen=True)
class _Events:
    """Each live request's start and end, with their (seat, bucket) group.

    Each seat's track has one bucket more than time needs, past its last: ends at or after the window's
    end go there. They come after every start in the window and only lower the load, and that bucket, with
    no start in it, can never beat the lower bound, so it is never swept.
    """

    live: np.ndarray | None  # the requests in flight at some instant of the window; None: all of them
    start: np.ndarray  # per live request, clipped to the window's start
    end: np.ndarray
    seat_bucket: np.ndarray  # seat * buckets + bucket of each start; seat_end_bucket: of each end
    seat_end_bucket: np.ndarray
    buckets: int  # per track, the one past the window included
    seats: int

    def take(self, values: np.ndarray) -> np.ndarray:
        return values if self.live is None else values[self.live]

    @staticmethod
    def of(rows: RequestRows, since_us: int | None, until_us: int | None, bucket_us: int | None) -> _Events:
        start = rows.start_us if since_us is None else np.maximum(rows.start_us, since_us)
        # In flight on [start, end): a request clipped to nothing, or starting at the window's end, never is.
        live_mask = rows.end_us > start
        live_mask &= rows.included
        if until_us is not None:
            live_mask &= start < until_us
        live = None if live_mask.all() else np.flatnonzero(live_mask)
        del live_mask
        if live is not None:
            start = start[live]
        end = rows.end_us if live is None else rows.end_us[live]
        first = int(start.min()) if len(start) else 0
        last = int(max(start.max(initial=first), end.max(initial=first)))
        seats = max(len(rows.seat_names), 1)
        if bucket_us is None:
            bucket_us = max(1, (last - first + 1) * seats * STARTS_PER_BUCKET // max(len(start), 1))
        # A bucket wider than the whole span puts everything in bucket 0 as the span itself does, and keeps the
        # width within int64 when the times span millennia (fuzzed exports).
        bucket_us = min(bucket_us, last - first + 1)
        buckets = (last - first) // bucket_us + 2
        seat = (rows.seat if live is None else rows.seat[live]).astype(np.int64)
        np.multiply(seat, buckets, out=seat)
        seat_bucket = start - first
        seat_bucket //= bucket_us
        seat_bucket += seat
        seat_end_bucket = end - first
        seat_end_bucket //= bucket_us
        if until_us is not None:
            seat_end_bucket[end >= until_us] = buckets - 1
        seat_end_bucket += seat
        return _Events(live, start, end, seat_bucket, seat_end_bucket, buckets, seats)

    def bucket_sums(self, weight: _Weights, picked: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """(started, ended) per (seat, bucket) group, of the ``picked`` requests (all by default)."""
        start_group = self.seat_bucket if picked is None else self.seat_bucket[picked]
        end_group = self.seat_end_bucket if picked is None else self.seat_end_bucket[picked]
        weights = weight.of_all() if picked is None else weight.of(picked)
        groups = self.seats * self.buckets
        return (np.bincount(start_group, weights=weights, minlength=groups).astype(np.float64, copy=False),
                np.bincount(end_group, weights=weights, minlength=groups).astype(np.float64, copy=False))

    def sweep(self, tracks: Mapping[str, tuple[np.ndarray, np.ndarray]], weights: Mapping[str, _Weights]) -> dict[str, list[int]]:
        """Each load's peak per track, given per (track, bucket) its started and net sums: one track per
        seat, or one track of all seats together."""
        entering = {name: np.cumsum(net, axis=1) - net for name, (_, net) in tracks.items()}  # load entering each bucket
        known = {name: np.maximum(entering[name].max(axis=1), 0) for name in tracks}
        track_open: np.ndarray = np.zeros(next(iter(tracks.values()))[0].shape, dtype=bool)
        for name, (started, _) in tracks.items():
            track_open |= entering[name] + started > known[name][:, None]
        peaks = {name: [int(peak) for peak in known[name]] for name in tracks}
        if not track_open.any():
            return peaks
        # Open (seat, bucket) groups: on the one track of all seats, a bucket is open for every seat.
        merged = track_open.shape[0] == 1
        open_groups = np.tile(track_open.ravel(), self.seats) if merged else track_open.ravel()
        starts = np.flatnonzero(open_groups[self.seat_bucket])
        ends = np.flatnonzero(open_groups[self.seat_end_bucket])
        group = np.concatenate((self.seat_end_bucket[ends], self.seat_bucket[starts]))
        if merged:
            group %= self.buckets
        # Ends (time * 2) sort before starts (time * 2 + 1) at equal times.
        key = np.concatenate((self.end[ends] * 2, self.start[starts] * 2 + 1))
        order = np.lexsort((key, group))
        del key
        group = group[order]
        opens_group = np.concatenate(([True], group[1:] != group[:-1]))
        new_group = np.flatnonzero(opens_group)
        run_of_event = np.cumsum(opens_group) - 1
        del opens_group
        # Groups are sorted, so each track's swept events are one run: its highest load is one reduceat away.
        track = group // self.buckets
        track_starts = np.flatnonzero(np.concatenate(([True], track[1:] != track[:-1])))
        for name in tracks:
            delta = np.concatenate((-weights[name].of(ends), weights[name].of(starts)))[order]
            running = np.cumsum(delta)
            before = np.concatenate(([0.0], running))[new_group]
            inside = running - before[run_of_event] + entering[name].ravel()[group]
            highest = dict(zip(track[track_starts].tolist(), np.maximum.reduceat(inside, track_starts).tolist()))
            peaks[name] = [int(max(peak, highest.get(index, 0))) for index, peak in enumerate(known[name].tolist())]
        return peaks

