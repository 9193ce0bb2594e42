"""Compact shapes of the window for pictures (``seatplan report``): token-length histograms per seat and the
tokens in flight per seat at evenly spaced instants. Both are bounded (TOKEN_BIN_EDGES bins, at most
TIMELINE_INSTANTS instants) whatever the number of rows, and both are exact for what they state: a histogram
counts every call, and an instant's figure is the load at that very instant under ``INFLIGHT_CONVENTION``
(a peak between two instants is not shown by them; ``peak_inflight_tokens`` is the exact peak).
"""

from __future__ import annotations

from datetime import datetime, timedelta

import numpy as np

from seatplan.documents.usage import InflightTimeline, TokenHistogram
from seatplan.usage.loads import RequestRows

# Half-octave bins: 0, 1, 2, 3, 4, 6, 8, 11, 16, 23, 32, … up to 2**21 tokens; the last bin is open-ended.
TOKEN_BIN_EDGES: tuple[int, ...] = (0, *sorted({int(round(2 ** (step / 2))) for step in range(0, 43)}))
TIMELINE_INSTANTS = 240


LOOKUP_LIMIT_TOKENS = 1 << 22  # below this, a value's bin is one table look-up (4 MiB of int8), not a search


def _bins_of(values: np.ndarray) -> np.ndarray:
    """Each value's bin: bin i holds [TOKEN_BIN_EDGES[i], TOKEN_BIN_EDGES[i+1])."""
    edges = np.asarray(TOKEN_BIN_EDGES, dtype=np.int64)
    top = int(values.max(initial=0))
    if top < LOOKUP_LIMIT_TOKENS:
        table = (np.searchsorted(edges, np.arange(top + 1), side="right") - 1).astype(np.int8)
        return table[values]
    return np.searchsorted(edges, values, side="right") - 1


def token_histograms(rows: RequestRows) -> dict[str, TokenHistogram]:
    """Per seat, the calls that start in the window counted by prompt and by completion length (one pass per
    column: rows that are not such calls go to a spare slot past the last seat's bins)."""
    bins = len(TOKEN_BIN_EDGES)
    seats = len(rows.seat_names)
    base = np.where(rows.starts_in_window, rows.seat.astype(np.int64) * bins, seats * bins)
    counted = {}
    for column_name, column in (("prompt", rows.prompt_tokens), ("completion", rows.completion_tokens)):
        # Rows that are not counted may hold anything (a rejected row's placeholder): read them as 0.
        slots = base + _bins_of(np.where(rows.starts_in_window, column, 0))
        counted[column_name] = np.bincount(slots, minlength=(seats + 1) * bins)[: seats * bins].reshape(seats, bins)
    return {
        name: TokenHistogram(edges_tokens=list(TOKEN_BIN_EDGES), prompt_calls=counted["prompt"][index].tolist(),
                             completion_calls=counted["completion"][index].tolist())
        for index, name in enumerate(rows.seat_names)
        if counted["prompt"][index].any()
    }


def inflight_timeline(rows: RequestRows, since_us: int | None, until_us: int | None,
                      instants: int = TIMELINE_INSTANTS) -> InflightTimeline | None:
    """Tokens (prompt + completion) in flight per seat at ``instants`` evenly spaced instants of the window.

    A request is in flight at t when start <= t < end: with t_k = first + k·step it counts from the first
    instant at or after its start to the last one before its end, so one bincount of +tokens and -tokens
    and a running sum give every instant exactly, in one pass over the rows.
    """
    live = rows.included & (rows.end_us > rows.start_us)
    if not live.any():
        return None
    first = int(since_us) if since_us is not None else int(rows.start_us[live].min())
    last = int(until_us) if until_us is not None else int(rows.end_us[live].max())
    if last <= first:
        return None
    step_us = max(1, -(-(last - first) // max(instants - 1, 1)))
    count = (last - first) // step_us + 1
    seats = len(rows.seat_names)
    slots = count + 1
    # Rows that are not live weigh nothing; no copies of the columns are taken.
    tokens = np.where(live, rows.prompt_tokens + rows.completion_tokens, 0).astype(np.float64)
    track = np.where(live, rows.seat, 0).astype(np.int64) * slots
    # First instant index at or after a time: ceil((time - first) / step), clipped to [0, count].
    first_in = np.clip(-(-(rows.start_us - first) // step_us), 0, count)
    first_out = np.clip(-(-(rows.end_us - first) // step_us), 0, count)
    delta = (np.bincount(track + first_in, weights=tokens, minlength=seats * slots)
             - np.bincount(track + first_out, weights=tokens, minlength=seats * slots))
    load = np.cumsum(delta.reshape(seats, slots), axis=1)[:, :count]
    origin = datetime(1970, 1, 1)
    return InflightTimeline(
        instants=[origin + timedelta(microseconds=first + index * step_us) for index in range(count)],
        tokens_by_seat={name: [int(round(value)) for value in load[index]] for index, name in enumerate(rows.seat_names)
                        if load[index].any()},
    )
