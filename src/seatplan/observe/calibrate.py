"""Observed footprints per seat, the per-GPU report, and the plateau check against a plan (pure).

A seat's footprint at plateau comes, best first, from per-process readings
(``nvidia-smi --query-compute-apps``; the process ids are the ones its boots logged) or from the step
its own restart made on its GPU: the GPU's plateau after the restart minus the lowest reading while
the seat was down. The plateau check reads the plan (``documents.plan.Plan``): each GPU's ``used_bytes``,
``reserved_bytes``, ``spare_bytes`` and ``seats``, and each seat's ``footprint_bytes``; attributing a restart's
step needs only which seat runs where (``seatmap.SeatMap``, from the plan or the fleet file).
"""

from __future__ import annotations

from collections import defaultdict
from datetime import datetime, timedelta

import numpy as np

from seatplan.documents.observed import (
    Boot,
    Finding,
    GpuCorrection,
    GpuReport,
    GpuVerdict,
    ObservedSeat,
    PlanCheck,
    ProcessSample,
)
from seatplan.documents.plan import Plan, PlannedGpu, PlannedSeat
from seatplan.observe.detect import Analysis, DetectSettings, GpuSeries
from seatplan.observe.seatmap import SeatMap, on_gpu
from seatplan.units import MiB

# A restart's step must start this close to a boot the seat's log shows (log clocks are minutes apart at most).
STEP_MATCH = timedelta(minutes=20)
# A seat's dip may exceed what its weights/KV/graph lines say by this much (activations, NCCL, context, creep).
OWN_LINES_SLACK = 0.25
OWN_LINES_SLACK_BYTES = 4 * 1024 * MiB
# Observed and planned footprints closer than this agree (allocator noise, log rounding).
FOOTPRINT_TOLERANCE_MIB = 256.0
FOOTPRINT_TOLERANCE_SHARE = 0.02


def planned_gpu(plan: Plan, host: str | None, index: int) -> PlannedGpu | None:
    """The plan's GPU a history of GPU ``index`` on ``host`` is of (``seatmap.on_gpu``), or None."""
    hosts = {gpu.host for gpu in plan.gpus}
    return next((gpu for gpu in plan.gpus if on_gpu(gpu.host, gpu.index, host, index, hosts)), None)


def planned_seats(plan: Plan, gpu: PlannedGpu) -> list[PlannedSeat]:
    return [seat for seat in (plan.seat(name) for name in gpu.seats) if seat is not None]


def verdicts(plan: Plan, reports: list[GpuReport]) -> list[GpuVerdict]:
    """Pass/fail per planned GPU; a GPU no history matched is 'unchecked', never a silent pass."""
    out = []
    plan_hosts = {gpu.host for gpu in plan.gpus}
    for gpu in plan.gpus:
        matched = [report for report in reports if report.plan is not None
                   and on_gpu(gpu.host, gpu.index, report.host, report.index, plan_hosts)]
        spare = gpu.spare_bytes / MiB
        if not matched:
            seen = sorted({str(report.host) for report in reports})
            out.append(GpuVerdict(host=gpu.host, index=gpu.index, status="unchecked", planned_spare_mib=spare,
                                  reason=f"no GPU history matched {gpu.host}:{gpu.index} (histories from: {', '.join(seen) or 'none'}); "
                                         "name the host's monitor names in the fleet (hosts[].monitor_names) or pass --host-name MONITOR=HOST"))
            continue
        check = matched[0].plan
        assert check is not None  # matched keeps only reports with a plan check
        # Pass: the plateau left the spare the plan promised (within the footprint tolerance).
        short_mib = check.planned_spare_mib - check.observed_spare_mib
        held = short_mib <= FOOTPRINT_TOLERANCE_MIB
        out.append(GpuVerdict(host=gpu.host, index=gpu.index, status="pass" if held else "fail",
                              planned_spare_mib=check.planned_spare_mib, observed_spare_mib=check.observed_spare_mib,
                              plateau_uncertainty_mib=matched[0].plateau_uncertainty_mib,
                              straddles=_straddles(check, matched[0]),
                              reason=f"observed spare {check.observed_spare_mib:,.0f} MiB at plateau against {check.planned_spare_mib:,.0f} MiB planned"
                                     + ("" if held else f": {short_mib:,.0f} MiB short"
                                        + ("" if check.spare_held else ", the GPU's memory overran"))
                                     + _uncertainty_note(check, matched[0])))
    return out


