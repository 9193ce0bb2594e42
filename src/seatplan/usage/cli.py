"""``seatplan usage``: capacity figures from LiteLLM's spend logs."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from seatplan.clihelp import WIDE, add_command, leftover_words
from seatplan.numeric_options import number_option, tokens_option

if TYPE_CHECKING:  # the command imports them when it runs: `seatplan --help` stays fast
    from seatplan.documents.usage import UsageReport
    from seatplan.usage.queries import Window


def parse_moment(text: str, option: str) -> datetime:
    """An ISO date or time; a zone is converted to UTC, none means UTC (LiteLLM stores UTC wall-clock time)."""
    from seatplan.errors import SeatplanError

    try:
        moment = datetime.fromisoformat(text.strip())
    except ValueError:
        raise SeatplanError(f"cannot read {text!r} as a date or time", where=option,
                            fix="write e.g. 2026-11-23, 2026-11-23T08:00 or 2026-11-23T08:00:00Z (UTC)") from None
    if moment.tzinfo is not None:
        moment = moment.astimezone(UTC).replace(tzinfo=None)
    return moment


MAX_WINDOW_DAYS = 36_525


def resolve_window(since: str | None, until: str | None, days: float | None, now: datetime):
    from seatplan.errors import SeatplanError
    from seatplan.usage.queries import Window

    until_moment = parse_moment(until, "--until") if until else None
    since_moment = parse_moment(since, "--since") if since else None
    if days is not None:
        if since_moment is not None:
            raise SeatplanError("--days and --since both set the window's start", where="--days", fix="give one of them")
        # NaN passes every comparison, and a window reaching before the year 1 is no window: both are refused here.
        if not 0 < days <= MAX_WINDOW_DAYS:
            raise SeatplanError(f"--days must be more than 0 and at most {MAX_WINDOW_DAYS:,} (100 years), got {days:g}",
                                where="--days", fix="give the number of days to look back, e.g. --days 14")
        until_moment = until_moment or now
        try:
            since_moment = until_moment - timedelta(days=days)
        except OverflowError:
            raise SeatplanError(f"--days {days:g} before {until_moment} is before the year 1", where="--days",
                                fix="give fewer days, or --since") from None
    if since_moment is not None and until_moment is not None and since_moment >= until_moment:
        raise SeatplanError(f"the window is empty: {since_moment} is not before {until_moment}", where="--since/--until",
                            fix="put --since before --until")
    return Window(since=since_moment, until=until_moment)


def anchor_days(window: Window, days: float | None, until: str | None, source: str,
                read_all: Callable[[], UsageReport]) -> tuple[Window, str | None]:
    """What ``--days`` counts back from, and the window it gives: ``--until`` when given; for an export, its
    last request (an export is read days or weeks after it was made, so "now" would count back into nothing);
    for a database, now. ``read_all`` reads the whole export once to find its last request."""
    from seatplan.usage.queries import Window
    from seatplan.usage.sources import is_dsn

    if days is None:
        return window, None
    if until is not None:
        return window, f"--until {until}"
    if is_dsn(source):
        return window, "now (the database's clock may differ)"
    if source.startswith(("http://", "https://")):
        return window, "now (the gateway's clock may differ)"
    last = read_all().window.last_request_at
    if last is None:
        return window, "now (the export has no request)"
    end = last + timedelta(microseconds=1)  # the window's end is exclusive: the last request is in it
    return Window(since=end - timedelta(days=days), until=end), f"the export's last request ({last:%Y-%m-%d %H:%M:%S} UTC)"


def usage_command(
    context: typer.Context,
    source: str | None = typer.Option(
        None, "--from", help="https://GATEWAY/ base URL of a LiteLLM gateway (its /spend/logs/v2, key from --key-env / --key-file), "
        "postgresql://USER@HOST/DB DSN of LiteLLM's database (else $SEATPLAN_USAGE_DSN or $DATABASE_URL), "
        "or a CSV / JSON Lines / JSON export of LiteLLM_SpendLogs"),
    key_env: str = typer.Option("LITELLM_MASTER_KEY", "--key-env", help="with an https:// --from: the environment variable "
                                "holding the gateway key (never printed)"),
    key_file: Path | None = typer.Option(None, "--key-file", help="with an https:// --from: a file (chmod 600) whose first "
                                         "line is the key, read when the variable is unset"),
    days: float | None = typer.Option(None, "--days", parser=number_option("--days", minimum=0, maximum=MAX_WINDOW_DAYS, example="14"),
                                      help="the last N days (up to --until, else now)"),
    since: str | None = typer.Option(None, "--since", help="first instant counted, ISO, UTC unless a zone is given"),
    until: str | None = typer.Option(None, "--until", help="end of the window (exclusive), ISO, UTC unless a zone is given"),
    fleet: Path | None = typer.Option(None, "--fleet", help="fleet file: maps LiteLLM model names to seats by served_model_name"),
    runaway_tokens: int | None = typer.Option(
        None, "--runaway-tokens", parser=tokens_option("--runaway-tokens", example="16384"), metavar="<tokens>",
        help="a reply of at least this many completion tokens is a runaway (default: "
        "32 x the seat's median completion, at least 16384, at most 0.9 x max_model_len)"),
    timeout_s: float | None = typer.Option(None, "--timeout", parser=number_option("--timeout", minimum=0.1, maximum=3600, example="30"),
                                           help="with an http(s):// --from: seconds each page request may take, connect to last byte "
                                           "(default 30)"),
    output: Path | None = typer.Option(None, "-o", "--output", help="write the usage JSON here (for `seatplan plan --usage`)"),
    as_json: bool = typer.Option(False, "--json", help="print the usage report as one JSON document"),
    wide: bool = WIDE,
) -> None:
    """Turn LiteLLM's spend logs into per-seat capacity figures: token percentiles, peak in-flight load, runaway replies."""
    from seatplan.fileio import check_output_file, write_output_json
    from seatplan.output import console, emit_json, progress
    from seatplan.usage.queries import Window
    from seatplan.usage.seat_map import SeatMap, load_seat_map
    from seatplan.usage.sources import require_records, resolve_source
    from seatplan.usage.summary import require_calls, summarize_usage
    from seatplan.usage.sweep import default_runaway_rule

    words = leftover_words(context)
    if words is not None:
        from seatplan.errors import SeatplanError

        raise SeatplanError(f"the spend logs go after --from, not on their own ({words})", where="seatplan usage",
                            fix=f"write --from {words}" if source is None and len(context.args) == 1 else "give one source, after --from")
    if output is not None:
        check_output_file(output, "usage report", "usage.json")
    window = resolve_window(since, until, days, datetime.now(UTC).replace(tzinfo=None))
    seat_map = load_seat_map(fleet) if fleet else SeatMap()
    resolved = resolve_source(source)
    require_records(resolved)
    rule = default_runaway_rule(runaway_tokens)
    from seatplan.usage.api import API_TIMEOUT_S  # the API reader's own default, its one owner

    timeout = API_TIMEOUT_S if timeout_s is None else timeout_s
    with progress("reading the spend logs", enabled=not as_json):
        window, anchor = anchor_days(window, days, until, resolved,
                                     lambda: summarize_usage(resolved, Window(), seat_map, rule, key_env=key_env, key_file=key_file,
                                                                     timeout_s=timeout))
        report = summarize_usage(resolved, window, seat_map, rule, key_env=key_env, key_file=key_file, timeout_s=timeout)
    report.window.days_counted_back_from = anchor
    require_calls(report)
    if output is not None:
        write_output_json(output, report.model_dump(mode="json"), "usage report")
    if as_json:
        emit_json(report)
        return
    from seatplan.usage.show import print_usage

    print_usage(report, console(wide))
    if output is not None:
        console().print(f"wrote {output}")


def register(app: typer.Typer) -> None:
    add_command(app, "usage", usage_command, context_settings={"allow_extra_args": True})
