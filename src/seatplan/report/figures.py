"""The report's figures, built from the documents alone (pure: no files, no HTML).

Each builder returns a :class:`Figure`: the plotly figure, the table of the numbers it draws (every
figure's inputs are reachable as text, not only on hover), and a caption saying what is exact and what
is estimated. Builders return None where their documents hold nothing to draw.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from seatplan.documents.observed import DiagnoseReport, GpuReport, ObservedFootprints
from seatplan.documents.plan import FootprintPart, Plan, PlannedSeat
from seatplan.documents.usage import ModelUsage, UsageReport
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
SEAT_TOKEN_COLOURS = ("#4c78a8", "#f58518", "#54a24b", "#e45756", "#72b7b2", "#b279a2", "#ff9da6", "#9d755d", "#eeca3b", "#bab0ac")
VISIBLE_SEAT_LINES = 8  # in-flight lines shown at first; the rest are one legend click away
FONT = dict(family="system-ui, -apple-system, Segoe UI, Roboto, sans-serif", size=12)


@dataclass
class Table:
    title: str
    columns: list[str]
    rows: list[list[str]]


@dataclass
class Figure:
    key: str
    title: str
    caption: str
    figure: go.Figure | None
    tables: list[Table] = field(default_factory=list)


def gib(num_bytes: float | None) -> str:
    return "-" if num_bytes is None else f"{num_bytes / GiB:.2f}"


def whole(number: float | None) -> str:
    return "-" if number is None else f"{int(number):,}"


def _layout(figure: go.Figure, height: int, **extra: Any) -> go.Figure:
    settings: dict[str, Any] = dict(height=height, font=FONT, template="plotly_white", margin=dict(l=10, r=10, t=40, b=40),
                                    legend=dict(orientation="v", yanchor="top", y=1, x=1.01, xanchor="left"),
                                    hoverlabel=dict(align="left"))
    settings.update(extra)
    figure.update_layout(**settings)
    return figure


# ----------------------------------------------------------------------------- memory per GPU


@dataclass(frozen=True)
class Segment:
    gpu: str
    seat: str
    part: FootprintPart
    base_bytes: int


def gpu_label(host: str, index: int) -> str:
    return f"{host}:{index}"


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
    _layout(figure, max(420, 140 + 56 * len(plan.gpus)), barmode="overlay", uniformtext=dict(minsize=9, mode="hide"))
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


# ----------------------------------------------------------------------------- spare versus moves


def frontier_points(plan_raw: dict[str, Any]) -> list[tuple[int, int]]:
    """(moves, worst-case spare bytes) of the plan's frontier, when the plan has one (newer plans do)."""
    points = []
    for entry in plan_raw.get("frontier") or []:
        if not isinstance(entry, dict):
            continue
        moves = entry.get("max_moves", entry.get("moves"))  # the budget: at most this many moves
        spare = entry.get("worst_case_spare_bytes")
        if not isinstance(moves, int) or not isinstance(spare, int):
            continue
        points.append((moves, spare))
    return sorted(points)


