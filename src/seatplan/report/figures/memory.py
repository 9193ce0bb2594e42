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

# Footprint parts in the order they are stacked, with their names (the footprint table and the overhead's hover).
PART_NAMES: dict[str, str] = {
    "weights": "weights", "kv_cache": "KV cache", "activation_peak": "activation peak", "cuda_graphs": "CUDA graphs",
    "cuda_context": "CUDA context", "nccl_allreduce": "NCCL buffers", "creep_allowance": "creep allowance",
    "observed_non_kv": "observed non-KV", "declared_cap": "declared (fixed seat)",
}
# The parts a bar draws as segments of their own; every other part of a seat (activation peak, CUDA graphs, CUDA
# context, NCCL buffers, creep allowance: 0.1 to 2 GiB each, 1 to 2 px at a GPU's scale) is summed into one
# "overhead" segment, itemised on hover and in the footprint table.
OVERHEAD = "overhead"
SEGMENT_KINDS = ("weights", "kv_cache", OVERHEAD, "observed_non_kv", "declared_cap")
# kind -> (legend name, colour, hatch when an estimate). An estimate is hatched, each kind with its own hatch, so kinds
# read apart without colour; an exact, pinned, declared, policy or observed segment is solid.
SEGMENT_STYLES: dict[str, tuple[str, str, str]] = {
    "weights": ("weights", "#4c78a8", "/"),
    "kv_cache": ("KV cache", "#f58518", "\\"),
    OVERHEAD: ("overhead (small parts summed)", "#54a24b", "x"),
    "observed_non_kv": ("observed non-KV", "#72b7b2", "-"),
    "declared_cap": ("declared (fixed seat)", "#9d755d", "|"),
}
RESERVED_COLOUR = "#8c8c8c"
SPARE_COLOUR = "rgba(84, 162, 75, 0.18)"
KEPT_CLEAR_COLOUR = "rgba(140, 140, 140, 0.22)"
SEAT_EDGE = dict(color="#1d1d1f", width=2)  # the outline that shows where one seat ends and the next begins
BAR_WIDTH = 0.5  # of a GPU's row: the other half holds the seat names above the bar
# Room right of the longest bar for the spare's label (two lines of 11 px, ~100 px), as a share of the largest GPU.
LABEL_ROOM = 0.3
# To choose between a seat's name and its key: the width of a panel on the page read at 1,400 px (the demo's and the
# screenshot tests'), and of one character of the 11 px seat labels. The browser test reads the labels back.
PAGE_PLOTS_PX = 820
LABEL_CHAR_PX = 6.8


@dataclass(frozen=True)
class Segment:
    """One drawn piece of a seat on one GPU: its weights, its KV cache, its overhead (several parts summed), ..."""

    gpu: str
    seat: str
    kind: str
    parts: tuple[FootprintPart, ...]
    base_bytes: int

    @property
    def bytes(self) -> int:
        return sum(part.bytes for part in self.parts)

    @property
    def estimate(self) -> bool:
        return any(part.basis == "estimate" for part in self.parts)


@dataclass(frozen=True)
class SeatSpan:
    """Where one seat sits on one GPU's bar: from ``base_bytes``, ``bytes`` long."""

    gpu: str
    seat: str
    base_bytes: int
    bytes: int


def segment_kind(part: FootprintPart) -> str:
    return part.name if part.name in SEGMENT_KINDS else OVERHEAD


def stack_segments(plan: Plan, seats_by_gpu: dict[str, list[str]]) -> list[Segment]:
    """Each seat's segments stacked on each of its GPUs, after the GPU's reserved memory, in boot order; the small
    parts of a seat summed into its overhead segment."""
    by_name = {seat.name: seat for seat in plan.seats}
    segments = []
    for gpu in plan.gpus:
        label = gpu_label(gpu.host, gpu.index)
        offset = gpu.reserved_bytes
        for seat_name in seats_by_gpu.get(label, []):
            grouped: dict[str, list[FootprintPart]] = defaultdict(list)
            for part in _stack_order(by_name[seat_name].footprint_parts):
                grouped[segment_kind(part)].append(part)
            for kind in SEGMENT_KINDS:
                if grouped.get(kind):
                    segment = Segment(label, seat_name, kind, tuple(grouped[kind]), offset)
                    segments.append(segment)
                    offset += segment.bytes
    return segments


