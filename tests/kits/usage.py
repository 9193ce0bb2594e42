"""Running the usage stage the way the CLI does, for tests."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from seatplan.documents.usage import UsageReport
from seatplan.usage import summary
from seatplan.usage.queries import Window
from seatplan.usage.seat_map import SeatMap, load_seat_map
from seatplan.usage.sweep import default_runaway_rule


def usage_report(source: str | Path, window: Window = Window(), fleet: Path | None = None,
                 runaway_tokens: int | None = None, fast_csv: bool = True) -> UsageReport:
    seat_map = load_seat_map(fleet) if fleet else SeatMap()
    return summary.summarize_usage(str(source), window, seat_map, default_runaway_rule(runaway_tokens), fast_csv)


def figures(report: UsageReport) -> dict[str, Any]:
    """The report without the fields that name the source, for comparing sources."""
    return report.model_dump(mode="json", exclude={"source", "source_format", "reader"})