def frontier_figure(plan: Plan, plan_raw: dict[str, Any]) -> Figure | None:
    if plan.worst_case_spare_bytes is None:
        return None
    points = frontier_points(plan_raw)
    figure = go.Figure()
    if points:
        figure.add_trace(go.Scatter(name="best spare with at most this many moves", mode="lines+markers",
                                    x=[moves for moves, _ in points], y=[spare / GiB for _, spare in points],
                                    line=dict(shape="hv", color="#4c78a8"),
                                    hovertemplate="≤ %{x} move(s): worst-case spare %{y:.2f} GiB<extra></extra>"))
    if plan.runner_ups:
        figure.add_trace(go.Scatter(name="runner-up layouts", mode="markers",
                                    x=[alternative.moves for alternative in plan.runner_ups],
                                    y=[alternative.worst_case_spare_bytes / GiB for alternative in plan.runner_ups],
                                    marker=dict(size=10, color="#bab0ac", symbol="circle-open", line=dict(width=2)),
                                    customdata=[[rank, alternative.why_lost] for rank, alternative in enumerate(plan.runner_ups, start=2)],
                                    hovertemplate="#%{customdata[0]}: %{y:.2f} GiB, %{x} move(s)<br>%{customdata[1]}<extra></extra>"))
    figure.add_trace(go.Scatter(name="chosen plan", mode="markers", x=[plan.moves or 0], y=[plan.worst_case_spare_bytes / GiB],
                                marker=dict(size=14, color="#f58518", symbol="star"),
                                hovertemplate="chosen: %{y:.2f} GiB with %{x} move(s)<extra></extra>"))
    most_moves = max([plan.moves or 0, *(moves for moves, _ in points), *(r.moves for r in plan.runner_ups)])
    # Half a move of room left of 0: with both axes from 0 the two "0" tick labels would sit on each other.
    figure.update_xaxes(title_text="seats moved from current_layout (each is a restart)", range=[-0.5, most_moves + 0.5],
                        dtick=1 if most_moves <= 12 else None)
    # From 0: a 76 MiB difference between two points must look like 76 MiB of a few GiB, not like a cliff.
    figure.update_yaxes(title_text="worst-case spare at plateau (GiB)", rangemode="tozero")
    _layout(figure, 360)
    rows = [[str(moves), gib(spare)] for moves, spare in points]
    tables = [Table("Frontier: best worst-case spare per number of moves", ["moves", "spare GiB"], rows)] if points else []
    tables.append(Table("Chosen plan and runner-ups", ["#", "spare GiB", "moves", "why it lost"],
                        [["1 (chosen)", gib(plan.worst_case_spare_bytes), str(plan.moves), ""]]
                        + [[str(rank), gib(alternative.worst_case_spare_bytes), str(alternative.moves), alternative.why_lost]
                           for rank, alternative in enumerate(plan.runner_ups, start=2)]))
    caption = ("How much worst-case spare each number of restarts buys." if points else
               "This plan carries no spare-versus-moves frontier (plans from older seatplan versions do not); "
               "the chosen layout and its runner-ups are shown instead.")
    return Figure("frontier", "Spare versus moves", caption, figure, tables)


# ----------------------------------------------------------------------------- KV budget per seat


def seat_usage(usage: UsageReport | None, seat: PlannedSeat) -> ModelUsage | None:
    if usage is None:
        return None
    for figures in usage.models.values():
        if figures.seat == seat.name:
            return figures
    return usage.models.get(seat.served_model_name) or usage.models.get(seat.name)


def explanation_inputs(seat: PlannedSeat, rule: str) -> dict[str, Any]:
    return next((line.inputs for line in seat.explanation if line.rule == rule), {})


def replay_peak_tokens(figures: ModelUsage | None) -> int | None:
    """The week replayed against KV blocks (usage documents that carry ``kv_replay``): the most blocks in flight at
    once, in tokens (blocks × block size, per KV group). Absent from older usage documents."""
    replay = getattr(figures, "kv_replay", None)
    if replay is None:
        return None
    blocks, block_size, groups = (getattr(replay, name, None) for name in ("peak_blocks", "block_size_tokens", "token_groups"))
    if not isinstance(blocks, int) or not isinstance(block_size, int):
        return None
    return blocks * block_size // max(groups if isinstance(groups, int) else 1, 1)


@dataclass(frozen=True)
class SeatTokens:
    seat: str
    kv_budget_tokens: int
    one_request_tokens: int | None
    peak_inflight_tokens: int | None
    peak_without_runaways_tokens: int | None
    replay_peak_tokens: int | None
    model_max_tokens: int | None
    yarn_max_tokens: int | None
    output_cap_tokens: int | None