def seat_spans(segments: list[Segment]) -> list[SeatSpan]:
    spans: dict[tuple[str, str], SeatSpan] = {}
    for segment in segments:
        key = (segment.gpu, segment.seat)
        known = spans.get(key)
        spans[key] = (SeatSpan(segment.gpu, segment.seat, segment.base_bytes, segment.bytes) if known is None
                      else SeatSpan(known.gpu, known.seat, known.base_bytes, known.bytes + segment.bytes))
    return list(spans.values())


def _stack_order(parts: list[FootprintPart]) -> list[FootprintPart]:
    rank = {name: position for position, name in enumerate(PART_NAMES)}
    return sorted(parts, key=lambda part: rank.get(part.name, len(rank)))


def seat_keys(plan: Plan) -> dict[str, str]:
    """A short key per seat (its boot-order number), the same in both panels: drawn where the name does not fit."""
    return {seat.name: str(number) for number, seat in enumerate(sorted(plan.seats, key=lambda seat: seat.boot_order), start=1)}


def seat_label(seat: str, span_bytes: int, bytes_per_px: float, keys: dict[str, str]) -> str:
    """The seat's name where it fits over its span, else its key (listed under the chart)."""
    return seat if len(seat) * LABEL_CHAR_PX + 6 <= span_bytes / bytes_per_px else keys[seat]


