"""Memory per GPU: each GPU's seats, their footprint parts, the reserved memory and the spare at plateau, the
chosen layout beside the runner-up."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from seatplan.documents.observed import ObservedFootprints
from seatplan.documents.plan import FootprintPart, Plan
from seatplan.report.figures.common import Figure, Table, apply_layout, gib, gpu_label
from seatplan.units import GiB, MiB

# Footprint parts in the order they are stacked, with their legend names and colours (one family per kind).
PART_STYLES: dict[str, tuple[str, str]] = {
    "weights": ("weights", "#4c78a8"),
    "kv_cache": ("KV cache", "#f58518"),
    "activation_peak": ("activation peak", "#54a24b"),
    "cuda_graphs": ("CUDA graphs", "#88d27a"),
    "cuda_context": ("CUDA context", "#b279a2"),
    "nccl_allreduce": ("NCCL buffers", "#d6a5c9"),
    "creep_allowance": ("creep allowance", "#e45756"),
    "observed_non_kv": ("observed non-KV", "#72b7b2"),
    "declared_cap": ("declared (fixed seat)", "#9d755d"),
}
OTHER_PART_COLOUR = "#bab0ac"
RESERVED_COLOUR = "#8c8c8c"
SPARE_COLOUR = "rgba(84, 162, 75, 0.18)"
# An estimated part is hatched, each kind with its own hatch, so that activation and CUDA graphs (both estimates,
# greens apart) are told apart without colour too; an exact, pinned, declared, policy or observed part is solid.
ESTIMATE_PATTERNS: dict[str, str] = {
    "weights": "/", "activation_peak": "x", "cuda_graphs": ".", "cuda_context": "-", "nccl_allreduce": "|",
    "creep_allowance": "+", "kv_cache": "\\", "observed_non_kv": "/", "declared_cap": "/",
}
KEPT_CLEAR_COLOUR = "rgba(140, 140, 140, 0.22)"


@dataclass(frozen=True)
class Segment:
    gpu: str
    seat: str
    part: FootprintPart
    base_bytes: int



def stack_segments(plan: Plan, seats_by_gpu: dict[str, list[str]]) -> list[Segment]:
    """Each seat's parts stacked on each of its GPUs, after the GPU's reserved memory, in boot order."""
    by_name = {seat.name: seat for seat in plan.seats}
    segments = []
    for gpu in plan.gpus:
        label = gpu_label(gpu.host, gpu.index)
        offset = gpu.reserved_bytes
        for seat_name in seats_by_gpu.get(label, []):
            for part in _stack_order(by_name[seat_name].footprint_parts):
                segments.append(Segment(label, seat_name, part, offset))
                offset += part.bytes
    return segments


def _stack_order(parts: list[FootprintPart]) -> list[FootprintPart]:
    rank = {name: position for position, name in enumerate(PART_STYLES)}
    return sorted(parts, key=lambda part: rank.get(part.name, len(rank)))


def runner_up_seats(plan: Plan) -> dict[str, list[str]] | None:
    if not plan.runner_ups:
        return None
    order = {seat.name: seat.boot_order for seat in plan.seats}
    by_gpu: dict[str, list[str]] = defaultdict(list)
    for seat_name, gpus in sorted(plan.runner_ups[0].assignment.items(), key=lambda item: order.get(item[0], 0)):
        for label in gpus:
            by_gpu[label].append(seat_name)
    return dict(by_gpu)


def _memory_panel(figure: go.Figure, plan: Plan, seats_by_gpu: dict[str, list[str]], column: int, shown: set[str],
                  observed: ObservedFootprints | None) -> None:
    gpus = [gpu_label(gpu.host, gpu.index) for gpu in plan.gpus]
    segments = stack_segments(plan, seats_by_gpu)
    footprint_by_seat = {seat.name: seat.footprint_bytes for seat in plan.seats}
    parts = list(dict.fromkeys(segment.part.name for segment in segments))
    for part_name in parts:
        mine = [segment for segment in segments if segment.part.name == part_name]
        title, colour = PART_STYLES.get(part_name, (part_name, OTHER_PART_COLOUR))
        biggest = _biggest_part_per_seat(segments)
        figure.add_trace(go.Bar(
            name=title, legendgroup=part_name, showlegend=part_name not in shown, orientation="h",
            y=[segment.gpu for segment in mine], x=[segment.part.bytes / GiB for segment in mine],
            base=[segment.base_bytes / GiB for segment in mine],
            marker=dict(color=colour, line=dict(color="white", width=1),
                        pattern=dict(shape=[ESTIMATE_PATTERNS.get(part_name, "/") if segment.part.basis == "estimate" else ""
                                            for segment in mine],
                                     fillmode="overlay", size=6, solidity=0.35)),
            text=[segment.seat if biggest[(segment.gpu, segment.seat)] is segment.part else "" for segment in mine],
            textposition="inside", insidetextanchor="middle", textangle=0, constraintext="inside",
            customdata=[[segment.seat, title, f"{segment.part.bytes:,}", segment.part.basis, segment.part.note,
                         gib(footprint_by_seat[segment.seat])] for segment in mine],
            hovertemplate="<b>%{customdata[0]}</b> on %{y}<br>%{customdata[1]}: %{x:.2f} GiB (%{customdata[2]} B)"
                          "<br>basis: %{customdata[3]}<br>%{customdata[4]}<br>seat total %{customdata[5]} GiB<extra></extra>",
        ), row=1, col=column)
        shown.add(part_name)
    used: dict[str, int] = defaultdict(int)
    for segment in segments:
        used[segment.gpu] += segment.part.bytes
    reserved = [gpu.reserved_bytes for gpu in plan.gpus]
    if any(reserved):
        figure.add_trace(go.Bar(name="reserved (not seatplan's)", legendgroup="reserved", showlegend="reserved" not in shown,
                                orientation="h", y=gpus, x=[value / GiB for value in reserved], base=[0] * len(gpus),
                                marker=dict(color=RESERVED_COLOUR),
                                hovertemplate="%{y}: %{x:.2f} GiB reserved for other processes<extra></extra>"), row=1, col=column)
        shown.add("reserved")
    spare = [gpu.total_bytes - gpu.reserved_bytes - used[label] for gpu, label in zip(plan.gpus, gpus)]
    # A keep-clear GPU with no seat is not spare for the plan: it is drawn as kept clear (grey, hatched), never as
    # "spare 95.59 GiB" that a reader would count on.
    open_gpus = [index for index, gpu in enumerate(plan.gpus) if not (gpu.keep_clear and used[gpus[index]] == 0)]
    clear_gpus = [index for index in range(len(plan.gpus)) if index not in open_gpus]
    figure.add_trace(go.Bar(
        name="spare at plateau", legendgroup="spare", showlegend="spare" not in shown, orientation="h", y=[gpus[i] for i in open_gpus],
        x=[spare[i] / GiB for i in open_gpus], base=[(plan.gpus[i].reserved_bytes + used[gpus[i]]) / GiB for i in open_gpus],
        marker=dict(color=SPARE_COLOUR, line=dict(color="#54a24b", width=1)),
        text=[f"spare {spare[i] / GiB:.2f} GiB" for i in open_gpus], textposition="inside", insidetextanchor="end",
        constraintext="inside", textfont=dict(color="#2d6a27"),
        customdata=[[gib(plan.gpus[i].headroom_bytes), gib(plan.gpus[i].total_bytes)] for i in open_gpus],
        hovertemplate="%{y}: spare at plateau %{x:.2f} GiB of %{customdata[1]} GiB<br>headroom kept: "
                      "%{customdata[0]} GiB<extra></extra>"), row=1, col=column)
    shown.add("spare")
    if clear_gpus:
        figure.add_trace(go.Bar(
            name="kept clear (keep_clear: no seat placed)", legendgroup="clear", showlegend="clear" not in shown, orientation="h",
            y=[gpus[i] for i in clear_gpus], x=[(plan.gpus[i].total_bytes - plan.gpus[i].reserved_bytes) / GiB for i in clear_gpus],
            base=[plan.gpus[i].reserved_bytes / GiB for i in clear_gpus],
            marker=dict(color=KEPT_CLEAR_COLOUR, line=dict(color=RESERVED_COLOUR, width=1),
                        pattern=dict(shape="/", fillmode="overlay", size=10, solidity=0.15, fgcolor=RESERVED_COLOUR)),
            text=["kept clear"] * len(clear_gpus), textposition="inside", insidetextanchor="middle", constraintext="inside",
            textfont=dict(color="#555555"),
            hovertemplate="%{y}: kept clear (keep_clear in the fleet file): the plan places no seat here<extra></extra>"),
            row=1, col=column)
        shown.add("clear")
    figure.add_trace(go.Scatter(
        name="headroom line", legendgroup="headroom", showlegend="headroom" not in shown, mode="markers", y=gpus,
        x=[(gpu.total_bytes - gpu.headroom_bytes) / GiB for gpu in plan.gpus],
        marker=dict(symbol="line-ns", size=22, line=dict(width=2, color="#e45756")),
        customdata=[gib(gpu.headroom_bytes) for gpu in plan.gpus],
        hovertemplate="%{y}: the plan keeps %{customdata} GiB free; use must stay left of %{x:.2f} GiB<extra></extra>",
    ), row=1, col=column)
    shown.add("headroom")
    if observed is not None and observed.gpus and column == 1:
        points = [(gpu_label(str(entry.get("host") or plan.gpus[0].host), int(str(entry["index"]))),
                   float(str(entry["plateau_used_mib"])))
                  for entry in observed.gpus if entry.get("index") is not None and entry.get("plateau_used_mib") is not None]
        points = [(label, used_mib) for label, used_mib in points if label in gpus]
        if points:
            figure.add_trace(go.Scatter(
                name="observed plateau (diagnose)", mode="markers", y=[label for label, _ in points],
                x=[used_mib * MiB / GiB for _, used_mib in points],
                marker=dict(symbol="diamond", size=11, color="black"),
                hovertemplate="%{y}: observed use at plateau %{x:.2f} GiB (nvidia-smi counts reserved too)<extra></extra>",
            ), row=1, col=column)


def _biggest_part_per_seat(segments: list[Segment]) -> dict[tuple[str, str], FootprintPart]:
    biggest: dict[tuple[str, str], FootprintPart] = {}
    for segment in segments:
        key = (segment.gpu, segment.seat)
        if key not in biggest or segment.part.bytes > biggest[key].bytes:
            biggest[key] = segment.part
    return biggest


def memory_figure(plan: Plan, observed: ObservedFootprints | None = None) -> Figure | None:
    if plan.worst_case_spare_bytes is None:
        return None
    chosen = {gpu_label(gpu.host, gpu.index): gpu.seats for gpu in plan.gpus}
    runner_up = runner_up_seats(plan)
    titles = [f"chosen: worst-case spare {gib(plan.worst_case_spare_bytes)} GiB on {plan.worst_case_gpu}"]
    if runner_up is not None:
        alternative = plan.runner_ups[0]
        titles.append(f"runner-up: {gib(alternative.worst_case_spare_bytes)} GiB, {alternative.moves} move(s)")
    figure = make_subplots(rows=1, cols=len(titles), shared_yaxes=True, horizontal_spacing=0.03, subplot_titles=titles)
    shown: set[str] = set()
    _memory_panel(figure, plan, chosen, 1, shown, observed)
    if runner_up is not None:
        _memory_panel(figure, plan, runner_up, 2, shown, None)
    figure.update_yaxes(autorange="reversed", type="category")
    figure.update_xaxes(title_text="GiB per GPU", rangemode="tozero")
    apply_layout(figure, max(420, 140 + 56 * len(plan.gpus)), barmode="overlay", uniformtext=dict(minsize=9, mode="hide"))
    caption = ("Each bar is one GPU at plateau: every seat's footprint parts stacked in boot order (hatched = estimate, "
               "each part with its own hatch; solid = exact, pinned, declared or policy), then the spare; a keep-clear GPU "
               "is drawn as kept clear. A seat too small for its name inside the bar is named on hover and in the "
               "seats column of the GPU table below. The red tick is where use must stay left of to keep the headroom.")
    if runner_up is not None:
        caption += f" Right: the runner-up layout ({plan.runner_ups[0].why_lost})."
    return Figure("memory", "Memory per GPU", caption, figure, [footprint_table(plan), gpu_table(plan)])


def footprint_table(plan: Plan) -> Table:
    rows = []
    for seat in plan.seats:
        for part in _stack_order(seat.footprint_parts):
            rows.append([seat.name, ", ".join(seat.gpus), PART_STYLES.get(part.name, (part.name,))[0], f"{part.bytes:,}",
                         gib(part.bytes), part.basis, part.note])
    return Table("Footprint parts per GPU", ["seat", "GPUs", "part", "bytes", "GiB", "basis", "why"], rows)


def gpu_table(plan: Plan) -> Table:
    rows = [[gpu_label(gpu.host, gpu.index), gpu.name, gib(gpu.total_bytes), gib(gpu.reserved_bytes), gib(gpu.used_bytes),
             gib(gpu.spare_bytes), gib(gpu.headroom_bytes), ", ".join(gpu.seats) or ("keep clear" if gpu.keep_clear else "-")]
            for gpu in plan.gpus]
    return Table("GPUs at plateau (GiB)", ["GPU", "name", "total", "reserved", "used", "spare", "headroom", "seats"], rows)