def seat_tokens(plan: Plan, usage: UsageReport | None) -> list[SeatTokens]:
    rows = []
    for seat in plan.seats:
        if seat.kv_cache_tokens is None:
            continue
        figures = seat_usage(usage, seat)
        yarn = explanation_inputs(seat, "yarn")
        rows.append(SeatTokens(
            seat=seat.name, kv_budget_tokens=seat.kv_cache_tokens, one_request_tokens=seat.max_model_len,
            peak_inflight_tokens=figures.peak_inflight_tokens if figures else None,
            peak_without_runaways_tokens=figures.peak_inflight_tokens_without_runaways if figures else None,
            replay_peak_tokens=replay_peak_tokens(figures),
            model_max_tokens=explanation_inputs(seat, "context").get("derived_max_model_len"),
            yarn_max_tokens=yarn.get("extended_max_model_len"), output_cap_tokens=seat.max_new_tokens))
    return rows


TOKEN_MARKS = (  # (field, legend name, symbol, colour, what it is)
    ("one_request_tokens", "one max-length request (max_model_len)", "line-ns", "#222222", "KV one request at max_model_len needs"),
    ("peak_inflight_tokens", "observed peak in flight", "diamond", "#e45756", "the week's peak tokens in flight (usage)"),
    ("peak_without_runaways_tokens", "peak without runaways", "diamond-open", "#e45756", "the same peak without runaway replies"),
    ("replay_peak_tokens", "replayed peak", "x", "#b279a2", "the week replayed against KV blocks: most blocks in flight × block size"),
    ("model_max_tokens", "model's context (config)", "triangle-up-open", "#4c78a8", "the longest context vLLM derives from the config"),
    ("yarn_max_tokens", "with YaRN", "triangle-up", "#72b7b2", "the longest context with YaRN switched on"),
    ("output_cap_tokens", "output cap", "square-open", "#54a24b", "default output cap (max_new_tokens)"),
)


def kv_figure(plan: Plan, usage: UsageReport | None) -> Figure | None:
    rows = seat_tokens(plan, usage)
    if not rows:
        return None
    seats = [row.seat for row in rows]
    figure = go.Figure()
    figure.add_trace(go.Bar(name="KV budget (tokens it holds)", orientation="h", y=seats, x=[row.kv_budget_tokens for row in rows],
                            marker=dict(color="rgba(245, 133, 24, 0.55)", line=dict(color="#f58518", width=1)),
                            customdata=[[gib(seat.kv_cache_memory_bytes), f"{seat.kv_cache_memory_bytes or 0:,}",
                                         f"{seat.max_concurrency or 0:.2f}"] for seat in plan.seats if seat.kv_cache_tokens is not None],
                            hovertemplate="<b>%{y}</b>: KV cache holds %{x:,} tokens<br>%{customdata[0]} GiB "
                                          "(%{customdata[1]} B), %{customdata[2]}× one max-length request<extra></extra>"))
    for field_name, legend, symbol, colour, meaning in TOKEN_MARKS:
        marked = [(row.seat, getattr(row, field_name)) for row in rows if getattr(row, field_name)]
        if not marked:
            continue
        figure.add_trace(go.Scatter(name=legend, mode="markers", y=[seat for seat, _ in marked], x=[value for _, value in marked],
                                    marker=dict(symbol=symbol, size=13 if symbol != "line-ns" else 20, color=colour,
                                                line=dict(width=2, color=colour)),
                                    hovertemplate=f"<b>%{{y}}</b>: %{{x:,}} tokens<br>{meaning}<extra></extra>"))
    # One labelled tick per power of ten (1k, 10k, 100k, 1M): plotly's default log ticks label 2 and 5 in between
    # and crowd the axis with digits.
    figure.update_xaxes(type="log", title_text="tokens (log scale)", dtick=1, tickformat="~s", minor=dict(ticks="outside", showgrid=True))
    figure.update_yaxes(autorange="reversed", type="category")
    _layout(figure, 140 + 30 * len(rows), barmode="overlay")
    table = Table("KV budget and the token figures beside it",
                  ["seat", "KV tokens", "max_model_len", "peak in flight", "peak w/o runaways", "replayed peak",
                   "model's context", "YaRN context", "output cap"],
                  [[row.seat, whole(row.kv_budget_tokens), whole(row.one_request_tokens), whole(row.peak_inflight_tokens),
                    whole(row.peak_without_runaways_tokens), whole(row.replay_peak_tokens), whole(row.model_max_tokens),
                    whole(row.yarn_max_tokens), whole(row.output_cap_tokens)] for row in rows])
    caption = ("Per seat, the tokens its KV cache holds (exact: vLLM's block arithmetic on the pinned bytes) against one "
               "max-length request, the week's observed peak in flight (with and without runaway replies), the model's "
               "own context and YaRN's, and the output cap. A peak right of the bar means requests waited or were preempted.")
    if usage is None:
        caption += " No usage report was given: the observed peaks are missing."
    return Figure("kv", "KV budget per seat", caption, figure, [table])


