"""GPU memory over time: the monitors' history per GPU with restarts, boots, creep and plateaus, against the
plan's expected level."""

from __future__ import annotations

from collections import defaultdict
from datetime import datetime

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from seatplan.documents.observed import DiagnoseReport, GpuReport
from seatplan.documents.plan import Plan
from seatplan.report.figures.common import Figure, Table, apply_layout, gib, gpu_label, whole
from seatplan.units import MiB


def _plan_gpu_level_mib(plan: Plan, report: GpuReport) -> float | None:
    """What the plan expects nvidia-smi to show at plateau on this GPU (seats' use plus the reserved memory)."""
    for gpu in plan.gpus:
        if gpu.index == report.index and (report.host in (None, gpu.host) or len({g.host for g in plan.gpus}) == 1):
            return (gpu.used_bytes + gpu.reserved_bytes) / MiB
    return None


def _plan_gpu_label(plan: Plan, report: GpuReport) -> str:
    hosts = {gpu.host for gpu in plan.gpus}
    host = report.host if report.host in hosts or len(hosts) != 1 else next(iter(hosts))
    return gpu_label(host or "gpu", report.index)


def seat_boots_by_gpu(plan: Plan, diagnose: DiagnoseReport) -> dict[str, list[tuple[datetime, str, str]]]:
    """Boot times of the seats the plan puts on each GPU: (time, seat, what the boot says)."""
    where = {seat.name: seat.gpus for seat in plan.seats}
    boots: dict[str, list[tuple[datetime, str, str]]] = defaultdict(list)
    for seat in diagnose.seats:
        for boot in seat.boots:
            if boot.started_at is None:
                continue
            kv = boot.kv_cache_memory_bytes_pinned or boot.available_kv_bytes
            detail = f"KV {gib(kv)} GiB ({boot.sized_by})" if kv else boot.sized_by
            for label in where.get(seat.name, []):
                boots[label].append((boot.started_at, seat.name, detail))
    return boots


def memory_over_time_figure(plan: Plan, diagnose: DiagnoseReport | None) -> Figure | None:
    if diagnose is None:
        return None
    gpus = [gpu for gpu in diagnose.gpus if gpu.series is not None and gpu.series.starts]
    if not gpus:
        return None
    labels = [_plan_gpu_label(plan, gpu) for gpu in gpus]
    figure = make_subplots(rows=len(gpus), cols=1, shared_xaxes=True, vertical_spacing=0.06 if len(gpus) < 6 else 0.03,
                           subplot_titles=[f"GPU {label}" for label in labels])
    boots = seat_boots_by_gpu(plan, diagnose)
    shown: set[str] = set()
    rows = []
    for row, (gpu, label) in enumerate(zip(gpus, labels), start=1):
        _gpu_history(figure, row, gpu, label, _plan_gpu_level_mib(plan, gpu), boots.get(label, []), shown)
        creep = gpu.creep
        planned = _plan_gpu_level_mib(plan, gpu)
        rows.append([label, whole(gpu.samples), str(len(gpu.steps)), f"{gpu.plateau_used_mib / 1024:.2f}",
                     f"{gpu.plateau_free_mib / 1024:.2f}" if gpu.plateau_free_mib is not None else "-",
                     f"+{creep.rise_mib / 1024:.2f} in {creep.hours_to_plateau:.0f} h" if creep else "-",
                     f"{planned / 1024:.2f}" if planned is not None else "-",
                     ("held" if gpu.plan.spare_held else f"missed by {gpu.plan.miss_mib / 1024:.2f}") if gpu.plan else "-"])
    top = max(max(gpu.total_mib or 0, max(gpu.series.max_mib if gpu.series else [0.0])) for gpu in gpus) / 1024 * 1.06
    for row, gpu in enumerate(gpus, start=1):
        # Restarts dip to zero; start each axis below the GPU's lowest level after a boot so creep and steps show.
        levels = [segment.plateau_used_mib for segment in gpu.segments if segment.plateau_used_mib > 1024]
        levels += [segment.level_after_boot_mib for segment in gpu.segments if segment.level_after_boot_mib > 1024]
        bottom = min(levels) / 1024 * 0.85 if levels else 0
        figure.update_yaxes(title_text="used GiB", range=[bottom, top], row=row, col=1)
    apply_layout(figure, 120 + 220 * len(gpus))
    table = Table("Per GPU: what the history shows", ["GPU", "samples", "steps", "plateau used GiB", "plateau free GiB", "creep",
                                                      "plan expects GiB", "plan check"], rows)
    caption = ("Used memory as the monitors recorded it (line: median of each bin; band: lowest to highest reading), "
               "with the restarts (steps), the seats' boots from their vLLM logs, the creep after a boot up to its plateau, "
               "and the level the plan expects at plateau (dashed).")
    return Figure("history", "GPU memory over time", caption, figure, [table])


