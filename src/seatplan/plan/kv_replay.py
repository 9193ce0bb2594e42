"""Beyond the rule: the usage stage's replay of the window's requests, read at a seat's planned KV cache.

The usage document carries, per seat, a curve that does not depend on the budget (``models.<name>.kv_replay``:
for levels of whole KV blocks, the minutes the replayed load was above each and the calls that started
while it was). Here it is read at the seat's planned usable blocks, ``num_blocks - 1`` (vLLM's block pool
sets one null block aside): exactly at a level of the curve, else at the level just below, which can only
overstate (both figures fall as the level rises). The smallest KV that held the window is the peak plus the
null block, in bytes per block, and never below what one max-length request needs for vLLM to start.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from seatplan.documents.fleet import Policy
from seatplan.documents.plan import ExplanationLine, KvReplayReading
from seatplan.documents.usage import KvReplay
from seatplan.facts.models import KvCapacity, ModelFacts
from seatplan.units import human_bytes

RULE = "kv_replay"


@dataclass
class ReplayCheck:
    """The replay read at a seat's KV: the typed reading (None when absent or not comparable) and its words."""

    reading: KvReplayReading | None = None
    lines: list[ExplanationLine] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


def counts_enough(replay: KvReplay, facts: ModelFacts, max_model_len: int) -> bool:
    """Whether the replay counted this seat's blocks: the same block size, and never fewer blocks per request
    than vLLM holds for this model (checked at the lengths where a count can fall short: one token, one
    block and one more, the longest request)."""
    size = replay.block_size_tokens
    if size != facts.block_size:
        return False
    for tokens in (1, size, size + 1, max_model_len):
        counted = replay.token_groups * (tokens + size - 1) + replay.fixed_blocks_per_request * size
        if counted < facts.blocks_per_request(tokens) * size:
            return False
    return True


def replay_check(seat_name: str, replay: KvReplay | None, facts: ModelFacts, capacity: KvCapacity,
                 rule_kv_bytes: int, policy: Policy) -> ReplayCheck:
    """The replay's figures at the planned KV, and the smallest KV that would have held the window."""
    if replay is None:
        return ReplayCheck()
    if not counts_enough(replay, facts, capacity.max_model_len):
        note = (f"the usage stage counted {replay.block_size_tokens}-token blocks in {replay.token_groups} group(s) "
                f"({replay.block_rule}); this seat's engine uses {facts.block_size}-token blocks in "
                f"{len(facts.layer_groups)} group(s)")
        return ReplayCheck(None, [ExplanationLine(rule=RULE, inputs={"replay_block_size": replay.block_size_tokens, "block_size": facts.block_size},
                                                  result="not comparable", note=note)],
                           [f"{seat_name}: KV replay not used: {note}; run `seatplan usage --fleet` with this fleet"])
    usable_blocks = capacity.num_blocks - 1
    level = min(usable_blocks // replay.level_step_blocks, len(replay.levels_blocks) - 1) if usable_blocks >= 0 else 0
    holds = usable_blocks >= replay.peak_blocks
    minutes = 0.0 if holds else replay.minutes_above[level]
    waited = 0 if holds else replay.waited_requests[level]
    exact = holds or replay.levels_blocks[level] == usable_blocks
    peak_bytes = (replay.peak_blocks + 1) * facts.bytes_per_block
    one_request_bytes = facts.min_kv_cache_bytes(capacity.max_model_len)
    needed_bytes = max(peak_bytes, one_request_bytes)
    why = ("the peak plus the null block" if peak_bytes >= one_request_bytes
           else f"one {capacity.max_model_len:,}-token request, which vLLM needs to start (the peak needs less)")
    rounded_bytes = policy.rule_kv_bytes(peak_bytes, one_request_bytes, factor=1.0)  # the rule's rounding, factor 1
    bound = "" if exact else f"at most (read at the curve's level {replay.levels_blocks[level]:,}) "
    peak_at = replay.peak_at.isoformat(sep=" ", timespec="seconds") if replay.peak_at else "-"
    if holds:
        result = f"holds the window: peak {replay.peak_blocks:,} of {usable_blocks:,} usable blocks ({peak_at})"
    else:
        result = (f"{usable_blocks:,} usable blocks < peak {replay.peak_blocks:,} ({peak_at}): {bound}{minutes:,.2f} min "
                  f"above the budget, {waited:,} request(s) would have waited")
    reading = KvReplayReading(
        kv_cache_memory_bytes=capacity.kv_cache_memory_bytes, num_blocks=capacity.num_blocks, usable_blocks=usable_blocks,
        peak_blocks=replay.peak_blocks, peak_at=peak_at, minutes_above=minutes, waited_requests=waited, exact=exact,
        smallest_kv_bytes=needed_bytes, smallest_kv_bytes_rounded=rounded_bytes, rule_kv_bytes=rule_kv_bytes,
    )
    line = ExplanationLine(
        rule=RULE,
        inputs={
            "kv_cache_memory_bytes": capacity.kv_cache_memory_bytes, "num_blocks": capacity.num_blocks,
            "usable_blocks": usable_blocks, "bytes_per_block": facts.bytes_per_block,
            "block_size": replay.block_size_tokens, "requests": replay.requests, "peak_blocks": replay.peak_blocks,
            "peak_at": peak_at, "minutes_above": minutes, "waited_requests": waited, "exact": exact,
            "smallest_kv_bytes": needed_bytes, "smallest_kv_bytes_rounded": rounded_bytes, "rule_kv_bytes": rule_kv_bytes,
        },
        result=result,
        note=(f"smallest KV that held the window: {needed_bytes:,} B ({human_bytes(needed_bytes)}; "
              f"{human_bytes(rounded_bytes)} rounded up: {why}) beside the rule's {human_bytes(rule_kv_bytes)}. "
              f"Replay: {replay.requests:,} requests, prompt at start, completion evenly to the end, rounded up to "
              f"blocks per request, no prefix-cache credit (an upper bound); {replay.block_rule}"),
    )
    warnings = [] if holds else [
        f"{seat_name}: the window's requests, replayed, needed up to {replay.peak_blocks:,} blocks; the planned "
        f"{usable_blocks:,} would have been exceeded for {bound}{minutes:,.2f} min and {waited:,} request(s) would have "
        f"waited; {human_bytes(rounded_bytes)} of KV would have held it"]
    return ReplayCheck(reading, [line], warnings)
