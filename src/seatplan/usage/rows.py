"""Every spend-log row as numpy arrays, and what the report needs from them: verdicts, counts, clients.

Both sources read their rows once into :class:`SpendRows`: the numbers of each row (times, tokens) and,
instead of its strings, an index into two small tables of distinct values, its model fields
(:class:`ModelFields`) and its client fields (:class:`ClientFields`). Everything per row is then a vector
operation here, the same for PostgreSQL and for files; only request ids, needed for a few rows, are asked
of the source (``request_ids``).

The verdicts follow LiteLLM's columns as ``queries.normalized_columns`` reads them: a row without a model
name, with an unreadable time or token count, negative tokens, or an end before its start is rejected,
counted by the first reason that applies, and left out of every figure.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from seatplan.usage.loads import RequestRows
from seatplan.usage.queries import MISSING_NUMBER, MODEL_COLUMNS, REJECT_REASONS, SourceFormat, Window
from seatplan.usage.scan import SeatCounts, SpendScan, microseconds
from seatplan.usage.sweep import ClientRow, RunawayRow

MISSING = MISSING_NUMBER  # an unreadable (or NULL) time or token count: the lowest int64
REJECTED_EXAMPLES_PER_REASON = 3

RequestIds = Callable[[np.ndarray], list["str | None"]]


@dataclass(frozen=True)
class ModelFields:
    """What a row says about its model and outcome; ``readable`` is False for a JSON line that is not an object."""

    model: str | None
    model_group: str | None
    failed: bool | None
    cache_hit: bool | None
    readable: bool = True


@dataclass(frozen=True)
class ClientFields:
    key_alias: str
    team: str | None
    user_id: str | None
    user_agent: str | None
    client_ip: str | None
    tags_json: str | None


@dataclass(frozen=True)
class SpendRows:
    """One entry per row; times in microseconds since 1970 (UTC), MISSING where unreadable."""

    start_us: np.ndarray
    end_us: np.ndarray
    prompt_tokens: np.ndarray
    completion_tokens: np.ndarray
    model_index: np.ndarray  # into ``models``
    client_index: np.ndarray  # into ``clients``
    models: Sequence[ModelFields]
    clients: Sequence[ClientFields]


class SpendLogSource(Protocol):
    source_format: SourceFormat
    description: str

    def read(self, window: Window) -> SpendRows:
        """Every row that starts in the window, runs in it, or has no readable start."""

    def request_ids(self, positions: np.ndarray) -> list[str | None]:
        """The request ids of these rows of the last read (rows the report names: examples, runaways)."""

    def unreadable_lines(self) -> int:
        """Lines of the last read that did not even split into columns (not in the rows)."""

    def reader_note(self) -> str:
        """What read the source in the last read, for people (UsageReport.reader)."""


def rows_by_key(start_us: np.ndarray, end_us: np.ndarray, prompt_tokens: np.ndarray, completion_tokens: np.ndarray,
                key: np.ndarray, fields_of_rows: Callable[[np.ndarray], Sequence[Sequence[Any]]]) -> SpendRows:
    """SpendRows from a source that hashes each row's strings (``queries.MODEL_COLUMNS`` and ``CLIENT_COLUMNS``)
    into one 64-bit key: ``fields_of_rows(positions)`` reads those strings for a few rows, here one row per
    distinct key. Keys that read as the same fields (text written two ways) get one entry."""
    keys, key_index = distinct(key)
    models: dict[ModelFields, int] = {}
    clients: dict[ClientFields, int] = {}
    model_of_key = np.zeros(len(keys), dtype=np.int32)
    client_of_key = np.zeros(len(keys), dtype=np.int32)
    model_fields = len(MODEL_COLUMNS)  # ``readable`` is left at True: every row of a table or CSV is
    for position, values in enumerate(fields_of_rows(representatives(key_index, len(keys)))):
        model_of_key[position] = models.setdefault(ModelFields(*values[:model_fields]), len(models))
        client_of_key[position] = clients.setdefault(ClientFields(*values[model_fields:]), len(clients))
    return SpendRows(start_us, end_us, prompt_tokens, completion_tokens, model_of_key[key_index], client_of_key[key_index],
                     list(models), list(clients))


SLOT_BITS = 20


def distinct(values: np.ndarray, round_number: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """(sorted distinct values, each value's index among them) of 64-bit hashes, without sorting them all.

    A few thousand distinct hashes among millions of rows: each row goes to a slot by some of its hash's
    bits, and the first row in each slot names it. Rows whose hash differs from their slot's (two hashes
    sharing a slot) are a small remainder, handled the same way on other bits.
    """
    if len(values) == 0 or round_number * SLOT_BITS >= 64:
        keys = np.unique(values)
        return keys, np.searchsorted(keys, values).astype(np.int32)
    slot = (values >> (round_number * SLOT_BITS)) & ((1 << SLOT_BITS) - 1)
    first_row = np.full(1 << SLOT_BITS, -1, dtype=np.int64)
    rows = np.arange(len(values) - 1, -1, -1)
    first_row[slot[::-1]] = rows  # written last to first, so the first row in each slot stays
    del rows
    used = np.flatnonzero(first_row >= 0)
    slot_keys = values[first_row[used]]
    slot_key_of_row = np.zeros(1 << SLOT_BITS, dtype=values.dtype)
    slot_key_of_row[used] = slot_keys
    others = np.flatnonzero(slot_key_of_row[slot] != values)
    other_keys, other_index = distinct(values[others], round_number + 1) if len(others) else (slot_keys[:0], None)
    keys = np.unique(np.concatenate((slot_keys, other_keys)))
    rank_of_slot = np.zeros(1 << SLOT_BITS, dtype=np.int32)
    rank_of_slot[used] = np.searchsorted(keys, slot_keys)
    index = rank_of_slot[slot]
    if other_index is not None:
        index[others] = np.searchsorted(keys, other_keys)[other_index]
    return keys, index


def representatives(index: np.ndarray, count: int) -> np.ndarray:
    """One row (any) for each of ``count`` distinct values, given each row's value index."""
    chosen = np.zeros(count, dtype=np.int64)
    chosen[index] = np.arange(len(index))
    return chosen