def _straddles(check: PlanCheck, report: GpuReport) -> bool:
    """The observed spare's ± band (widened downwards by what the creep may still add) crosses the verdict's line:
    the planned spare less the footprint tolerance, so the verdict could go either way."""
    band = report.plateau_uncertainty_mib or 0.0
    to_come = report.still_to_rise_mib or 0.0
    line = check.planned_spare_mib - FOOTPRINT_TOLERANCE_MIB
    return check.observed_spare_mib - band - to_come < line <= check.observed_spare_mib + band


def _uncertainty_note(check: PlanCheck, report: GpuReport) -> str:
    band = report.plateau_uncertainty_mib
    notes = []
    if band is not None:
        notes.append(f"± {band:,.0f} MiB")
    if report.still_to_rise_mib:
        notes.append(f"the creep may still add {report.still_to_rise_mib:,.0f} MiB")
    if report.creep is not None and not report.creep.levelled_off:
        notes.append("still rising at the history's end: the spare can only shrink")
    note = f" ({'; '.join(notes)})" if notes else ""
    if _straddles(check, report):
        note += ": the uncertainty straddles the planned spare, so the verdict could go either way; keep more history and re-check"
    return note


def plateau_of(values: np.ndarray) -> float:
    """The level of a run of readings once it settled: the median of the last quarter (at least 3 readings)."""
    tail = values[-max(3, len(values) // 4):]
    return float(np.median(tail))


def kv_ran_with(boots: list[Boot], seat: str) -> int | None:
    """The KV bytes the seat's latest ready boot had (pinned, else what profiling gave it)."""
    ready = [b for b in boots if b.seat == seat and b.ready and b.available_kv_bytes is not None]
    ready.sort(key=lambda b: b.started_at.timestamp() if b.started_at else 0.0)
    return ready[-1].available_kv_bytes if ready else None


def footprints_from_processes(boots: list[Boot], processes: list[ProcessSample]) -> dict[str, ObservedSeat]:
    seat_of_pid = {pid: boot.seat for boot in boots for pid in boot.pids}
    readings: dict[int, list[tuple[datetime | None, float]]] = defaultdict(list)
    for sample in processes:
        if sample.pid in seat_of_pid:
            readings[sample.pid].append((sample.at, sample.used_mib))
    per_seat: dict[str, list[tuple[int, float, int]]] = defaultdict(list)
    for pid, values in readings.items():
        ordered = [used for _, used in sorted(values, key=lambda item: item[0].timestamp() if item[0] else 0.0)]
        per_seat[seat_of_pid[pid]].append((pid, plateau_of(np.array(ordered)), len(ordered)))
    out = {}
    for seat, ranks in per_seat.items():
        # Tensor-parallel ranks each hold a share; the plan's footprint is per GPU, so the largest rank counts.
        pid, used_mib, _ = max(ranks, key=lambda rank: rank[1])
        out[seat] = ObservedSeat(footprint_bytes=int(round(used_mib * MiB)),
                                  source=f"nvidia-smi compute-apps, pid {pid} ({len(ranks)} process(es))",
                                  samples=sum(rank[2] for rank in ranks), kv_cache_memory_bytes=kv_ran_with(boots, seat))
    return out


def own_lines_bytes(boot: Boot) -> int | None:
    """What the seat's own start-up lines account for on one GPU: weights + KV + CUDA graphs."""
    if boot.weights_bytes is None or boot.available_kv_bytes is None:
        return None
    return boot.weights_bytes + max(boot.available_kv_bytes, 0) + (boot.cuda_graph_bytes or boot.cuda_graph_estimate_bytes or 0)


def footprints_from_steps(boots: list[Boot], gpus: list[tuple[GpuSeries, Analysis]], seat_map: SeatMap | None,
                          settings: DetectSettings) -> dict[str, ObservedSeat]:
    """A seat's restart shows as a dip to the level without it; its footprint is plateau − that level.

    Only with evidence that the dip is that seat alone: its boot at the step, and either it is the only seat
    the plan puts on the GPU, or its own weights/KV lines account for the dip (within OWN_LINES_SLACK). A
    dip to near zero on a GPU with several seats is all of them restarting: kept at GPU level.
    """
    out: dict[str, ObservedSeat] = {}
    for series, analysis in gpus:
        planned_here = set(seat_map.seats_on(series.host, series.index)) if seat_map else None
        for number, step in enumerate(analysis.steps):
            near = [boot for boot in boots
                    if boot.started_at is not None and not boot.fragment and abs(boot.started_at - step.at) <= STEP_MATCH
                    and (planned_here is None or boot.seat in planned_here)]
            seats = {boot.seat for boot in near}
            if len(seats) != 1 or number + 1 >= len(analysis.segments):
                continue
            start = step.at.timestamp()
            window = (series.times_s >= start - 60) & (series.times_s <= start + STEP_MATCH.total_seconds())
            readings = series.used_mib[window]
            readings = readings[~np.isnan(readings)]
            if len(readings) == 0 or series.window_s is not None:
                continue  # averaged history: the dip's floor is not a reading
            floor = float(readings.min())
            segment = analysis.segments[number + 1]
            if floor > min(step.before_mib, step.after_mib) - settings.min_step_mib:
                continue  # the dip was not sampled: the seat's own share cannot be told apart
            seat = seats.pop()
            dip_bytes = int(round((segment.plateau_used_mib - floor) * MiB))
            if planned_here is not None and len(planned_here) > 1:
                own = max((own_lines_bytes(boot) or 0) for boot in near)
                if not own or dip_bytes > own * (1 + OWN_LINES_SLACK) + OWN_LINES_SLACK_BYTES:
                    continue  # more than its own lines account for: neighbours restarted too; GPU level
            inside = (series.times_s >= segment.start.timestamp()) & (series.times_s <= segment.end.timestamp())
            out[seat] = ObservedSeat(footprint_bytes=dip_bytes,
                                      source=f"restart step on GPU {series.index} at {step.at.isoformat()}",
                                      samples=int(np.count_nonzero(inside)), kv_cache_memory_bytes=kv_ran_with(boots, seat))
    return out


def gpu_corrections(reports: list[GpuReport], plan: Plan, observed: dict[str, ObservedSeat]) -> list[GpuCorrection]:
    """Per planned GPU: plateau − reserved − Σ its seats' footprints (observed where attributed, else planned)."""
    corrections = []
    for report in reports:
        plan_gpu = planned_gpu(plan, report.host, report.index)
        seats = planned_seats(plan, plan_gpu) if plan_gpu is not None else []
        if plan_gpu is None or not seats:
            continue
        accounted = sum(observed[seat.name].footprint_bytes if seat.name in observed else seat.footprint_bytes for seat in seats)
        extra = int(round(report.plateau_used_mib * MiB)) - plan_gpu.reserved_bytes - accounted
        if abs(extra) / MiB <= FOOTPRINT_TOLERANCE_MIB:
            continue
        corrections.append(GpuCorrection(
            host=report.host, index=report.index, extra_bytes=extra, seats=[seat.name for seat in seats],
            source=f"plateau {report.plateau_used_mib:,.0f} MiB on GPU {report.index} against "
                   + ", ".join(f"{seat.name} {'observed' if seat.name in observed else 'planned'}" for seat in seats)))
    return corrections


def gpu_report(series: GpuSeries, analysis: Analysis) -> GpuReport:
    last = analysis.segments[-1]
    reserved = series.reserved_mib or 0.0
    plateau_free = series.total_mib - last.plateau_used_mib - reserved if series.total_mib else None
    free_after_boot = series.total_mib - last.level_after_boot_mib - reserved if series.total_mib else None
    creeps = [segment.creep for segment in analysis.segments if segment.creep is not None]
    return GpuReport(
        host=series.host, index=series.index, samples=analysis.samples, start=analysis.start, end=analysis.end,
        gaps=analysis.gaps, history=analysis.history, total_mib=series.total_mib, steps=analysis.steps,
        creep=last.creep or (creeps[-1] if creeps else None), segments=analysis.segments,
        plateau_used_mib=last.plateau_used_mib, plateau_uncertainty_mib=last.plateau_uncertainty_mib,
        still_to_rise_mib=last.still_to_rise_mib,
        plateau_free_mib=round(plateau_free, 1) if plateau_free is not None else None,
        free_after_boot_mib=round(free_after_boot, 1) if free_after_boot is not None else None,
        free_drop_after_boot_mib=round(free_after_boot - plateau_free, 1) if plateau_free is not None and free_after_boot is not None else None,
    )


def _off(observed_bytes: int, planned_bytes: int) -> bool:
    gap_mib = abs(observed_bytes - planned_bytes) / MiB
    return gap_mib > max(FOOTPRINT_TOLERANCE_MIB, FOOTPRINT_TOLERANCE_SHARE * planned_bytes / MiB)


def check_plan(report: GpuReport, plan: Plan, observed: dict[str, ObservedSeat]) -> tuple[PlanCheck | None, list[Finding]]:
    """The GPU's plateau against what the plan put on it; (None, []) for a GPU the plan does not have."""
    plan_gpu = planned_gpu(plan, report.host, report.index)
    if plan_gpu is None:
        return None, []
    seats = planned_seats(plan, plan_gpu)
    # nvidia-smi's "used" also counts the processes the plan reserved memory for.
    planned_used_mib = (plan_gpu.used_bytes + plan_gpu.reserved_bytes) / MiB
    planned_spare_mib = plan_gpu.spare_bytes / MiB
    miss = report.plateau_used_mib - planned_used_mib
    off = [seat.name for seat in seats if seat.name in observed and _off(observed[seat.name].footprint_bytes, seat.footprint_bytes)]
    if not off and abs(miss) > FOOTPRINT_TOLERANCE_MIB:
        off = [seat.name for seat in seats if seat.name not in observed]
    check = PlanCheck(planned_used_mib=round(planned_used_mib, 1), planned_spare_mib=round(planned_spare_mib, 1),
                      observed_used_mib=report.plateau_used_mib, observed_spare_mib=round(planned_spare_mib - miss, 1),
                      miss_mib=round(miss, 1), spare_held=miss <= planned_spare_mib, seats_to_correct=off)
    findings = []
    if not check.spare_held:
        findings.append(Finding(
            kind="plan_spare_missed", gpu=report.index,
            message=f"GPU {report.index}: plateau {report.plateau_used_mib:,.0f} MiB used, the plan expected "
                    f"{planned_used_mib:,.0f} MiB + {planned_spare_mib:,.0f} MiB spare: the spare was overrun by "
                    f"{miss - planned_spare_mib:,.0f} MiB",
            fix=("correct the footprint of " + ", ".join(off) + " and re-plan with --observed") if off
            else "re-plan with --observed so the spare is sized from the plateau",
            evidence=[f"plateau reached {report.creep.plateau_at.isoformat()}" if report.creep else f"plateau over {report.start.isoformat()} … {report.end.isoformat()}"]))
    for seat in seats:
        if seat.name in observed and seat.name in off:
            seen = observed[seat.name]
            findings.append(Finding(
                kind="seat_estimate_off", seat=seat.name, gpu=report.index,
                message=f"{seat.name}: observed {seen.footprint_bytes / MiB:,.0f} MiB at plateau, planned "
                        f"{seat.footprint_bytes / MiB:,.0f} MiB ({(seen.footprint_bytes - seat.footprint_bytes) / MiB:+,.0f} MiB)",
                fix="write the observations file (-o observed.json) and re-plan with seatplan plan --observed observed.json",
                evidence=[seen.source]))
    return check, findings
