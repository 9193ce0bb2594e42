"""Write the report as one self-contained HTML file: plotly.js embedded once, every figure as a div with its
data inline, every table as plain HTML. Nothing is fetched when the page opens (no CDN, fonts or images)."""

from __future__ import annotations

import html
from datetime import UTC, datetime

import plotly.io
from plotly.offline import get_plotlyjs

from seatplan.documents.plan import Plan
from seatplan.report.figures import Figure, Table
from seatplan.report.inputs import ReportInputs
from seatplan.units import GiB

STYLE = """
body { font-family: system-ui, -apple-system, 'Segoe UI', Roboto, sans-serif; margin: 0; color: #1d1d1f; background: #fafafa; }
header { background: #1f2d3d; color: #fff; padding: 18px 28px; }
header h1 { margin: 0 0 6px 0; font-size: 22px; }
header p { margin: 2px 0; color: #d7dde4; font-size: 14px; }
nav { padding: 8px 28px; background: #eef1f4; font-size: 14px; position: sticky; top: 0; z-index: 5; }
nav a { margin-right: 16px; color: #1f4e79; text-decoration: none; }
main { padding: 8px 28px 40px 28px; max-width: 1500px; }
section { background: #fff; border: 1px solid #e3e6ea; border-radius: 6px; margin: 18px 0; padding: 12px 18px; }
section h2 { font-size: 18px; margin: 4px 0 4px 0; }
p.caption { color: #4a4f55; font-size: 13px; margin: 4px 0 8px 0; max-width: 1100px; }
details { margin: 8px 0; font-size: 13px; }
summary { cursor: pointer; color: #1f4e79; }
table { border-collapse: collapse; margin: 6px 0; font-size: 12.5px; }
th, td { border-bottom: 1px solid #e3e6ea; padding: 3px 8px; text-align: left; vertical-align: top; }
th { background: #f3f5f7; }
td.number { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
ul.warnings { color: #8a5300; font-size: 13px; }
"""


def _is_number(cell: str) -> bool:
    return bool(cell) and cell.replace(",", "").replace(".", "").replace("-", "").replace("+", "").replace(" ", "").isdigit()


def table_html(table: Table) -> str:
    head = "".join(f"<th>{html.escape(column)}</th>" for column in table.columns)
    body = "".join(
        "<tr>" + "".join(f"<td class=\"number\">{html.escape(cell)}</td>" if _is_number(cell) else f"<td>{html.escape(cell)}</td>"
                         for cell in row) + "</tr>"
        for row in table.rows)
    return (f"<details><summary>{html.escape(table.title)} ({len(table.rows)} rows)</summary>"
            f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table></details>")


def figure_html(figure: Figure) -> str:
    parts = [f"<section id=\"{figure.key}\"><h2>{html.escape(figure.title)}</h2>",
             f"<p class=\"caption\">{html.escape(figure.caption)}</p>"]
    if figure.figure is not None:
        chart = plotly.io.to_html(figure.figure, include_plotlyjs=False, full_html=False, div_id=f"chart-{figure.key}",
                                  config={"displaylogo": False, "responsive": True})
        parts.append(f"<div class=\"chart\" data-traces=\"{len(figure.figure.data)}\">{chart}</div>")
    parts.extend(table_html(table) for table in figure.tables)
    parts.append("</section>")
    return "".join(parts)


def report_html(inputs: ReportInputs, figures: list[Figure], headline: str, generated_at: datetime | None = None) -> str:
    moment = (generated_at or datetime.now(UTC)).strftime("%Y-%m-%d %H:%M UTC")
    sources = ", ".join(f"{kind}: {html.escape(name)}" for kind, name in inputs.names.items())
    window = ""
    if inputs.usage is not None and inputs.usage.window.since and inputs.usage.window.until:
        window = f"<p>usage window {inputs.usage.window.since:%Y-%m-%d %H:%M} to {inputs.usage.window.until:%Y-%m-%d %H:%M} UTC " \
                 f"({html.escape(inputs.usage.source_format)})</p>"
    nav = "".join(f"<a href=\"#{figure.key}\">{html.escape(figure.title)}</a>" for figure in figures)
    warnings = "".join(f"<li>{html.escape(warning)}</li>" for warning in inputs.plan.warnings)
    return (
        "<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\">"
        "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
        f"<title>seatplan report</title><style>{STYLE}</style>"
        f"<script type=\"text/javascript\">{get_plotlyjs()}</script></head><body>"
        f"<header><h1>seatplan report</h1><p><b>{html.escape(headline)}</b></p><p>{sources}</p>{window}"
        f"<p>generated {moment} by seatplan {html.escape(inputs.plan.inputs.seatplan_version)}, "
        f"vLLM {html.escape(inputs.plan.inputs.vllm_version)} rules</p></header>"
        f"<nav>{nav}</nav><main>"
        + (f"<section id=\"warnings\"><h2>Plan warnings</h2><ul class=\"warnings\">{warnings}</ul></section>" if warnings else "")
        + "".join(figure_html(figure) for figure in figures)
        + "</main></body></html>\n"
    )


def summary_line(plan: Plan) -> str:
    placed = sum(1 for seat in plan.seats if seat.gpus)
    if plan.worst_case_spare_bytes is None:
        return f"{len(plan.seats)} seats: no layout (the fleet does not fit)"
    proof = "proven optimal" if plan.optimal else "best found, not proven optimal"
    return (f"{placed} seats on {sum(1 for gpu in plan.gpus if gpu.seats)} of {len(plan.gpus)} GPUs; worst-case spare "
            f"{plan.worst_case_spare_bytes / GiB:.2f} GiB on {plan.worst_case_gpu} ({proof}, {plan.moves} move(s))")
