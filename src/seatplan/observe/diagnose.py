"""Put the observations together: boots, stats and GPU series in, a DiagnoseReport out (pure)."""

from __future__ import annotations

from collections import defaultdict
from datetime import UTC, datetime

import numpy as np

from seatplan.documents.observed import (
    Boot,
    DiagnoseReport,
    EngineStats,
    ObservedFootprints,
    ProcessSample,
    SeatReport,
    StatsSummary,
)
from seatplan.documents.plan import Plan, PlannedVllmSeat
from seatplan.observe.calibrate import (
    check_plan,
    footprints_from_processes,
    footprints_from_steps,
    gpu_corrections,
    gpu_report,
    verdicts,
)
from seatplan.observe.detect import Analysis, DetectSettings, GpuSeries, analyse
from seatplan.observe.findings import seat_findings
from seatplan.observe.seatmap import SeatMap
from seatplan.observe.series import compact_series


def summarise_stats(stats: list[EngineStats]) -> StatsSummary:
    """Peaks of the engine's own figures; preemption counters are summed across restarts (resets)."""
    usage = [s.kv_cache_usage_pct for s in stats if s.kv_cache_usage_pct is not None]
    running = [s.running_requests for s in stats if s.running_requests is not None]
    waiting = [s.waiting_requests for s in stats if s.waiting_requests is not None]
    preemptions = sum(s.preemptions for s in stats if s.preemptions is not None)
    previous: dict[str, int] = {}
    for record in sorted(stats, key=lambda s: s.at.timestamp() if s.at else 0.0):
        if record.preemptions_total is None:
            continue
        last = previous.get(record.where)
        if last is None or record.preemptions_total < last:
            # The first reading, or a counter reset by a restart: all of it happened since the engine started.
            preemptions += record.preemptions_total
        else:
            preemptions += record.preemptions_total - last
        previous[record.where] = record.preemptions_total
    return StatsSummary(samples=len(stats), peak_kv_cache_usage_pct=max(usage) if usage else None,
                        peak_running_requests=max(running) if running else None,
                        peak_waiting_requests=max(waiting) if waiting else None, preemptions=preemptions)


def boot_times_on(series: GpuSeries, boots: list[Boot], seat_map: SeatMap | None) -> list[float]:
    """Start times of the whole boots that ran on this GPU (by the plan or fleet; without one, every boot)."""
    here = set(seat_map.seats_on(series.host, series.index)) if seat_map else None
    return sorted(boot.started_at.timestamp() for boot in boots
                  if boot.started_at is not None and not boot.fragment and (here is None or boot.seat in here))


def analyse_with_boots(series: GpuSeries, boots: list[Boot], seat_map: SeatMap | None, settings: DetectSettings) -> Analysis:
    """With a plan or fleet, the boots of this GPU's seats are its reboots; without one, boot lines only pin reboots."""
    times = boot_times_on(series, boots, seat_map)
    return analyse(series, settings, boot_times_s=times, boots_here_s=times if seat_map is not None else [])


def neighbours_of(seat: str, boots: list[Boot], seat_map: SeatMap | None) -> tuple[list[Boot], str]:
    """Boots of other engines that share a GPU with ``seat``: by the plan or fleet, else those in the same log file."""
    if seat_map is not None:
        sharing = seat_map.neighbours(seat)
        return [boot for boot in boots if boot.seat in sharing], " on a GPU they share in the plan"
    files = {boot.source.rsplit(":", 1)[0] for boot in boots if boot.seat == seat}
    return ([boot for boot in boots if boot.seat != seat and boot.source.rsplit(":", 1)[0] in files],
            " (same log file; no --fleet, so the GPU is assumed shared)")


def _neighbours(seat: str, boots: list[Boot], seat_map: SeatMap | None) -> dict:
    neighbours, basis = neighbours_of(seat, boots, seat_map)
    return {"neighbours": neighbours, "neighbours_basis": basis}


def diagnose(*, boots: list[Boot], stats: list[EngineStats], series: list[GpuSeries],
             processes: list[ProcessSample], plan: Plan | None = None, seat_map: SeatMap | None = None,
             rule_pins: dict[str, tuple[int, str]] | None = None,
             settings: DetectSettings = DetectSettings()) -> tuple[DiagnoseReport, ObservedFootprints]:
    """With a plan, the plateau check and the verdicts; the seat map (by default the plan's, else the fleet's)
    says which seat runs where."""
    if seat_map is None and plan is not None:
        seat_map = SeatMap.of_plan(plan)
    if seat_map is not None:
        boots = [boot.model_copy(update={"seat": seat_map.seat_name(boot.seat)}) for boot in boots]
        stats = [record.model_copy(update={"seat": seat_map.seat_name(record.seat)}) for record in stats]
    # A GPU with no readings at all (every value [N/A]) has nothing to analyse.
    analysed = [(one, analyse_with_boots(one, boots, seat_map, settings)) for one in series if np.any(~np.isnan(one.used_mib))]
    gpus = [gpu_report(one, analysis).model_copy(update={"series": compact_series(one)}) for one, analysis in analysed]
    observed = footprints_from_steps(boots, analysed, seat_map, settings)
    observed.update(footprints_from_processes(boots, processes))
    report = DiagnoseReport(gpus=gpus)
    if plan is not None:
        for gpu in gpus:
            check, findings = check_plan(gpu, plan, observed)
            gpu.plan = check
            report.findings.extend(findings)
        report.gpu_corrections = gpu_corrections(gpus, plan, observed)
        report.verdicts = verdicts(plan, gpus)
    boots_by_seat: dict[str, list[Boot]] = defaultdict(list)
    for boot in boots:
        boots_by_seat[boot.seat].append(boot)
    stats_by_seat: dict[str, list[EngineStats]] = defaultdict(list)
    for record in stats:
        stats_by_seat[record.seat].append(record)
    planned = {seat.name: seat for seat in plan.seats} if plan else {}
    names = list(dict.fromkeys([*boots_by_seat, *stats_by_seat, *observed, *(seat_map.seats if seat_map else ())]))
    for name in names:
        seat_boots = sorted(boots_by_seat.get(name, []), key=lambda b: b.started_at.timestamp() if b.started_at else 0.0)
        plan_seat = planned.get(name)
        seat = SeatReport(
            name=name, boots=seat_boots,
            stats=summarise_stats(stats_by_seat[name]) if stats_by_seat.get(name) else None,
            observed=observed.get(name),
            planned_footprint_bytes=plan_seat.footprint_bytes if plan_seat else None,
            findings=seat_findings(name, seat_boots, planned_kv_bytes=plan_seat.kv_cache_memory_bytes if isinstance(plan_seat, PlannedVllmSeat) else None,
                                   rule_pin=(rule_pins or {}).get(name), **_neighbours(name, boots, seat_map)),
        )
        seat.findings.extend(f for f in report.findings if f.seat == name)
        report.seats.append(seat)
    report.findings = [f for f in report.findings if f.seat is None] + [f for seat in report.seats for f in seat.findings]
    footprints = ObservedFootprints(
        generated_at=datetime.now(UTC),
        seats=observed,
        gpus=[{"host": gpu.host, "index": gpu.index, "plateau_used_mib": gpu.plateau_used_mib,
               "plateau_free_mib": gpu.plateau_free_mib, "total_mib": gpu.total_mib} for gpu in gpus],
        gpu_corrections=report.gpu_corrections,
        engines={seat.name: seat.stats for seat in report.seats if seat.stats is not None},
    )
    return report, footprints