# ----------------------------------------------------------------------------- GPU memory over time


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
    _layout(figure, 120 + 220 * len(gpus))
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


# ----------------------------------------------------------------------------- usage


def _bin_labels(edges: list[int]) -> list[str]:
    labels = []
    for position, low in enumerate(edges):
        high = edges[position + 1] - 1 if position + 1 < len(edges) else None
        labels.append(f"{_short(low)}+" if high is None else _short(low) if high == low else f"{_short(low)}–{_short(high)}")
    return labels


def _short(tokens: int) -> str:
    for size, suffix in ((1 << 20, "M"), (1 << 10, "k")):
        if tokens >= size:
            return f"{tokens / size:.3g}{suffix}"
    return str(tokens)


def _seat_name(name: str, figures: ModelUsage) -> str:
    return figures.seat or name


def lengths_figure(usage: UsageReport | None) -> Figure | None:
    if usage is None:
        return None
    seats = [(name, figures) for name, figures in usage.models.items() if figures.length_histogram is not None]
    histograms = [figures.length_histogram for _, figures in seats if figures.length_histogram is not None]
    if not histograms:
        return None
    edges = histograms[0].edges_tokens
    used_bins = [position for position in range(len(edges))
                 if any(histogram.prompt_calls[position] or histogram.completion_calls[position] for histogram in histograms)]
    low, high = min(used_bins), max(used_bins)
    labels = _bin_labels(edges)[low:high + 1]
    names = [_seat_name(name, figures) for name, figures in seats]
    figure = make_subplots(rows=1, cols=2, shared_yaxes=True, horizontal_spacing=0.04,
                           subplot_titles=["prompt tokens", "completion tokens"])
    for column, attribute in ((1, "prompt_calls"), (2, "completion_calls")):
        counts = [getattr(histogram, attribute)[low:high + 1] for histogram in histograms]
        shares = [[100 * count / max(sum(track), 1) for count in track] for track in counts]
        figure.add_trace(go.Heatmap(z=shares, x=labels, y=names, colorscale="Blues", zmin=0, showscale=column == 2,
                                    colorbar=dict(title=dict(text="% of calls", side="right")), customdata=counts, xgap=1, ygap=1,
                                    hovertemplate="<b>%{y}</b>, %{x} tokens: %{customdata:,} calls (%{z:.1f} %)<extra></extra>"),
                         row=1, col=column)
    figure.update_yaxes(autorange="reversed", type="category")
    figure.update_xaxes(type="category", tickangle=-90)  # upright labels never reach into their neighbours' boxes
    _layout(figure, 170 + 30 * len(seats))
    table = Table("Token percentiles per seat (nearest rank)",
                  ["seat", "calls", "prompt p50", "p90", "p99", "max", "completion p50", "p90", "p99", "max", "runaways"],
                  [[name, whole(figures.calls), whole(figures.prompt_tokens_p50), whole(figures.prompt_tokens_p90),
                    whole(figures.prompt_tokens_p99), whole(figures.prompt_tokens_max), whole(figures.completion_tokens_p50),
                    whole(figures.completion_tokens_p90), whole(figures.completion_tokens_p99),
                    whole(figures.completion_tokens_max), whole(figures.runaway_count)]
                   for name, (_, figures) in zip(names, seats)])
    caption = ("Where each seat's calls fall by length (half-octave bins; colour = share of that seat's calls, hover for the "
               "count). A lone cell far right in completions is runaway replies.")
    return Figure("lengths", "Prompt and completion lengths", caption, figure, [table])


