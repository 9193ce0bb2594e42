"""What the boots of one seat say is wrong, each with the fix (pure).

* **co-boot race**: a seat sized by ``--gpu-memory-utilization`` whose KV or non-torch figure moved between
  its boots (by at least 0.5 GiB) and whose boot overlapped a boot of another engine on the same GPU (by the plan or fleet; without one, engines in the same log file are assumed to
  share it, and the finding says so). vLLM reads free memory device-wide while it profiles, so a neighbour
  loading or freeing memory at the same time lands in this seat's budget (VLLM.md §3).
* **KV drift**: the same seat's KV or non-torch figure moves between whole boots but no overlapping boot
  of another engine is in the logs given: the same pin, without claiming the cause. Fragments (a log
  excerpt with no start of the engine) are never compared. The fix is to pin
  ``--kv-cache-memory-bytes``: the plan's figure when a plan is given, else the planner's rule (one
  max-length request × the KV factor, rounded up to the policy step) when the model's config is
  readable here, else the largest KV the seat actually got, rounded *down* to 0.5 GiB. That boot is the one least disturbed by neighbours
  loading (the others had memory taken from them), and rounding down keeps the pin within what the
  GPU has already shown it can give.
* **context cut**: the engine shortened the context (auto-fit), refused it (not enough KV for one
  request), or holds less than one full-length request.
* **no KV bytes flag**: vLLM older than 0.10.2 has no ``--kv-cache-memory-bytes``.
* **boot failed**: the other start-up errors, with vLLM's own remedy in seatplan's words.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta

from seatplan import versions as vllm_versions
from seatplan.documents.fleet import DEFAULT_ROUNDING_STEP_BYTES
from seatplan.documents.observed import Boot, Finding
from seatplan.units import GiB, format_gib

# Boot-to-boot drift below this is the 2-decimal rounding and allocator noise, not a race.
RACE_SPREAD_BYTES = GiB // 2
PIN_STEP_BYTES = DEFAULT_ROUNDING_STEP_BYTES  # suggested pins follow the plan's rounding step
KV_BYTES_FLAG_SINCE = vllm_versions.since("kv_bytes_flag")


def version_tuple(version: str) -> tuple[int, ...]:
    return vllm_versions.try_release(version) or ()


def seat_findings(seat: str, boots: list[Boot], *, planned_kv_bytes: int | None = None,
                  rule_pin: tuple[int, str] | None = None, neighbours: Sequence[Boot] = (),
                  neighbours_basis: str = "") -> list[Finding]:
    findings: list[Finding] = []
    if race := co_boot_race(seat, boots, planned_kv_bytes=planned_kv_bytes, rule_pin=rule_pin, neighbours=neighbours,
                            neighbours_basis=neighbours_basis):
        findings.append(race)
    findings.extend(context_cuts(seat, boots))
    if old := old_engine(seat, boots):
        findings.append(old)
    findings.extend(failed_boots(seat, boots))
    return findings


def _trail(values: list[int]) -> str:
    return " → ".join(format_gib(value) for value in values) + " GiB"


# Two boots overlap when one starts before the other's last start-up line (plus clock slack between hosts' logs).
OVERLAP_SLACK = timedelta(seconds=60)


def overlapping(mine: Boot, other: Boot) -> bool:
    if mine.started_at is None or other.started_at is None or mine.fragment or other.fragment:
        return False
    mine_end, other_end = mine.ended_at or mine.started_at, other.ended_at or other.started_at
    return mine.started_at <= other_end + OVERLAP_SLACK and other.started_at <= mine_end + OVERLAP_SLACK


def co_boot_race(seat: str, boots: list[Boot], *, planned_kv_bytes: int | None = None,
                 rule_pin: tuple[int, str] | None = None, neighbours: Sequence[Boot] = (),
                 neighbours_basis: str = "") -> Finding | None:
    """A race needs evidence: this seat's util-sized boot overlapping a boot of another engine on its GPU.

    KV that moves between whole boots without such an overlap in the logs given is reported as drift
    (same pin, weaker claim). Fragments (no start in the log) are never compared.
    """
    sized = [boot for boot in boots if boot.sized_by == "utilization" and boot.available_kv_bytes is not None
             and not boot.fragment]
    races = [(mine, other) for mine in sized for other in neighbours if other.seat != seat and overlapping(mine, other)]
    kv = [boot.available_kv_bytes for boot in sized if boot.available_kv_bytes is not None]  # all of them: sized filtered
    non_torch = [boot.non_torch_bytes for boot in sized if boot.non_torch_bytes is not None]
    kv_spread = max(kv) - min(kv) if kv else 0
    non_torch_spread = max(non_torch) - min(non_torch) if len(non_torch) >= 2 else 0
    moved_between_boots = len(sized) >= 2 and (kv_spread >= RACE_SPREAD_BYTES or non_torch_spread >= RACE_SPREAD_BYTES)
    # A race needs a figure that moved: an overlap after which KV and non-torch came out the same did no harm.
    if not moved_between_boots:
        return None
    evidence = [f"{boot.source}: KV {format_gib(kv_bytes)} GiB"
                + (f", non-torch {format_gib(boot.non_torch_bytes)} GiB" if boot.non_torch_bytes is not None else "")
                for boot, kv_bytes in zip(sized, kv)]
    evidence += [f"{mine.source} booted while {other.seat} booted ({other.source}, {other.engine}){neighbours_basis}"
                 for mine, other in races]
    if planned_kv_bytes is not None:
        pin, why = planned_kv_bytes, "the plan's KV budget for this seat"
    elif rule_pin is not None:
        pin, why = rule_pin
        if pin > max(kv):
            why += f"; more than the {format_gib(max(kv))} GiB it ever got, so re-plan before pinning"
    else:
        pin = max(kv) // PIN_STEP_BYTES * PIN_STEP_BYTES
        why = "the largest KV it got, rounded down to 0.5 GiB"
    # Only the figures that moved are named as moving (a race's evidence must agree with itself).
    parts = ([f"non-torch {_trail(non_torch)}"] if non_torch_spread >= RACE_SPREAD_BYTES else []) \
        + ([f"KV went {_trail(kv)}"] if kv_spread >= RACE_SPREAD_BYTES else [])
    moved = " while ".join(parts)
    if races:
        others = sorted({other.seat for _, other in races})
        message = (f"{seat}: sized by --gpu-memory-utilization and booted while {', '.join(others)} booted on the same GPU"
                   + (f" ({moved})" if len(sized) >= 2 else "") + ": vLLM counted the neighbour's loading as its own memory")
        kind = "co_boot_race"
    else:
        message = (f"{seat}: KV size moves from boot to boot ({moved}) while sized by --gpu-memory-utilization; no boot of "
                   "another engine overlapping its boots is in the logs given, so the cause is not shown (pass the "
                   "neighbours' logs, and --fleet for who shares its GPU)")
        kind = "kv_drift"
    return Finding(
        kind=kind, seat=seat, message=message,
        fix=f"pin --kv-cache-memory-bytes {pin} ({format_gib(pin)} GiB, {why}) so every boot gets the same KV "
            "whatever the neighbours do; keep --gpu-memory-utilization only low enough to pass vLLM's free-memory check",
        pin_kv_cache_memory_bytes=pin, evidence=evidence,
    )


def context_cuts(seat: str, boots: list[Boot]) -> list[Finding]:
    findings = []
    for boot in boots:
        if boot.max_model_len_before_auto_fit is not None:
            findings.append(Finding(
                kind="context_cut", seat=seat,
                message=f"{seat}: vLLM cut max_model_len from {boot.max_model_len_before_auto_fit} to {boot.max_model_len} to fit its KV cache",
                fix="give the seat more KV bytes or ask for the shorter context explicitly (--max-model-len) so clients see it",
                evidence=[boot.source]))
        for error in boot.errors:
            if error.kind == "not_enough_kv_cache":
                estimate = f"; vLLM estimates {error.estimated_max_model_len} fits" if error.estimated_max_model_len else ""
                findings.append(Finding(
                    kind="context_cut", seat=seat,
                    message=f"{seat}: the KV cache cannot hold one request of {error.max_model_len} tokens{estimate}; the engine did not start",
                    fix=(f"raise --kv-cache-memory-bytes to at least {error.needed_kv_bytes} (+ one block) or lower --max-model-len"
                         if error.needed_kv_bytes else "raise the KV budget or lower --max-model-len"),
                    evidence=[error.where]))
        if boot.max_concurrency is not None and boot.max_concurrency < 1 and not boot.errors:
            findings.append(Finding(
                kind="context_cut", seat=seat,
                message=f"{seat}: the KV cache holds {boot.max_concurrency}x of a full {boot.concurrency_max_model_len}-token request",
                fix="raise the KV budget or lower --max-model-len so one full-length request fits",
                evidence=[boot.source]))
    return findings


def old_engine(seat: str, boots: list[Boot]) -> Finding | None:
    versions = sorted({boot.version for boot in boots if boot.version})
    old = [v for v in versions if version_tuple(v) and version_tuple(v) < KV_BYTES_FLAG_SINCE]
    if not old:
        return None
    return Finding(
        kind="no_kv_bytes_flag", seat=seat,
        message=f"{seat}: vLLM {', '.join(old)} has no --kv-cache-memory-bytes (first in 0.10.2); its KV size depends on what else is on the GPU",
        fix="upgrade to vLLM ≥ 0.10.2 and pin --kv-cache-memory-bytes; until then boot the seats one at a time (staggered), "
            "each after the previous reported its KV cache size",
        evidence=[boot.source for boot in boots if boot.version in old])


_FAILURE_FIX = {
    "free_memory_below_utilization": "the GPU had less free memory than --gpu-memory-utilization asks for at start: lower the "
                                     "utilisation (it is a per-instance budget) or start this seat before its neighbours",
    "no_kv_memory": "weights and activations left no room for KV: pin --kv-cache-memory-bytes, raise the utilisation or move the seat",
    "max_model_len_above_derived": "--max-model-len exceeds the model's own limit: lower it (or add RoPE scaling deliberately)",
    "profiling_free_memory_changed": "another process freed GPU memory while this one profiled (a co-boot race): "
                                     "pin --kv-cache-memory-bytes or stagger the boots",
    "engine_failed": "read the lines above the failure; seatplan found no sizing error it knows",
}


def failed_boots(seat: str, boots: list[Boot]) -> list[Finding]:
    findings = []
    for boot in boots:
        for error in boot.errors:
            if error.kind == "not_enough_kv_cache" or (error.kind == "engine_failed" and len(boot.errors) > 1):
                continue
            message = f"{seat}: boot failed: {error.message}"
            if error.kind == "engine_failed" and boot.available_kv_bytes is not None and boot.available_kv_bytes <= 0:
                message = f"{seat}: boot failed with {format_gib(boot.available_kv_bytes)} GiB available for KV"
                fix = _FAILURE_FIX["no_kv_memory"]
            else:
                fix = _FAILURE_FIX[error.kind]
            findings.append(Finding(kind="boot_failed", seat=seat, message=message, fix=fix, evidence=[error.where]))
    return findings
