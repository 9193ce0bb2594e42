"""The report's figures, built from the documents alone (pure: no files, no HTML), one module per family:
memory per GPU, spare versus moves, KV budget per seat, GPU memory over time, and the week's usage; what they share
is in ``common``.

Each builder returns a :class:`Figure`: the plotly figure, the table of the numbers it draws (every
figure's inputs are reachable as text, not only on hover), and a caption saying what is exact and what
is estimated. Builders return None where their documents hold nothing to draw.
"""

from __future__ import annotations

from typing import Any

from seatplan.documents.observed import DiagnoseReport, ObservedFootprints
from seatplan.documents.plan import Plan
from seatplan.documents.usage import UsageReport
from seatplan.report.figures.common import Figure, Table
from seatplan.report.figures.frontier import frontier_figure
from seatplan.report.figures.history import memory_over_time_figure
from seatplan.report.figures.kv import kv_figure
from seatplan.report.figures.memory import memory_figure
from seatplan.report.figures.usage import inflight_figure, lengths_figure, runaway_figure

__all__ = ["Figure", "Table", "all_figures"]


def all_figures(plan: Plan, plan_raw: dict[str, Any], usage: UsageReport | None, diagnose: DiagnoseReport | None,
                observed: ObservedFootprints | None) -> list[Figure]:
    built = [memory_figure(plan, observed), frontier_figure(plan, plan_raw), kv_figure(plan, usage),
             memory_over_time_figure(plan, diagnose), lengths_figure(usage), inflight_figure(usage), runaway_figure(usage)]
    return [figure for figure in built if figure is not None]
