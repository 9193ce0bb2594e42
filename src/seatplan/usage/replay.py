"""Replaying the window's requests against a seat's KV cache: the blocks in flight at every instant.

The model (``REPLAY_METHOD`` says it in one sentence, docs/usage.md at length):

* a request is in flight on ``[start, end)`` as for the peaks (``loads.py``: ends before starts at equal
  times, clipped to the window); it holds its prompt from its start and its completion tokens arrive at
  an even rate over its duration, so at instant ``t`` it holds ``p + c * (t - start) / (end - start)`` tokens;
* each KV group that grows with tokens (attention layers) holds ``ceil(tokens / block_size)`` blocks;
  the replay counts ``(tokens + block_size - 1) / block_size`` for it, never less than the ceiling, so the
  load stays piecewise linear (two events per request instead of one per block); groups that do not grow
  (Mamba state, the extra block of a sliding window) add a fixed count; no prefix-cache credit, and no
  credit for a sliding window's freed blocks. The seat's load in whole blocks is the floor of the sum
  (plus ``TOLERANCE_BLOCKS`` for double-precision error): an upper bound on what vLLM would have held
  for the same token timeline, by less than one block per group per request in flight.

From that load, per seat: the peak (and when), and for a bounded list of levels the minutes the load was
above each level and the requests that would have waited: those that started in the window at an instant
when the load, they and every request starting at that instant included, was above it. A budget of
``N`` usable blocks holds the window exactly when ``N >= peak``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

import numpy as np

from seatplan.documents.fleet import SeatSpec
from seatplan.documents.fleet_file import resolve_model
from seatplan.documents.usage import KvReplay
from seatplan.engine.settings import EngineHost, engine_settings
from seatplan.errors import SeatplanError
from seatplan.facts.api import load_model_facts
from seatplan.facts.models import ModelFacts
from seatplan.usage.loads import RequestRows
from seatplan.usage.scan import EPOCH

TOLERANCE_BLOCKS = 1e-3  # added before rounding down: double-precision sums of ramps err far less
MAX_LEVELS = 400  # the curve's levels: every ``step`` blocks from 0 to the first at or above the peak
MICROSECONDS_PER_MINUTE = 60_000_000
DEFAULT_BLOCK_SIZE_TOKENS = 16  # vLLM's default block on CUDA for plain attention


@dataclass(frozen=True)
class BlockRule:
    """How many KV blocks a request of ``n`` tokens holds, as the replay counts it:
    ``token_groups * (n + block_size - 1) / block_size + fixed_blocks``."""

    block_size_tokens: int
    token_groups: int
    fixed_blocks: int
    source: str

    def units_per_request(self, prompt_tokens: np.ndarray) -> np.ndarray:
        """The part of a request's blocks fixed at its start, in 1/block_size blocks (exact integers)."""
        return self.token_groups * (prompt_tokens + (self.block_size_tokens - 1)) + self.fixed_blocks * self.block_size_tokens


def default_block_rule(why: str) -> BlockRule:
    return BlockRule(DEFAULT_BLOCK_SIZE_TOKENS, 1, 0, f"assumed: vLLM's default {DEFAULT_BLOCK_SIZE_TOKENS}-token blocks, "
                     f"one attention group ({why})")


def block_rule_of_facts(facts: ModelFacts) -> BlockRule:
    """The rule for a model as vLLM lays out its KV cache (``seatplan.facts``: layer groups and block sizes).

    Attention groups (full, sliding window, chunked local, MLA) grow with tokens; a sliding-window group
    holds one block more than its tokens need (the window may straddle a block), counted without the
    window's cap. Mamba groups hold their fixed state blocks. With several block sizes the smallest is
    used for every attention group, which counts at least as many blocks.
    """
    token_groups = [group for group in facts.layer_groups if group.spec.kind != "mamba"]
    fixed = sum(1 for group in token_groups if group.spec.kind == "sliding_window")
    fixed += sum(group.spec.blocks_per_request(1, 1) for group in facts.layer_groups if group.spec.kind == "mamba")
    block_size = min((group.block_size for group in token_groups), default=facts.block_size)
    kinds = ", ".join(sorted({group.spec.kind for group in facts.layer_groups}))
    return BlockRule(block_size, len(token_groups), fixed,
                     f"model facts: {len(facts.layer_groups)} KV group(s) ({kinds}), {block_size}-token blocks")


def seat_block_rule(seat: SeatSpec, host: EngineHost, base_dir: Path, vllm_version: str) -> BlockRule | None:
    """A fleet seat's rule from its model's facts under its engine settings; the default rule, saying why,
    where the model cannot be read here; None for a seat that is not a vLLM engine."""
    if seat.engine != "vllm" or seat.model is None:
        return None
    try:
        return block_rule_of_facts(load_model_facts(resolve_model(seat.model, base_dir), engine_settings(seat, host, vllm_version)))
    except SeatplanError as problem:
        return default_block_rule(f"the model facts of {seat.model} could not be read: {problem.message}")


