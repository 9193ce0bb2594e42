"""How ``seatplan diff`` prints for people."""

from __future__ import annotations

from rich.console import Console
from rich.text import Text

from seatplan.render.diff import DiffReport, GatewayDiff

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
    if report.gateway is not None:
        print_gateway(console, report.gateway)
    for item in report.files:
        if item.status != "unchanged":
            console.print(Text(f"{item.path}: {item.status}", style=STYLES[item.status]))
            if item.diff:
                console.print(Text(item.diff.rstrip("\n"), style="dim"), soft_wrap=True)


ROUTE_STYLES = {"added": "green", "removed": "red", "changed": "yellow", "unchanged": "dim"}


def print_gateway(console: Console, gateway: GatewayDiff) -> None:
    """The gateway's config entry by entry: routes added, removed or changed (each changed key, a provider prefix with
    why), and what each entry and the config keep."""
    counts = {status: sum(route.status == status for route in gateway.routes) for status in ROUTE_STYLES}
    summary = ", ".join(f"{count} {status}" for status, count in counts.items() if count) or "no routes"
    console.print(Text(f"the gateway's config, against {gateway.against}: {summary}", style="bold"), soft_wrap=True)
    for route in gateway.routes:
        if route.status == "unchanged":
            continue
        console.print(Text(f"  {route.model_name} ({route.model}): {route.status}", style=ROUTE_STYLES[route.status]), soft_wrap=True)
        for change in route.changes:
            line = f"      {change.what}: {change.old if change.old is not None else '-'} → {change.new if change.new is not None else '-'}"
            console.print(Text(line + (f" ({change.why})" if change.why else "")), soft_wrap=True)
        if route.kept:
            console.print(Text(f"      kept: {', '.join(route.kept)}", style="dim"), soft_wrap=True)
    if gateway.sections_kept:
        console.print(Text(f"  sections kept: {', '.join(gateway.sections_kept)}", style="dim"), soft_wrap=True)
    if gateway.sections_removed:
        console.print(Text(f"  sections removed: {', '.join(gateway.sections_removed)}", style="red"), soft_wrap=True)
