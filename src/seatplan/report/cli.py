"""``seatplan report``: the plan, usage and diagnose documents drawn on one offline HTML page."""

from __future__ import annotations

from pathlib import Path

import typer

from seatplan.clihelp import add_command


def register(app: typer.Typer) -> None:
    add_command(app, "report", report_command)


def report_command(
    plan: Path = typer.Argument(..., metavar="PLAN", help="a plan saved with `seatplan plan -o plan.json`"),
    usage: Path | None = typer.Option(None, "--usage", help="usage report from `seatplan usage -o usage.json`"),
    observed: Path | None = typer.Option(None, "--observed", help="observations (a diagnose document, or an older observations file); --diagnose alone carries them"),
    diagnose: Path | None = typer.Option(None, "--diagnose", help="the diagnose document from `seatplan diagnose -o diagnose.json` (or --json)"),
    output: Path = typer.Option(Path("report.html"), "-o", "--output", help="the HTML file to write (atomic, with a backup)"),
    json_output: bool = typer.Option(False, "--json", help="print what was written (figures, tables) as JSON"),
) -> None:
    """Draw the plan, the week's usage and the GPUs' history on one self-contained HTML page (works offline)."""
    from seatplan.fileio import check_output_file, write_output_text
    from seatplan.report.figures import all_figures
    from seatplan.report.inputs import read_inputs
    from seatplan.report.page import report_html, summary_line

    check_output_file(output, "HTML file", "report.html")
    inputs = read_inputs(plan, usage, diagnose, observed)
    figures = all_figures(inputs.plan, inputs.plan_raw, inputs.usage, inputs.diagnose, inputs.observed)
    page = report_html(inputs, figures, summary_line(inputs.plan))
    write_output_text(output, page, "report")
    size_bytes = len(page.encode("utf-8"))
    written = {"output": str(output), "bytes": size_bytes,
               "figures": [{"key": figure.key, "title": figure.title,
                            "traces": len(figure.figure.data) if figure.figure is not None else 0,
                            "tables": [table.title for table in figure.tables]} for figure in figures]}
    if json_output:
        from seatplan.output import emit_json

        emit_json(written)
        return
    from seatplan.output import console

    out = console()
    out.print(f"wrote {output} ({size_bytes / 2**20:.1f} MiB, self-contained): "
              + ", ".join(figure.title for figure in figures), soft_wrap=True)
