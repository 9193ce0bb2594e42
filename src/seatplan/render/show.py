"""How ``seatplan diff`` prints for people."""

from __future__ import annotations

from rich.console import Console
from rich.text import Text

from seatplan.render.diff import DiffReport

STYLES = {"new": "green", "removed": "red", "changed": "yellow", "unchanged": "dim"}
RESTART = {"new": "apply starts the engine", "changed": "apply restarts the engine", "removed": "no longer rendered; apply does not stop it",
           "unchanged": "no restart"}


def print_diff(console: Console, report: DiffReport) -> None:
    restarts = sum(seat.restarts for seat in report.seats)
    unchanged = sum(seat.status == "unchanged" for seat in report.seats)
    summary = f"changes; apply (re)starts {restarts} of {len(report.seats)} engine(s)" if report.changed else "nothing changes"
    console.print(Text(f"against {report.against}: {summary}" + (f"; {unchanged} unchanged" if unchanged else ""), style="bold"))
    for seat in report.seats:
        if seat.status == "unchanged":
            continue  # counted in the headline: a one-seat edit shows one seat
        console.print(Text(f"{seat.seat}: {seat.status} ({RESTART[seat.status]})", style=STYLES[seat.status]))
        for change in seat.changes:
            console.print(Text(f"    {change.what}: {change.old if change.old is not None else '-'} → {change.new if change.new is not None else '-'}"), soft_wrap=True)
    for item in report.files:
        if item.status != "unchanged":
            console.print(Text(f"{item.path}: {item.status}", style=STYLES[item.status]))
            if item.diff:
                console.print(Text(item.diff.rstrip("\n"), style="dim"), soft_wrap=True)