def inflight_figure(usage: UsageReport | None) -> Figure | None:
    if usage is None or usage.inflight_timeline is None or not usage.inflight_timeline.tokens_by_seat:
        return None
    timeline = usage.inflight_timeline
    seat_of = {name: _seat_name(name, figures) for name, figures in usage.models.items()}
    tracks = sorted(timeline.tokens_by_seat.items(), key=lambda item: -max(item[1]))
    figure = go.Figure()
    for rank, (name, tokens) in enumerate(tracks):
        seat = seat_of.get(name, name)
        peak = usage.models[name].peak_inflight_tokens if name in usage.models else None
        figure.add_trace(go.Scatter(name=seat, x=timeline.instants, y=tokens, mode="lines",
                                    line=dict(width=1.5, color=SEAT_TOKEN_COLOURS[rank % len(SEAT_TOKEN_COLOURS)]),
                                    visible=True if rank < VISIBLE_SEAT_LINES else "legendonly",
                                    hovertemplate=f"<b>{seat}</b> %{{x}}<br>%{{y:,}} tokens in flight"
                                                  f"{'' if peak is None else f' (exact peak {peak:,})'}<extra></extra>"))
    figure.update_yaxes(title_text="tokens in flight", rangemode="tozero")
    _layout(figure, 380)
    caption = (f"Tokens (prompt + completion) in flight per seat at {len(timeline.instants)} evenly spaced instants of the "
               "window; the exact peak between instants is in the KV table. "
               + (f"Seats beyond the {VISIBLE_SEAT_LINES} busiest are hidden: click them in the legend." if len(tracks) > VISIBLE_SEAT_LINES else ""))
    return Figure("inflight", "Tokens in flight over the window", caption, figure, [])


def runaway_figure(usage: UsageReport | None) -> Figure | None:
    if usage is None:
        return None
    groups = usage.runaways_by_key
    rows = [[group.key_alias, group.team or "-", group.user or "-", whole(group.count), whole(group.max_completion_tokens),
             whole(group.total_completion_tokens), ", ".join(group.request_tags) or "-", ", ".join(group.example_request_ids[:3])]
            for group in groups]
    table = Table("Runaway replies by key", ["key alias", "team", "user", "replies", "largest reply", "tokens in all",
                                             "request tags", "example request ids"], rows)
    figure = None
    if groups:
        figure = go.Figure(go.Bar(orientation="h", y=[group.key_alias for group in groups], x=[group.count for group in groups],
                                  marker=dict(color="#e45756"),
                                  customdata=[[group.team or "-", f"{group.max_completion_tokens:,}"] for group in groups],
                                  hovertemplate="<b>%{y}</b> (team %{customdata[0]}): %{x} runaway replies, the largest "
                                                "%{customdata[1]} tokens<extra></extra>"))
        figure.update_yaxes(autorange="reversed", type="category")
        figure.update_xaxes(title_text="runaway replies in the window")
        _layout(figure, max(220, 120 + 30 * len(groups)), showlegend=False)
    threshold = usage.runaway_rule.description
    caption = f"Replies at or above each seat's runaway threshold, grouped by the key that asked. Rule: {threshold}"
    if not groups:
        caption = "No runaway replies in the window. Rule: " + threshold
    return Figure("runaways", "Runaway replies by key", caption, figure, [table])


def all_figures(plan: Plan, plan_raw: dict[str, Any], usage: UsageReport | None, diagnose: DiagnoseReport | None,
                observed: ObservedFootprints | None) -> list[Figure]:
    built = [memory_figure(plan, observed), frontier_figure(plan, plan_raw), kv_figure(plan, usage),
             memory_over_time_figure(plan, diagnose), lengths_figure(usage), inflight_figure(usage), runaway_figure(usage)]
    return [figure for figure in built if figure is not None]