def spare_label(spare_bytes: int, worst: bool) -> str:
    """The label right of a GPU's bar; the worst GPU's is the number the plan maximises."""
    return f"<b>worst-case spare<br>{gib(spare_bytes)} GiB</b>" if worst else f"spare {gib(spare_bytes)} GiB"


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
                  observed: ObservedFootprints | None, keys: dict[str, str], bytes_per_px: float) -> set[str]:
    """Draw one layout's bars in ``column``; return the seats drawn by their key (too narrow for the name)."""
    gpus = [gpu_label(gpu.host, gpu.index) for gpu in plan.gpus]
    segments = stack_segments(plan, seats_by_gpu)
    footprint_by_seat = {seat.name: seat.footprint_bytes for seat in plan.seats}

    def legend(name: str) -> bool:
        first = name not in shown
        shown.add(name)
        return first

    for kind in SEGMENT_KINDS:
        mine = [segment for segment in segments if segment.kind == kind]
        if not mine:
            continue
        title, colour, hatch = SEGMENT_STYLES[kind]
        figure.add_trace(go.Bar(
            name=title, legendgroup=kind, showlegend=legend(kind), orientation="h", width=BAR_WIDTH,
            y=[segment.gpu for segment in mine], x=[segment.bytes / GiB for segment in mine],
            base=[segment.base_bytes / GiB for segment in mine],
            marker=dict(color=colour, line=dict(color="white", width=1),
                        pattern=dict(shape=[hatch if segment.estimate else "" for segment in mine],
                                     fillmode="overlay", size=6, solidity=0.35)),
            customdata=[[segment.seat, title, f"{segment.bytes:,}", _parts_text(segment), gib(footprint_by_seat[segment.seat])]
                        for segment in mine],
            hovertemplate="<b>%{customdata[0]}</b> on %{y}<br>%{customdata[1]}: %{x:.2f} GiB (%{customdata[2]} B)"
                          "<br>%{customdata[3]}<br>seat total %{customdata[4]} GiB<extra></extra>",
        ), row=1, col=column)
    spans = seat_spans(segments)
    # Each seat outlined over its parts: where one seat ends and the next begins reads at a glance.
    if spans:
        figure.add_trace(go.Bar(
            name="seat (outlined, named above)", legendgroup="seat", showlegend=legend("seat"), orientation="h", width=BAR_WIDTH,
            y=[span.gpu for span in spans], x=[span.bytes / GiB for span in spans], base=[span.base_bytes / GiB for span in spans],
            marker=dict(color="rgba(0, 0, 0, 0)", line=SEAT_EDGE),
            customdata=[[span.seat, keys[span.seat]] for span in spans],
            hovertemplate="<b>%{customdata[0]}</b> (key %{customdata[1]}) on %{y}: %{x:.2f} GiB<extra></extra>"),
            row=1, col=column)
    keyed = set()
    for span in spans:
        text = seat_label(span.seat, span.bytes, bytes_per_px, keys)
        keyed |= {span.seat} if text != span.seat else set()
        # Above the bar (the row's upper half is left free for it), on white: never over hatching.
        figure.add_annotation(x=(span.base_bytes + span.bytes / 2) / GiB, y=gpus.index(span.gpu) - BAR_WIDTH / 2 - 0.02,
                              yanchor="bottom", text=text, showarrow=False, font=dict(size=11, color="#1d1d1f"),
                              row=1, col=column)
    used: dict[str, int] = defaultdict(int)
    for segment in segments:
        used[segment.gpu] += segment.bytes
    reserved = [gpu.reserved_bytes for gpu in plan.gpus]
    if any(reserved):
        figure.add_trace(go.Bar(name="reserved (not seatplan's)", legendgroup="reserved", showlegend=legend("reserved"),
                                orientation="h", width=BAR_WIDTH, y=gpus, x=[value / GiB for value in reserved], base=[0] * len(gpus),
                                marker=dict(color=RESERVED_COLOUR),
                                hovertemplate="%{y}: %{x:.2f} GiB reserved for other processes<extra></extra>"), row=1, col=column)
    spare = [gpu.spare_bytes for gpu in plan.gpus]  # the plan's figure (plan.assemble.plan_gpu), not worked again
    # A keep-clear GPU with no seat is not spare for the plan: it is drawn as kept clear (grey, hatched), never as
    # "spare 95.59 GiB" that a reader would count on.
    open_gpus = [index for index, gpu in enumerate(plan.gpus) if not (gpu.keep_clear and used[gpus[index]] == 0)]
    clear_gpus = [index for index in range(len(plan.gpus)) if index not in open_gpus]
    figure.add_trace(go.Bar(
        name="spare at plateau", legendgroup="spare", showlegend=legend("spare"), orientation="h", width=BAR_WIDTH,
        y=[gpus[i] for i in open_gpus],
        x=[spare[i] / GiB for i in open_gpus], base=[(plan.gpus[i].reserved_bytes + used[gpus[i]]) / GiB for i in open_gpus],
        marker=dict(color=SPARE_COLOUR, line=dict(color="#54a24b", width=1)),
        customdata=[[gib(plan.gpus[i].headroom_bytes), gib(plan.gpus[i].total_bytes)] for i in open_gpus],
        hovertemplate="%{y}: spare at plateau %{x:.2f} GiB of %{customdata[1]} GiB<br>headroom kept: "
                      "%{customdata[0]} GiB<extra></extra>"), row=1, col=column)
    # The spare written right of each bar; the least of them (the worst-case spare, what the plan maximises) in bold:
    # on the chosen layout the plan's own worst GPU (it names one among equals), on the runner-up the first least.
    worst = (gpus.index(plan.worst_case_gpu) if column == 1 and plan.worst_case_gpu in gpus
             else min(open_gpus, key=lambda i: spare[i]) if open_gpus else None)
    for i in open_gpus:
        figure.add_annotation(x=plan.gpus[i].total_bytes / GiB, y=i, xanchor="left", xshift=4, showarrow=False, align="left",
                              text=spare_label(spare[i], i == worst), font=dict(size=11, color="#2d6a27"), row=1, col=column)
    if clear_gpus:
        figure.add_trace(go.Bar(
            name="kept clear (keep_clear: no seat placed)", legendgroup="clear", showlegend=legend("clear"), orientation="h",
            width=BAR_WIDTH, y=[gpus[i] for i in clear_gpus],
            x=[(plan.gpus[i].total_bytes - plan.gpus[i].reserved_bytes) / GiB for i in clear_gpus],
            base=[plan.gpus[i].reserved_bytes / GiB for i in clear_gpus],
            marker=dict(color=KEPT_CLEAR_COLOUR, line=dict(color=RESERVED_COLOUR, width=1),
                        pattern=dict(shape="/", fillmode="overlay", size=10, solidity=0.15, fgcolor=RESERVED_COLOUR)),
            text=["kept clear"] * len(clear_gpus), textposition="inside", insidetextanchor="middle", constraintext="inside",
            textfont=dict(color="#555555"),
            hovertemplate="%{y}: kept clear (keep_clear in the fleet file): the plan places no seat here<extra></extra>"),
            row=1, col=column)
    figure.add_trace(go.Scatter(
        name="headroom line", legendgroup="headroom", showlegend=legend("headroom"), mode="markers", y=gpus,
        x=[(gpu.total_bytes - gpu.headroom_bytes) / GiB for gpu in plan.gpus],
        marker=dict(symbol="line-ns", size=22, line=dict(width=2, color="#e45756")),
        customdata=[gib(gpu.headroom_bytes) for gpu in plan.gpus],
        hovertemplate="%{y}: the plan keeps %{customdata} GiB free; use must stay left of %{x:.2f} GiB<extra></extra>",
    ), row=1, col=column)
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
    return keyed


