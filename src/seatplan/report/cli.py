"""``seatplan report``: the plan, usage and diagnose documents drawn on one offline HTML page."""

from __future__ import annotations

from pathlib import Path

import typer

from seatplan.clihelp import add_command


def register(app: typer.Typer) -> None:
    add_command(app, "report", report_command)


def check_output_path(output: Path) -> None:
    """Refuse, before any figure is drawn, an ``-o`` that names a folder or lies under a file (the write would
    fail only after the work, or, for a folder, read it as the old report)."""
    from seatplan.errors import SeatplanError

    if output.is_dir():
        raise SeatplanError("is a folder, not the HTML file to write", where=f"-o {output}", fix=f"give a file name, e.g. -o {output / 'report.html'}")
    for parent in output.parents:
        if parent.exists():
            if not parent.is_dir():
                raise SeatplanError(f"{parent} is a file, so nothing can be written under it", where=f"-o {output}",
                                    fix="give -o a path in an existing folder")
            return


def report_command(
    plan: Path = typer.Argument(..., metavar="PLAN", help="a plan saved with `seatplan plan -o plan.json`"),
    usage: Path | None = typer.Option(None, "--usage", help="usage report from `seatplan usage -o usage.json`"),
    observed: Path | None = typer.Option(None, "--observed", help="observations (a diagnose document, or an older observations file); --diagnose alone carries them"),
    diagnose: Path | None = typer.Option(None, "--diagnose", help="the diagnose document from `seatplan diagnose -o diagnose.json` (or --json)"),
    output: Path = typer.Option(Path("report.html"), "-o", "--output", help="the HTML file to write (atomic, with a backup)"),
    json_output: bool = typer.Option(False, "--json", help="print what was written (figures, tables) as JSON"),
) -> None:
    """Draw the plan, the week's usage and the GPUs' history on one self-contained HTML page (works offline)."""
    from seatplan.errors import SeatplanError
    from seatplan.fileio import atomic_write_text
    from seatplan.report.figures import all_figures
    from seatplan.report.inputs import read_inputs
    from seatplan.report.page import report_html, summary_line

    check_output_path(output)
    inputs = read_inputs(plan, usage, diagnose, observed)
    figures = all_figures(inputs.plan, inputs.plan_raw, inputs.usage, inputs.diagnose, inputs.observed)
    page = report_html(inputs, figures, summary_line(inputs.plan))
    try:
        atomic_write_text(output, page)
    except OSError as problem:
        raise SeatplanError(f"cannot write the report ({problem.strerror or problem})", where=f"-o {output}",
                            fix="give -o a file path in a folder you can write to") from None
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
