"""``seatplan upgrade-check``: what changes for a plan, seat by seat, if its engines move to another vLLM.

Two sources: the facts stage's prediction at both versions (block size, block count, the "KV cache
size" figure, the derived context, whether the pinned KV still holds one full-length request) and the
version table's behaviour and flag rows that differ between the two versions.
"""

from __future__ import annotations

from pathlib import Path

from seatplan import versions
from seatplan.documents.plan import Plan, PlannedVllmSeat
from seatplan.engine.command import engine_command, unsupported_flags
from seatplan.errors import SeatplanError
from seatplan.facts.models import ModelFacts
from seatplan.verify.expect import FactsLoader, seat_facts
from seatplan.verify.models import UpgradeChange, UpgradeReport, Value

ALL_SEATS = "*"
# Table rows shown once for the whole plan. KV layout, context and log rows are not listed on their own:
# their effect on each seat is already in that seat's predicted figures.
PLAN_WIDE_AREAS = ("memory", "metrics", "output")
ROPE_KEYS = ("rope_parameters", "rope_scaling")


def upgrade_report(plan: Plan, fleet_dir: Path, facts_loader: FactsLoader,
                   to_version: str) -> UpgradeReport:
    now_version, after_version = plan.inputs.vllm_version, to_version
    old, new = versions.modelled(now_version), versions.modelled(after_version)
    changes: list[UpgradeChange] = []
    seats = [seat for seat in plan.vllm_seats() if seat.launch is not None]
    for seat in seats:
        changes += seat_changes(seat, fleet_dir, facts_loader, now_version, after_version)
    changes += behaviour_rows(old, new, any(seat.max_new_tokens for seat in seats))
    changed = {change.seat for change in changes}
    return UpgradeReport(plan_version=now_version, to_version=after_version, changes=changes,
                         unchanged_seats=[seat.name for seat in seats if seat.name not in changed])


def seat_changes(seat: PlannedVllmSeat, fleet_dir: Path, facts_loader: FactsLoader,
                 now_version: str, after_version: str) -> list[UpgradeChange]:
    command = engine_command(seat.launch) if seat.launch is not None else []
    changes = [UpgradeChange(seat=seat.name, what="flag", now="accepted", after=problem, area="flags")
               for problem in unsupported_flags(command, after_version)]
    changes += rope_key_changes(seat, after_version)
    kv_bytes, length = seat.kv_cache_memory_bytes, seat.max_model_len
    if kv_bytes is None or length is None:
        return changes
    try:
        now = seat_facts(seat, now_version, fleet_dir, facts_loader)
        after = seat_facts(seat, after_version, fleet_dir, facts_loader)
    except SeatplanError as error:
        return changes + [UpgradeChange(seat=seat.name, what="prediction", now=None, after=None, area="kv",
                                        note=f"no prediction: {error.message}")]
    return changes + kv_changes(seat, kv_bytes, length, now, after)


def kv_changes(seat: PlannedVllmSeat, kv_bytes: int, length: int, now: ModelFacts, after: ModelFacts) -> list[UpgradeChange]:
    """The predicted figures of this seat's pinned KV cache (``kv_bytes``) at its context (``length``) that differ
    between the versions."""
    before, later = now.capacity(kv_bytes, length), after.capacity(kv_bytes, length)
    rows: list[tuple[str, Value, Value, str, str]] = [
        ("block_size", now.block_size, after.block_size, "kv", ""),
        ("num_gpu_blocks", before.num_blocks, later.num_blocks, "kv", ""),
        ("kv_cache_size_tokens", before.kv_cache_tokens, later.kv_cache_tokens, "log",
         "the \"KV cache size\" figure vLLM prints and exposes"),
        ("max_concurrency", round(before.max_concurrency, 2), round(later.max_concurrency, 2), "kv",
         f"full-length ({length:,}-token) requests the pinned KV holds at once"),
        ("boots", before.fits_one_request, later.fits_one_request, "kv",
         f"the pinned KV holds one {length:,}-token request (else vLLM refuses to start)"),
        ("derived_max_model_len", now.max_context_derived, after.max_context_derived, "context", _long_len_note(seat, after)),
    ]
    return [UpgradeChange(seat=seat.name, what=what, now=was, after=will, area=area, note=note)
            for what, was, will, area, note in rows if was != will]


def rope_key_changes(seat: PlannedVllmSeat, after_version: str) -> list[UpgradeChange]:
    """YaRN switched on through ``--hf-overrides`` under the key the new version no longer reads."""
    overrides = (seat.launch.hf_overrides if seat.launch else None) or {}
    used = next((key for key in ROPE_KEYS if key in overrides), None)
    wanted = ROPE_KEYS[0] if versions.has("hf_overrides_rope_parameters", versions.modelled(after_version)) else ROPE_KEYS[1]
    if used is None or used == wanted:
        return []
    return [UpgradeChange(seat=seat.name, what="hf_overrides_rope_key", now=used, after=wanted, area="context",
                          note=f"re-plan for the new version: its --hf-overrides must say {wanted} or YaRN stays off")]


def _long_len_note(seat: PlannedVllmSeat, after: ModelFacts) -> str:
    length = seat.max_model_len or 0
    if length > after.max_context_derived and seat.env.get("VLLM_ALLOW_LONG_MAX_MODEL_LEN") != "1":
        return f"--max-model-len {length:,} exceeds it: vLLM refuses to start without VLLM_ALLOW_LONG_MAX_MODEL_LEN=1"
    return ""


def behaviour_rows(old: versions.Version, new: versions.Version, has_caps: bool) -> list[UpgradeChange]:
    """The table's behaviour rows that differ, for the whole plan (output rows only when a seat has a cap)."""
    rows = []
    for row in versions.behaviour_changes(old, new):
        if row.area not in PLAN_WIDE_AREAS or (row.key == "override_cap_is_ceiling" and not has_caps):
            continue
        rows.append(UpgradeChange(seat=ALL_SEATS, what=row.key, now=row.holds if row.at(old) else row.otherwise,
                                  after=row.holds if row.at(new) else row.otherwise, area=row.area, note=row.source))
    return rows
