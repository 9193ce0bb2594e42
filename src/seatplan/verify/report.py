"""Rich tables for ``seatplan verify`` and ``seatplan upgrade-check`` (``--json`` prints the documents)."""

from __future__ import annotations

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from seatplan.output import fit_table
from seatplan.verify.models import UpgradeReport, Value, VerifyReport


def _cell(value: Value) -> str:
    if isinstance(value, int) and not isinstance(value, bool):
        return f"{value:,}"
    return escape(str(value))


def print_verify(out: Console, report: VerifyReport) -> None:
    table = Table(title="seatplan verify", title_justify="left")
    for column in ("seat", "check", "expected", "seen", ""):
        table.add_column(column, overflow="fold")
    for check in report.checks:
        mark = "[green]ok[/]" if check.ok else "[bold red]FAIL[/]"
        table.add_row(check.seat, check.check, _cell(check.expected), _cell(check.seen), mark)
    out.print(fit_table(table, out.width, stack=True))
    failed = sum(not check.ok for check in report.checks)
    if report.ok:
        out.print(f"[green]all {len(report.checks)} checks pass[/]")
    else:
        out.print(f"[bold red]{failed} of {len(report.checks)} checks fail[/]")


def print_upgrade(out: Console, report: UpgradeReport) -> None:
    table = Table(title=f"vLLM {report.plan_version} → {report.to_version}: what changes for this plan", title_justify="left")
    for column in ("seat", "what", f"on {report.plan_version}", f"on {report.to_version}", "note"):
        table.add_column(column, overflow="fold")
    for change in report.changes:
        table.add_row(change.seat, change.what, _cell(change.now), _cell(change.after), escape(change.note))
    out.print(fit_table(table, out.width, ("note",), stack=True))
    if report.unchanged_seats:
        out.print(f"unchanged KV figures, context and flags: {', '.join(report.unchanged_seats)}")
