"""Spare versus moves: the plan's frontier, the chosen layout and its runner-ups."""

from __future__ import annotations

from typing import Any

import plotly.graph_objects as go

from seatplan.documents.plan import Plan
from seatplan.report.figures.common import Figure, Table, apply_layout, gib
from seatplan.units import GiB


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
    apply_layout(figure, 360)
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
