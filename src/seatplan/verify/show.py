"""Rich tables for ``seatplan verify`` and ``seatplan upgrade-check`` (``--json`` prints the documents)."""

from __future__ import annotations

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from seatplan.output import clipped, fit_table, printable
from seatplan.verify.models import UpgradeReport, Value, VerifyReport

# The most a cell shows of a server's text: the JSON document keeps verify's own cut (300 characters).
CELL_CHARS = 300


def _cell(value: Value) -> str:
    """A value as a table cell: figures with thousands separators; text from a server or the fleet with its
    control characters shown escaped, its brackets no markup, and cut to CELL_CHARS."""
    if isinstance(value, int) and not isinstance(value, bool):
        return f"{value:,}"
    return escape(printable(clipped(str(value), CELL_CHARS)))


def print_verify(out: Console, report: VerifyReport) -> None:
    table = Table(title="seatplan verify", title_justify="left")
    for column in ("seat", "check", "expected", "seen", ""):
        table.add_column(column, overflow="fold")
    for check in report.checks:
        mark = "[green]ok[/]" if check.ok else "[bold red]FAIL[/]"
        table.add_row(_cell(check.seat), _cell(check.check), _cell(check.expected), _cell(check.seen), mark)
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
        table.add_row(_cell(change.seat), _cell(change.what), _cell(change.now), _cell(change.after), _cell(change.note))
    out.print(fit_table(table, out.width, ("note",), stack=True))
    if report.unchanged_seats:
        out.print(f"unchanged KV figures, context and flags: {_cell(', '.join(report.unchanged_seats))}")