def _parts_text(segment: Segment) -> str:
    return "<br>".join(f"{PART_NAMES.get(part.name, part.name)}: {gib(part.bytes)} GiB ({part.basis})"
                       + (f", {part.note}" if part.note and len(segment.parts) == 1 else "") for part in segment.parts)


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
    largest_gib = max(gpu.total_bytes for gpu in plan.gpus) / GiB
    x_range = [0, largest_gib * (1 + LABEL_ROOM)]
    bytes_per_px = x_range[1] * GiB / (PAGE_PLOTS_PX / len(titles))
    keys = seat_keys(plan)
    shown: set[str] = set()
    keyed = _memory_panel(figure, plan, chosen, 1, shown, observed, keys, bytes_per_px)
    if runner_up is not None:
        keyed |= _memory_panel(figure, plan, runner_up, 2, shown, None, keys, bytes_per_px)
    figure.update_yaxes(autorange="reversed", type="category")
    figure.update_xaxes(title_text="GiB per GPU", range=x_range)
    apply_layout(figure, max(440, 160 + 80 * len(plan.gpus)), barmode="overlay")
    caption = ("Each bar is one GPU at plateau: every seat outlined and named above its part of the bar (a number where "
               "the name does not fit: the key below), its weights, KV cache and overhead (activation peak, CUDA graphs and "
               "context, NCCL buffers, creep allowance: summed into one segment, each part on hover and in the footprint "
               "table) stacked in boot order, then the spare, written right of the bar; the worst-case spare, the number "
               "the plan maximises, is in bold. Hatched = estimate, each kind with its own hatch; solid = exact, pinned, "
               "declared or policy. A keep-clear GPU is drawn as kept clear. The red tick is where use must stay left of "
               "to keep the headroom.")
    if keyed:
        caption += " Seat keys: " + ", ".join(f"{keys[seat]} = {seat}" for seat in sorted(keyed, key=lambda seat: int(keys[seat]))) + "."
    if runner_up is not None:
        caption += f" Right: the runner-up layout ({plan.runner_ups[0].why_lost})."
    return Figure("memory", "Memory per GPU", caption, figure, [footprint_table(plan), gpu_table(plan)])


def footprint_table(plan: Plan) -> Table:
    rows = []
    for seat in plan.seats:
        for part in _stack_order(seat.footprint_parts):
            rows.append([seat.name, ", ".join(seat.gpus), PART_NAMES.get(part.name, part.name), f"{part.bytes:,}",
                         gib(part.bytes), part.basis, part.note])
    return Table("Footprint parts per GPU", ["seat", "GPUs", "part", "bytes", "GiB", "basis", "why"], rows)


def gpu_table(plan: Plan) -> Table:
    rows = [[gpu_label(gpu.host, gpu.index), gpu.name, gib(gpu.total_bytes), gib(gpu.reserved_bytes), gib(gpu.used_bytes),
             gib(gpu.spare_bytes), gib(gpu.headroom_bytes), ", ".join(gpu.seats) or ("keep clear" if gpu.keep_clear else "-")]
            for gpu in plan.gpus]
    return Table("GPUs at plateau (GiB)", ["GPU", "name", "total", "reserved", "used", "spare", "headroom", "seats"], rows)