def window_masks(start_us: np.ndarray, end_us: np.ndarray, window: Window) -> tuple[np.ndarray, np.ndarray]:
    """(starts in the window, runs during it): the numpy twins of ``Window.contains`` and ``Window.overlaps``,
    for rows with readable times."""
    since_us, until_us = microseconds(window.since), microseconds(window.until)
    start_readable = start_us != MISSING
    starts_in_window = start_readable.copy()
    in_flight = start_readable & (end_us != MISSING) & (end_us > start_us)
    if since_us is not None:
        starts_in_window &= start_us >= since_us
        in_flight &= end_us > since_us
    if until_us is not None:
        starts_in_window &= start_us < until_us
        in_flight &= start_us < until_us
    return starts_in_window, in_flight


def needed_rows(start_us: np.ndarray, end_us: np.ndarray, window: Window) -> np.ndarray | None:
    """Which rows ``Window.needs`` keeps (calls in the window, requests running in it, rows without a readable
    start), for a source read whole; None where the window is open and keeps them all."""
    if window.since is None and window.until is None:
        return None
    starts_in_window, in_flight = window_masks(start_us, end_us, window)
    return (start_us == MISSING) | starts_in_window | in_flight


@dataclass(frozen=True)
class Verdicts:
    seat_names: tuple[str, ...]
    seat_of_model: np.ndarray  # index into seat_names per entry of SpendRows.models, -1 without a model name
    seat: np.ndarray  # the same per row
    reason: np.ndarray  # index into REJECT_REASONS, -1 when accepted
    starts_in_window: np.ndarray
    counted: np.ndarray  # a rejected row is reported when it starts in the window or has no readable start
    in_flight: np.ndarray  # runs during the window, for the sweep

    @property
    def accepted(self) -> np.ndarray:
        return self.reason < 0

    @property
    def calls(self) -> np.ndarray:
        return self.accepted & self.starts_in_window


