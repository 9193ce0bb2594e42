"""How ``seatplan diff`` prints for people."""

from __future__ import annotations

from rich.console import Console
from rich.text import Text

from seatplan.render.diff import DiffReport

STYLES = {"new": "green", "removed": "red", "changed": "yellow", "unchanged": "dim"}


def print_diff(console: Console, report: DiffReport) -> None:
    console.print(Text(f"against {report.against}: " + ("changes" if report.changed else "nothing changes"), style="bold"))
    for seat in report.seats:
        console.print(Text(f"{seat.seat}: {seat.status}", style=STYLES[seat.status]))
        for change in seat.changes:
            console.print(Text(f"    {change.what}: {change.old if change.old is not None else '-'} → {change.new if change.new is not None else '-'}"), soft_wrap=True)
    for item in report.files:
        if item.status != "unchanged":
            console.print(Text(f"{item.path}: {item.status}", style=STYLES[item.status]))
            if item.diff:
                console.print(Text(item.diff.rstrip("\n"), style="dim"), soft_wrap=True)
