"""What every figure family of the report shares: the figure and table shapes the page writes, number formats,
the common plotly layout and a GPU's label."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import plotly.graph_objects as go

from seatplan.units import GiB

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

def apply_layout(figure: go.Figure, height: int, **extra: Any) -> go.Figure:
    settings: dict[str, Any] = dict(height=height, font=FONT, template="plotly_white", margin=dict(l=10, r=10, t=40, b=40),
                                    legend=dict(orientation="v", yanchor="top", y=1, x=1.01, xanchor="left"),
                                    hoverlabel=dict(align="left"))
    settings.update(extra)
    figure.update_layout(**settings)
    return figure



def gpu_label(host: str, index: int) -> str:
    return f"{host}:{index}"