def seat_name(fields: ModelFields, seat_by_name: Mapping[str, str]) -> str | None:
    """The fleet seat serving the row's model (or model group), else the model name itself."""
    return (seat_by_name.get(fields.model or "") or seat_by_name.get(fields.model_group or "")
            or fields.model or fields.model_group)


def judge(rows: SpendRows, seat_by_name: Mapping[str, str], window: Window) -> Verdicts:
    seat_of_model = [seat_name(fields, seat_by_name) for fields in rows.models]
    seat_names = tuple(sorted({name for name in seat_of_model if name}))
    seat_index = np.array([seat_names.index(name) if name else -1 for name in seat_of_model] or [-1], dtype=np.int32)
    readable_model = np.array([fields.readable for fields in rows.models] or [True], dtype=bool)
    seat = seat_index[rows.model_index]
    start_readable = rows.start_us != MISSING
    end_readable = rows.end_us != MISSING
    tests = {
        "unreadable_row": ~readable_model[rows.model_index],
        "missing_model": seat < 0,
        "unreadable_timestamp": ~(start_readable & end_readable),
        "unreadable_tokens": (rows.prompt_tokens == MISSING) | (rows.completion_tokens == MISSING),
        "negative_tokens": (rows.prompt_tokens < 0) | (rows.completion_tokens < 0),
        "end_before_start": rows.end_us < rows.start_us,
    }
    reason = np.full(len(rows.start_us), -1, dtype=np.int8)
    # Written last to first, so the first test a row fails names it.
    for name, failed in reversed(tests.items()):
        reason[failed] = REJECT_REASONS.index(name)
    starts_in_window, in_flight = window_masks(rows.start_us, rows.end_us, window)
    return Verdicts(seat_names, seat_index, seat, reason, starts_in_window, ~start_readable | starts_in_window, in_flight)


def summarize(rows: SpendRows, verdicts: Verdicts, request_ids: RequestIds, unreadable_lines: int = 0) -> SpendScan:
    """Counts, clients, rejected rows and the accepted requests, from one pass of vector operations;
    ``unreadable_lines`` (lines a file could not split into columns) are rejected rows without an example."""
    included = verdicts.accepted & (verdicts.seat >= 0) & (verdicts.starts_in_window | verdicts.in_flight)
    # The row arrays themselves, not copies of the included part: ten million rows are 400 MB a copy.
    request_rows = RequestRows(
        seat_names=verdicts.seat_names, seat=verdicts.seat, start_us=rows.start_us, end_us=rows.end_us,
        prompt_tokens=rows.prompt_tokens, completion_tokens=rows.completion_tokens,
        starts_in_window=verdicts.starts_in_window & included, included=included,
    )
    by_reason, examples = rejected_rows(rows, verdicts, request_ids)
    if unreadable_lines:
        by_reason["unreadable_row"] = by_reason.get("unreadable_row", 0) + unreadable_lines
        examples.setdefault("unreadable_row", [])
    return SpendScan(seat_counts(rows, verdicts), request_rows, client_rows(rows, verdicts), by_reason, examples)


