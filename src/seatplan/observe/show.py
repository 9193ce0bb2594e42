"""Rich tables for ``seatplan diagnose`` (people's view; ``--json`` prints the report instead)."""

from __future__ import annotations

from pathlib import Path

from rich.table import Table

from seatplan.documents.observed import Creep, DiagnoseReport
from seatplan.output import console, fit_table
from seatplan.units import format_gib, human_bytes


def _mib(value: float | None) -> str:
    return "–" if value is None else f"{value:,.0f}"


def _rise_bounds(creep: Creep) -> str:
    """The bounds of a creep the records cannot size to 10 % (averaged history without a boot line), else nothing."""
    if creep.rise_determined is not False or creep.rise_low_mib is None or creep.rise_high_mib is None:
        return ""
    return f" (not determinable: {creep.rise_low_mib:,.0f}–{creep.rise_high_mib:,.0f})"


def show_report(report: DiagnoseReport, written: Path | None, wide: bool = False) -> None:
    out = console(wide)
    if report.gpus:
        table = Table(title="GPUs", title_justify="left")
        for column in ("GPU", "samples", "steps (MiB)", "creep", "plateau used MiB", "plateau free MiB", "plan"):
            table.add_column(column, no_wrap=column == "steps (MiB)")
        for gpu in report.gpus:
            # one step a line, never split (the column is no_wrap): a time and its size read together
            steps = "\n".join(f"{s.at:%m-%d %H:%M} {s.delta_mib:+,.0f}" for s in gpu.steps) or "–"
            creep = (f"+{gpu.creep.rise_mib:,.0f} MiB" + _rise_bounds(gpu.creep) + f" in {gpu.creep.hours_to_plateau:.1f} h"
                     + (f", 90 % in {gpu.creep.hours_to_90pct:.1f} h" if gpu.creep.hours_to_90pct is not None else "")
                     + ("" if gpu.creep.levelled_off else " (still rising)")
                     + ("" if gpu.creep.resolved else " (not resolved by the averages)")) if gpu.creep else "–"
            plan = "–"
            if gpu.plan:
                # Pass/fail is the plateau check's (below); here only how far the plateau is from the plan.
                plan = f"{gpu.plan.miss_mib:+,.0f} MiB vs plan" + ("" if gpu.plan.spare_held else " [red](GPU overran)[/]")
            name = f"{gpu.host}:{gpu.index}" if gpu.host else str(gpu.index)
            table.add_row(name, str(gpu.samples), steps, creep, _mib(gpu.plateau_used_mib), _mib(gpu.plateau_free_mib), plan)
        out.print(fit_table(table, out.width, ("samples",)))
    if report.seats:
        table = Table(title="Seats", title_justify="left")
        for column in ("seat", "boots", "KV per boot (GiB)", "engine peak KV use", "observed footprint"):
            table.add_column(column)
        for seat in report.seats:
            kv = " → ".join(format_gib(b.available_kv_bytes) + (" (fragment)" if b.fragment else "")
                            for b in seat.boots if b.available_kv_bytes is not None) or "–"
            peak = f"{seat.stats.peak_kv_cache_usage_pct:.1f} %" if seat.stats and seat.stats.peak_kv_cache_usage_pct is not None else "–"
            observed = f"{human_bytes(seat.observed.footprint_bytes)} ({seat.observed.source})" if seat.observed else "–"
            table.add_row(seat.name, str(len(seat.boots)), kv, peak, observed)
        out.print(fit_table(table, out.width, ("engine peak KV use", "boots")))
    if report.verdicts:
        table = Table(title="Plateau check", title_justify="left")
        for column in ("GPU", "verdict", "planned spare MiB", "observed spare MiB", "why"):
            table.add_column(column)
        colour = {"pass": "green", "fail": "red", "unchecked": "yellow"}
        for verdict in report.verdicts:
            table.add_row(f"{verdict.host}:{verdict.index}" if verdict.host else str(verdict.index),
                          f"[{colour[verdict.status]}]{verdict.status}[/]", _mib(verdict.planned_spare_mib),
                          _mib(verdict.observed_spare_mib), verdict.reason)
        out.print(fit_table(table, out.width))
    for correction in report.gpu_corrections:
        out.print(f"GPU {correction.host or ''}:{correction.index}: {correction.extra_bytes / 2**20:+,.0f} MiB at plateau beyond its seats' "
                  f"footprints, kept at GPU level ({correction.source}); plan --observed reserves it on that GPU")
    for finding in report.findings:
        out.print(f"[bold yellow]{finding.kind}[/]: {finding.message}\n  [bold]fix:[/] {finding.fix}")
    if not report.findings and all(verdict.status == "pass" for verdict in report.verdicts):
        out.print("[green]no findings[/]")
    if written is not None:
        out.print(f"diagnose document written to {written} (for plan --observed and report --diagnose)")