@dataclass(frozen=True)
class SeatReplay:
    requests: int
    peak_blocks: int
    peak_at_us: int | None
    level_step_blocks: int
    minutes_above: list[float]
    waited_requests: list[int]

    def document(self, rule: BlockRule) -> KvReplay:
        levels = [index * self.level_step_blocks for index in range(len(self.minutes_above))]
        peak_at = None if self.peak_at_us is None else EPOCH + timedelta(microseconds=self.peak_at_us)
        return KvReplay(block_size_tokens=rule.block_size_tokens, token_groups=rule.token_groups,
                        fixed_blocks_per_request=rule.fixed_blocks, block_rule=rule.source, requests=self.requests,
                        peak_blocks=self.peak_blocks, peak_at=peak_at, level_step_blocks=self.level_step_blocks,
                        levels_blocks=levels, minutes_above=self.minutes_above, waited_requests=self.waited_requests)


def replay_seats(rows: RequestRows, rules: Sequence[BlockRule | None], since_us: int | None,
                 until_us: int | None) -> list[SeatReplay | None]:
    """The replay of each seat with a rule: ``rules[i]`` for ``rows.seat_names[i]``; entries past the rows'
    seats (seats without traffic) get an empty replay; None where the rule is None."""
    start = rows.start_us if since_us is None else np.maximum(rows.start_us, since_us)
    live = rows.included & (rows.end_us > start)
    if until_us is not None:
        live &= start < until_us
    picked = np.flatnonzero(live)
    del live, start
    # One stable sort by seat (a radix sort on small integers); each seat's requests then keep the
    # source's order, which is nearly time order for LiteLLM's table and its exports.
    seat = rows.seat[picked]
    by_seat = picked[np.argsort(seat.astype(np.int16) if len(rules) < 2**15 else seat, kind="stable")]
    counts = np.bincount(seat, minlength=len(rules)).tolist()
    del seat, picked
    replays: list[SeatReplay | None] = []
    offset = 0
    for rule, count in zip(rules, counts):
        chosen = by_seat[offset:offset + count]
        offset += count
        replays.append(None if rule is None else replay_requests(
            rows.start_us[chosen], rows.end_us[chosen], rows.prompt_tokens[chosen], rows.completion_tokens[chosen],
            rule, since_us, until_us))
    return replays