def seat_counts(rows: SpendRows, verdicts: Verdicts) -> dict[str, SeatCounts]:
    """Calls, errors, cache hits and rejected rows per seat. A row's seat, status and cache flag all follow
    from its model fields, so rows are counted once per model entry and kind, and the entries added up."""
    considered = verdicts.counted | verdicts.in_flight
    calls = verdicts.accepted & verdicts.starts_in_window
    rejected = ~verdicts.accepted & verdicts.counted
    # 0: left out, 1: a call, 2: a rejected row, 3: only in flight (its model is still one the seat served).
    kind = considered.view(np.int8) * np.int8(3)
    kind -= calls.view(np.int8) * np.int8(2)
    kind -= rejected.view(np.int8)
    del considered, calls, rejected
    entries = len(rows.models)
    per_model = np.bincount(rows.model_index.astype(np.int64) * 4 + kind, minlength=4 * entries).reshape(-1, 4)
    counts = {name: SeatCounts() for name in verdicts.seat_names}
    for index, (fields, (_, calls_of, rejected_of, in_flight_of)) in enumerate(zip(rows.models, per_model.tolist())):
        seat = int(verdicts.seat_of_model[index])
        if seat < 0 or not (calls_of or rejected_of or in_flight_of):
            continue
        counts[verdicts.seat_names[seat]].add(SeatCounts(
            model_names={text for text in (fields.model, fields.model_group) if text},
            calls=calls_of, errors=calls_of if fields.failed else 0,
            calls_with_status=calls_of if fields.failed is not None else 0,
            cache_hits=calls_of if fields.cache_hit else 0,
            calls_with_cache_flag=calls_of if fields.cache_hit is not None else 0,
            rejected_rows=rejected_of,
        ))
    return counts


def rejected_rows(rows: SpendRows, verdicts: Verdicts, request_ids: RequestIds) -> tuple[dict[str, int], dict[str, list[str | None]]]:
    """Rejected rows by reason, with the first few by start time (rows without one last), then request id."""
    rejected = ~verdicts.accepted & verdicts.counted
    by_reason: dict[str, int] = {}
    examples: dict[str, list[str | None]] = {}
    latest = np.iinfo(np.int64).max
    for index, reason in enumerate(REJECT_REASONS):
        of_reason = np.flatnonzero(rejected & (verdicts.reason == index))
        if len(of_reason) == 0:
            continue
        by_reason[reason] = len(of_reason)
        starts = np.where(rows.start_us[of_reason] == MISSING, latest, rows.start_us[of_reason])
        # Only rows that can be among the first few need their ids: those up to the few-th start.
        few = min(REJECTED_EXAMPLES_PER_REASON, len(starts)) - 1
        candidates = starts <= np.partition(starts, few)[few]
        ordered = sorted(zip(starts[candidates].tolist(), request_ids(of_reason[candidates])),
                         key=lambda pair: (pair[0], pair[1] is None, pair[1] or ""))
        examples[reason] = [request_id for _, request_id in ordered[:REJECTED_EXAMPLES_PER_REASON]]
    return by_reason, examples


def client_rows(rows: SpendRows, verdicts: Verdicts) -> list[ClientRow]:
    """Calls per distinct (client, seat)."""
    calls = verdicts.calls & (verdicts.seat >= 0)
    seats = max(len(verdicts.seat_names), 1)
    pair_calls = np.bincount(rows.client_index[calls].astype(np.int64) * seats + verdicts.seat[calls],
                             minlength=len(rows.clients) * seats)
    clients = []
    for pair in np.flatnonzero(pair_calls).tolist():
        fields = rows.clients[pair // seats]
        clients.append(ClientRow(fields.key_alias, fields.team, verdicts.seat_names[pair % seats], fields.user_agent,
                                 fields.client_ip, fields.tags_json, int(pair_calls[pair])))
    return clients


def runaway_rows(rows: SpendRows, verdicts: Verdicts, runaway: np.ndarray, request_ids: RequestIds) -> list[RunawayRow]:
    """The calls ``runaway`` marks (``loads.runaway_mask``), with their sender."""
    picked = np.flatnonzero(verdicts.calls & (verdicts.seat >= 0) & runaway)
    runaways = []
    for row, request_id in zip(picked.tolist(), request_ids(picked)):
        client = rows.clients[rows.client_index[row]]
        runaways.append(RunawayRow(verdicts.seat_names[verdicts.seat[row]], request_id, int(rows.completion_tokens[row]),
                                   client.key_alias, client.team, client.user_id, client.tags_json))
    return runaways
