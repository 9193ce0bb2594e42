"""Running the usage stage the way the CLI does, for tests."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from seatplan.usage.models import UsageReport
from seatplan.usage.queries import Window
from seatplan.usage.report import collect_usage
from seatplan.usage.seats import SeatMap, load_seat_map
from seatplan.usage.sources import open_source
from seatplan.usage.sweep import default_runaway_rule, lowest_runaway_threshold_tokens


def usage_report(source: str | Path, window: Window = Window(), fleet: Path | None = None,
                 runaway_tokens: int | None = None) -> UsageReport:
    seat_map = load_seat_map(fleet) if fleet else SeatMap()
    rule = default_runaway_rule(runaway_tokens)
    request_id_from_tokens = lowest_runaway_threshold_tokens(rule, (seat.max_model_len for seat in seat_map.seats))
    with open_source(str(source), request_id_from_tokens) as opened:
        return collect_usage(opened, window, seat_map, rule)


def figures(report: UsageReport) -> dict[str, Any]:
    """The report without the fields that name the source, for comparing sources."""
    return report.model_dump(mode="json", exclude={"source", "source_format"})
