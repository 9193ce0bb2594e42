"""How ``seatplan diff`` and ``seatplan apply --check`` print for people."""

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


OBSERVED_STYLES = {"runs as planned": "green", "runs differently": "yellow", "runs from another starter": "yellow", "not running": "yellow",
                   "port held by a stranger": "bold red"}
WHAT_APPLY_DOES = {"runs as planned": "left running", "runs differently": "restarted from the planned files",
                   "runs from another starter": "cut over: started_by stopped, seatplan's engine started",
                   "not running": "started", "port held by a stranger": "refused: that step fails before anything stops"}


def print_observed(console: Console, rows: list[dict], planned: dict[str, str]) -> None:
    """``apply --check``'s table: per host and seat, where the plan puts it, what runs on its port now, and what apply
    does about it. ``planned``: seat → its GPUs in the plan."""
    console.print(Text("what runs now, per host and seat (read on the host, nothing changed):", style="bold"))
    if not rows:
        console.print(Text("  (no seat was observed: the first play did not run on any host)"))
        return
    width = {"host": max(len(row["host"]) for row in rows), "seat": max(len(row["seat"]) for row in rows),
             "planned": max(len(planned.get(row["seat"], "-")) for row in rows), "state": max(len(row["state"]) for row in rows)}
    for row in sorted(rows, key=lambda item: (item["host"], item["seat"])):
        line = Text(f"  {row['host']:<{width['host']}}  {row['seat']:<{width['seat']}}  {planned.get(row['seat'], '-'):<{width['planned']}}  "
                    f"port {row['port']:<5}  ")
        line.append(f"{row['state']:<{width['state']}}", style=OBSERVED_STYLES.get(row["state"], ""))
        line.append(f"  apply: {WHAT_APPLY_DOES.get(row['state'], '?')}")
        if row.get("detail"):
            line.append(f"; {row['detail']}", style="dim")
        console.print(line, soft_wrap=True)
        for item in row.get("gpu_strangers") or []:
            used = f", {item['used_mib']:,} MiB" if item.get("used_mib") is not None else ""
            console.print(Text(f"    GPU {item['gpu']}: PID {item['pid']} ({item['command']}{used}) is no seat's  ", style="bold red")
                          .append("apply: refused before anything stops", style=""), soft_wrap=True)
    if any(not row.get("gpus_read", True) for row in rows):
        unread = sorted({row["host"] for row in rows if not row.get("gpus_read", True)})
        console.print(Text(f"  GPUs not read on {', '.join(unread)} (no nvidia-smi answered there): a process on a seat's GPU that no "
                           "seat accounts for is not seen", style="dim"), soft_wrap=True)
