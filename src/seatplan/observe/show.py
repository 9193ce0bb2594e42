"""Rich tables for ``seatplan diagnose`` (people's view; ``--json`` prints the report instead)."""

from __future__ import annotations

from pathlib import Path

from seatplan.documents.observed import DiagnoseReport
from seatplan.output import console
from seatplan.units import format_gib, human_bytes


def _mib(value: float | None) -> str:
    return "–" if value is None else f"{value:,.0f}"


def show_report(report: DiagnoseReport, written: Path | None) -> None:
    from rich.table import Table

    out = console()
    if report.gpus:
        table = Table(title="GPUs", title_justify="left")
        for column in ("GPU", "samples", "steps (MiB)", "creep", "plateau used MiB", "plateau free MiB", "plan"):
            table.add_column(column)
        for gpu in report.gpus:
            steps = ", ".join(f"{s.at:%m-%d %H:%M} {s.delta_mib:+,.0f}" for s in gpu.steps) or "–"
            creep = (f"+{gpu.creep.rise_mib:,.0f} MiB in {gpu.creep.hours_to_plateau:.1f} h"
                     + ("" if gpu.creep.levelled_off else " (still rising)")) if gpu.creep else "–"
            plan = "–"
            if gpu.plan:
                plan = ("[green]spare held[/]" if gpu.plan.spare_held else "[red]spare overrun[/]") + f" ({gpu.plan.miss_mib:+,.0f} MiB vs plan)"
            name = f"{gpu.host}:{gpu.index}" if gpu.host else str(gpu.index)
            table.add_row(name, str(gpu.samples), steps, creep, _mib(gpu.plateau_used_mib), _mib(gpu.plateau_free_mib), plan)
        out.print(table)
    if report.seats:
        table = Table(title="Seats", title_justify="left")
        for column in ("seat", "boots", "KV per boot (GiB)", "engine peak KV use", "observed footprint"):
            table.add_column(column)
        for seat in report.seats:
            kv = " → ".join(format_gib(b.available_kv_bytes) for b in seat.boots if b.available_kv_bytes is not None) or "–"
            peak = f"{seat.stats.peak_kv_cache_usage_pct:.1f} %" if seat.stats and seat.stats.peak_kv_cache_usage_pct is not None else "–"
            observed = f"{human_bytes(seat.observed.footprint_bytes)} ({seat.observed.source})" if seat.observed else "–"
            table.add_row(seat.name, str(len(seat.boots)), kv, peak, observed)
        out.print(table)
    for finding in report.findings:
        out.print(f"[bold yellow]{finding.kind}[/]: {finding.message}\n  [bold]fix:[/] {finding.fix}")
    if not report.findings:
        out.print("[green]no findings[/]")
    if written is not None:
        out.print(f"observations written to {written}")