def replay_requests(start_us: np.ndarray, end_us: np.ndarray, prompt_tokens: np.ndarray, completion_tokens: np.ndarray,
                    rule: BlockRule, since_us: int | None, until_us: int | None) -> SeatReplay:
    """One seat's replay, from requests that are all in flight at some instant of the window."""
    count = len(start_us)
    if count == 0:
        return SeatReplay(0, 0, None, 1, [0.0], [0])
    sweep = _Sweep.of(start_us, end_us, prompt_tokens, completion_tokens, rule, since_us, until_us)
    peak_blocks, peak_at_us = sweep.peak()
    step = max(1, math.ceil((peak_blocks + 1) / MAX_LEVELS))
    levels = -(-peak_blocks // step) + 1  # the last level is at or above the peak
    counted = np.ones(count, dtype=bool) if since_us is None else start_us >= since_us  # calls of the window
    waited = sweep.waited(step, levels, counted)
    minutes = sweep.minutes_above(step, levels)
    return SeatReplay(count, peak_blocks, peak_at_us, step, minutes, waited)


def whole_blocks(load: np.ndarray | float) -> np.ndarray:
    return np.floor(np.asarray(load) + TOLERANCE_BLOCKS).astype(np.int64)


@dataclass(frozen=True)
class _Sweep:
    """Every start and end in time order (ends first at equal times), with the load just after each event
    (``after``) and just before it (``before``, the left limit: the ramps have risen since the last event)."""

    time_us: np.ndarray  # int64, absolute
    is_start: np.ndarray
    start_request: np.ndarray  # the request of each start, in event order
    after: np.ndarray  # in 1/block_size blocks (tokens for one group), float
    before: np.ndarray
    block_size: int

    @staticmethod
    def of(start_us: np.ndarray, end_us: np.ndarray, prompt_tokens: np.ndarray, completion_tokens: np.ndarray,
           rule: BlockRule, since_us: int | None, until_us: int | None) -> _Sweep:
        count = len(start_us)
        opened = start_us if since_us is None else np.maximum(start_us, since_us)
        closed = end_us if until_us is None else np.minimum(end_us, until_us)
        first = int(opened.min())
        # Ends (2 * time) sort before starts (2 * time + 1); the stable sort keeps the source's order of ties
        # and runs in about linear time on nearly ordered times. Each per-event value is then one gather of
        # (the starts' values, the ends' values) in that order.
        key = np.empty(2 * count, dtype=np.int64)
        np.subtract(opened, first, out=key[:count])
        np.subtract(closed, first, out=key[count:])
        key <<= 1
        key[:count] += 1
        order = np.argsort(key, kind="stable")
        time_us = key[order]
        del key
        time_us >>= 1
        time_us += first
        is_start = order < count
        start_request = order[is_start]
        # Each event's jump, in 1/block_size blocks: the request's prompt blocks and rounding (integers, summed
        # exactly in doubles), and the completion tokens generated when it entered the window or left it.
        groups = rule.token_groups
        units = rule.units_per_request(prompt_tokens).astype(np.float64)
        completion = completion_tokens.astype(np.float64)
        slope = completion / (end_us - start_us)  # tokens per microsecond
        entering = units if since_us is None else units + groups * (slope * (opened - start_us))
        done_at_close = completion if until_us is None else np.where(closed == end_us, completion, slope * (closed - start_us))
        leaving = units + groups * done_at_close
        del units, completion, done_at_close
        # One gather of (jump, slope change) pairs puts both in event order.
        changes = np.empty((2 * count, 2))
        changes[:count, 0] = entering
        np.negative(leaving, out=changes[count:, 0])
        changes[:count, 1] = slope
        np.negative(slope, out=changes[count:, 1])
        del entering, leaving, slope
        changes = changes[order]
        del order
        jump = changes[:, 0]
        slope_after = np.cumsum(changes[:, 1])
        # Between events the ramps rise by the slope of the requests in flight times the gap.
        after = np.zeros(len(time_us))
        np.multiply(slope_after[:-1], np.diff(time_us), out=after[1:])
        del slope_after, changes
        if groups != 1:
            after *= groups
        after += jump
        np.cumsum(after, out=after)
        before = after - jump
        return _Sweep(time_us, is_start, start_request, after, before, rule.block_size_tokens)

    def peak(self) -> tuple[int, int]:
        """The highest load in whole blocks, and the first instant it was reached (or approached, for a
        left limit: the ramps' top is at their end)."""
        at_after, at_before = int(np.argmax(self.after)), int(np.argmax(self.before))
        at = at_after if self.after[at_after] >= self.before[at_before] else at_before
        return int(whole_blocks(max(self.after[at_after], self.before[at_before]) / self.block_size)), int(self.time_us[at])

    def waited(self, step: int, levels: int, counted: np.ndarray) -> list[int]:
        """Per level, the counted requests whose start saw a load above it (all events at that instant done).

        ``counted`` is per request, in the order the requests were given."""
        starts = np.flatnonzero(self.is_start)[counted[self.start_request]]
        # Requests starting at the same instant see each other (ends sort first): a start followed by an
        # event at its instant (rare) reads the load after the last of them.
        last = starts.copy()
        following = np.minimum(starts + 1, len(self.time_us) - 1)
        tied = np.flatnonzero((following > starts) & (self.time_us[following] == self.time_us[starts]))
        last[tied] = np.searchsorted(self.time_us, self.time_us[starts[tied]], side="right") - 1
        seen = whole_blocks(self.after[last] / self.block_size)
        # A load of ``seen`` blocks is above the levels 0, step, ..., below ceil(seen / step) * step.
        above = np.minimum(-(-seen // step), levels)
        per_count = np.bincount(above, minlength=levels + 1)
        return [int(value) for value in (per_count[::-1].cumsum()[::-1])[1:]]

    def minutes_above(self, step: int, levels: int) -> list[float]:
        """Per level X, the minutes the whole-block load was above X: the measure of ``load >= X + 1 - tol``.

        Between two events the load is linear, from ``after[i]`` to ``before[i + 1]``; each such piece adds
        its whole length to the levels below its low end and the part above the level to those in between.
        """
        low_end = np.minimum(self.after[:-1], self.before[1:])
        high_end = np.maximum(self.after[:-1], self.before[1:])
        length_us = np.diff(self.time_us).astype(np.float64)
        offset = 1.0 - TOLERANCE_BLOCKS  # level X is exceeded where load >= X + offset (in blocks)

        def last_level_below(load: np.ndarray) -> np.ndarray:
            """The highest level whose threshold is at or below the load (-1: none), as floats."""
            level = load / self.block_size
            level -= offset
            level /= step
            np.floor(level, out=level)
            return np.clip(level, -1, levels - 1, out=level)

        full_to = last_level_below(low_end)  # levels 0..full_to hold the whole piece
        measure = np.bincount((full_to + 1).astype(np.int64), weights=length_us, minlength=levels + 1)
        measure = measure[::-1].cumsum()[::-1][1:]
        partial_to = last_level_below(high_end)
        # Pieces crossing a level's threshold hold it for their part above; most cross one level, a few more.
        crossing = np.flatnonzero(partial_to > full_to)
        crossed = 1
        while len(crossing):
            level = full_to[crossing] + crossed
            high = high_end[crossing]
            share = (high - (level * step + offset) * self.block_size) / (high - low_end[crossing])
            measure += np.bincount(level.astype(np.int64), weights=length_us[crossing] * np.clip(share, 0.0, 1.0), minlength=levels)
            crossing = crossing[partial_to[crossing] > level]
            crossed += 1
        return [round(value / MICROSECONDS_PER_MINUTE, 6) for value in measure.tolist()]