def _gpu_history(figure: go.Figure, row: int, gpu: GpuReport, label: str, planned_mib: float | None,
                 boots: list[tuple[datetime, str, str]], shown: set[str]) -> None:
    series = gpu.series
    assert series is not None

    def legend(name: str) -> bool:
        first = name not in shown
        shown.add(name)
        return first

    figure.add_trace(go.Scatter(name="highest reading", legendgroup="band", showlegend=False, x=series.starts,
                                y=[value / 1024 for value in series.max_mib], mode="lines", line=dict(width=0),
                                hoverinfo="skip"), row=row, col=1)
    figure.add_trace(go.Scatter(name="lowest to highest reading", legendgroup="band", showlegend=legend("band"), x=series.starts,
                                y=[value / 1024 for value in series.min_mib], mode="lines", line=dict(width=0), fill="tonexty",
                                fillcolor="rgba(76, 120, 168, 0.2)", hoverinfo="skip"), row=row, col=1)
    figure.add_trace(go.Scatter(name="used (median per bin)", legendgroup="used", showlegend=legend("used"), x=series.starts,
                                y=[value / 1024 for value in series.median_mib], mode="lines", line=dict(color="#4c78a8", width=2),
                                customdata=[[low / 1024, high / 1024] for low, high in zip(series.min_mib, series.max_mib)],
                                hovertemplate=f"{label} %{{x}}<br>used %{{y:.2f}} GiB (range %{{customdata[0]:.2f}}–"
                                              f"%{{customdata[1]:.2f}})<extra></extra>"), row=row, col=1)
    ends = [series.starts[0], series.starts[-1]]
    if gpu.total_mib:
        figure.add_trace(go.Scatter(name="GPU total", legendgroup="total", showlegend=legend("total"), x=ends,
                                    y=[gpu.total_mib / 1024] * 2, mode="lines", line=dict(color="#222222", width=1),
                                    hovertemplate=f"{label}: total %{{y:.2f}} GiB<extra></extra>"), row=row, col=1)
    if planned_mib is not None:
        figure.add_trace(go.Scatter(name="plan's expected use at plateau", legendgroup="planned", showlegend=legend("planned"),
                                    x=ends, y=[planned_mib / 1024] * 2, mode="lines", line=dict(color="#f58518", dash="dash"),
                                    hovertemplate=f"{label}: the plan expects %{{y:.2f}} GiB at plateau<extra></extra>"), row=row, col=1)
    if gpu.steps:
        figure.add_trace(go.Scatter(name="step (restart)", legendgroup="step", showlegend=legend("step"), mode="markers",
                                    x=[step.at for step in gpu.steps], y=[step.after_mib / 1024 for step in gpu.steps],
                                    marker=dict(symbol="triangle-down", size=11, color="#e45756"),
                                    customdata=[[step.before_mib / 1024, step.delta_mib / 1024] for step in gpu.steps],
                                    hovertemplate=f"{label} %{{x}}<br>step %{{customdata[0]:.2f}} → %{{y:.2f}} GiB "
                                                  f"(%{{customdata[1]:+.2f}})<extra></extra>"), row=row, col=1)
    if boots:
        top = max(series.max_mib) / 1024
        figure.add_trace(go.Scatter(name="engine boot (vLLM log)", legendgroup="boot", showlegend=legend("boot"), mode="markers",
                                    x=[moment for moment, _, _ in boots], y=[top * 1.04] * len(boots),
                                    marker=dict(symbol="star-triangle-down", size=10, color="#b279a2"),
                                    customdata=[[seat, detail] for _, seat, detail in boots],
                                    hovertemplate="%{x}<br>%{customdata[0]} booted: %{customdata[1]}<extra></extra>"), row=row, col=1)
    creep_x: list[datetime | None] = []
    creep_y: list[float | None] = []
    creep_data: list[list[float]] = []
    for segment in gpu.segments:
        if segment.creep is None:
            continue
        creep_x += [segment.creep.start, segment.creep.plateau_at, None]
        creep_y += [segment.level_after_boot_mib / 1024, segment.plateau_used_mib / 1024, None]
        creep_data += [[segment.creep.rise_mib / 1024, segment.creep.hours_to_plateau]] * 3
    if creep_x:
        figure.add_trace(go.Scatter(name="creep to plateau", legendgroup="creep", showlegend=legend("creep"), mode="lines+markers",
                                    x=creep_x, y=creep_y, line=dict(color="#e45756", width=3), marker=dict(size=7),
                                    customdata=creep_data,
                                    hovertemplate=f"{label} %{{x}}<br>creep +%{{customdata[0]:.2f}} GiB in %{{customdata[1]:.0f}} h"
                                                  f"<extra></extra>"), row=row, col=1)
    plateau_x: list[datetime | None] = []
    plateau_y: list[float | None] = []
    for segment in gpu.segments:
        # The plateau runs from where the creep levelled off (or the boot, without creep) to the segment's end.
        plateau_x += [segment.creep.plateau_at if segment.creep else segment.start, segment.end, None]
        plateau_y += [segment.plateau_used_mib / 1024, segment.plateau_used_mib / 1024, None]
    figure.add_trace(go.Scatter(name="plateau", legendgroup="plateau", showlegend=legend("plateau"), mode="lines",
                                x=plateau_x, y=plateau_y, line=dict(color="#54a24b", width=3, dash="dot"),
                                hovertemplate=f"{label}: plateau %{{y:.2f}} GiB<extra></extra>"), row=row, col=1)
