"""Rich tables for people: figures per seat, runaway replies by key, keys shared by several clients."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from rich.table import Table

from seatplan.documents.usage import UsageReport, UsageWindow
from seatplan.output import fit_table

# Columns left out first on a narrow terminal (least important first); the rest are never cut.
SEAT_DROP = ("cache hits", "errors", "peak in-flight requests (w/o)", "prompt p50 / p90 / p99 / max", "KV replay: peak blocks")
RUNAWAY_DROP = ("request tags", "user", "team")
SHARED_DROP = ("tag sets", "addresses", "team")


def _number(value: int | None) -> str:
    return "-" if value is None else f"{value:,}"


def _tokens_cell(p50: int | None, p90: int | None, p99: int | None, largest: int | None) -> str:
    return " / ".join(_number(value) for value in (p50, p90, p99, largest))


def _moment(value: datetime | None) -> str:
    return "-" if value is None else f"{value:%Y-%m-%d %H:%M:%S}"


def window_title(window: UsageWindow) -> str:
    """The window as instants (UTC): its bounds where given, else its first and last request; and what --days
    counted back from."""
    since = _moment(window.since) if window.since else f"{_moment(window.first_request_at)} (first request)"
    until = _moment(window.until) if window.until else f"{_moment(window.last_request_at)} (last request)"
    counted = f", --days back from {window.days_counted_back_from}" if window.days_counted_back_from else ""
    return f"{since} .. {until} UTC{counted}"


def print_usage(report: UsageReport, console: Any) -> None:
    window = window_title(report.window)
    seats = Table(title=f"Usage by seat ({report.source_format}: {report.source}; {window})", title_justify="left")
    for header in ("seat / model", "calls", "errors", "cache hits", "prompt p50 / p90 / p99 / max",
                   "completion p50 / p90 / p99 / max", "peak in-flight tokens (w/o runaways)", "peak in-flight requests (w/o)",
                   "runaways (>= tokens)", "KV replay: peak blocks"):
        seats.add_column(header, justify="left" if header == "seat / model" else "right")
    rows = [(name, usage) for name, usage in report.models.items()] + [("(all seats)", report.overall)]
    for name, usage in rows:
        label = name if usage.seat in (None, name) else f"{name} ({usage.seat})"
        threshold = f" (>= {usage.runaway_threshold_tokens:,})" if usage.runaway_threshold_tokens is not None else ""
        seats.add_row(
            label, _number(usage.calls), _number(usage.errors), _number(usage.cache_hits),
            _tokens_cell(usage.prompt_tokens_p50, usage.prompt_tokens_p90, usage.prompt_tokens_p99, usage.prompt_tokens_max),
            _tokens_cell(usage.completion_tokens_p50, usage.completion_tokens_p90, usage.completion_tokens_p99, usage.completion_tokens_max),
            f"{usage.peak_inflight_tokens:,} ({usage.peak_inflight_tokens_without_runaways:,})",
            f"{usage.peak_inflight_requests:,} ({usage.peak_inflight_requests_without_runaways:,})",
            f"{usage.runaway_count:,}{threshold}",
            "-" if usage.kv_replay is None else f"{usage.kv_replay.peak_blocks:,} x {usage.kv_replay.block_size_tokens} tokens",
        )
    console.print(fit_table(seats, console.width, SEAT_DROP))
    if report.reader:
        console.print(f"read by {report.reader}")

    if report.runaways_by_key:
        runaways = Table(title="Runaway replies by key", title_justify="left")
        for header in ("key alias", "team", "user", "count", "largest reply", "request tags", "largest request ids"):
            runaways.add_column(header, justify="right" if header in ("count", "largest reply") else "left")
        for group in report.runaways_by_key:
            runaways.add_row(group.key_alias, group.team or "-", group.user or "-", _number(group.count),
                             _number(group.max_completion_tokens), ", ".join(group.request_tags) or "-",
                             "\n".join(group.example_request_ids))
        console.print(fit_table(runaways, console.width, RUNAWAY_DROP))

    shared = [key for key in report.keys if key.shared]
    if shared:
        keys = Table(title="Keys shared by several clients (a runaway from them cannot be traced to its sender)", title_justify="left")
        for header in ("key alias", "team", "calls", "runaways", "user agents", "addresses", "tag sets"):
            keys.add_column(header, justify="right" if header in ("calls", "runaways") else "left")
        for key in shared:
            keys.add_row(key.key_alias, key.team or "-", _number(key.calls), _number(key.runaway_count),
                         f"{key.distinct_user_agents}: " + ", ".join(key.user_agents),
                         f"{key.distinct_client_ips}: " + ", ".join(key.client_ips),
                         f"{key.distinct_request_tag_sets}: " + "; ".join(",".join(tags) or "(none)" for tags in key.request_tag_sets))
        console.print(fit_table(keys, console.width, SHARED_DROP))

    if report.rejected_rows:
        reasons = ", ".join(f"{reason} {count:,}" for reason, count in report.rejected_by_reason.items())
        console.print(f"[yellow]rejected rows:[/] {report.rejected_rows:,} ({reasons}); left out of every figure above")
    if report.unmapped_models:
        console.print(f"[yellow]names no fleet seat serves:[/] {', '.join(report.unmapped_models)}")
