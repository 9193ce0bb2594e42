"""``seatplan diagnose``: what the engines and GPUs really did, and whether the plan held."""

from __future__ import annotations

import shlex
from pathlib import Path

import typer

from seatplan.clihelp import WIDE, add_command, leftover_words
from seatplan.numeric_options import count_option, number_option


def register(app: typer.Typer) -> None:
    add_command(app, "diagnose", diagnose_command, context_settings={"allow_extra_args": True})


def option_for_file(name: str) -> str:
    """The option a file given on its own most likely belongs to, by its name (the fix of that mistake)."""
    lowered = name.lower()
    if lowered.endswith((".db", ".sqlite")):
        return "--beszel"
    if lowered.endswith(".csv"):
        return "--nvidia-smi"
    if lowered.endswith((".prom", ".metrics")):
        return "--vllm-metrics"
    if lowered.endswith((".yaml", ".yml")):
        return "--fleet"
    if lowered.endswith(".json"):
        return "--plan"
    return "--vllm-log"


def diagnose_command(
    context: typer.Context,
    vllm_log: list[str] = typer.Option([], "--vllm-log", metavar="<[NAME=]PATH>",
         help="vLLM log (file, docker logs, journald text/json/export); NAME=PATH names the seat. Repeatable."),
    log_year: int | None = typer.Option(None, "--log-year", parser=count_option("--log-year", minimum=1970, maximum=9999, example="2026"),
                                        help="Year for vLLM's MM-DD timestamps (default: the log file's modification year)."),
    utc_offset: str | None = typer.Option(None, "--utc-offset", help="The GPU hosts' clock offset (+01:00) for vLLM's and nvidia-smi's zone-less timestamps (default: UTC)."),
    beszel: Path | None = typer.Option(None, "--beszel", help="Beszel hub database (beszel_data/data.db)."),
    beszel_system: str | None = typer.Option(None, "--beszel-system", help="Only this Beszel system (name or id)."),
    nvidia_smi: list[str] = typer.Option([], "--nvidia-smi", metavar="<[HOST=]CSV>",
         help=("nvidia-smi CSV log, of --query-gpu with timestamp, index, memory.used and memory.total, or of"
        " --query-compute-apps; HOST=PATH names its host. Repeatable.")),
    host_name: list[str] = typer.Option([], "--host-name", metavar="<MONITOR=HOST>",
         help=("MONITOR=HOST: the plan/fleet host a Beszel system, DCGM hostname or nvidia-smi host stands for"
        " (also hosts[].monitor_names in the fleet). Repeatable.")),
    prometheus: str | None = typer.Option(None, "--prometheus", help="Prometheus URL (DCGM exporter + vLLM series via /api/v1/query_range), or a saved exposition-text file."),
    since: str = typer.Option("14d", "--since", help="With a Prometheus URL: how far back (e.g. 7d, 36h)."),
    step_seconds: int = typer.Option(60, "--step", parser=count_option("--step", maximum=86_400 * 366, example="60"), help="With a Prometheus URL: resolution in seconds."),
    vllm_metrics: list[str] = typer.Option([], "--vllm-metrics", metavar="<URL|FILE>", help="vLLM /metrics: a URL (one scrape now) or saved scrapes. Repeatable."),
    fleet: Path | None = typer.Option(None, "--fleet", help="Fleet file (YAML/JSON): which seat runs on which GPU."),
    plan: Path | None = typer.Option(None, "--plan", help="plan.json to check the observed plateaus against."),
    min_step_mib: float = typer.Option(256.0, "--min-step-mib", parser=number_option("--min-step-mib", minimum=0, maximum=1 << 30, example="256"),
                                       help="Smallest level change reported as a step."),
    min_creep_mib: float = typer.Option(256.0, "--min-creep-mib", parser=number_option("--min-creep-mib", minimum=0, maximum=1 << 30, example="256"),
                                        help="Smallest rise after a boot reported as creep."),
    timeout_s: float | None = typer.Option(None, "--timeout", parser=number_option("--timeout", minimum=0.1, maximum=3600, example="30"),
                                           help="Seconds each request to --prometheus or a --vllm-metrics URL may take, "
                                                "connect to last byte (default: 30 for Prometheus, 10 for /metrics)."),
    output: Path | None = typer.Option(None, "-o", "--output", help="Write the diagnose document (what --json prints), for seatplan plan --observed and report --diagnose."),
    json_output: bool = typer.Option(False, "--json", help="Print one JSON document on stdout."),
    wide: bool = WIDE,
) -> None:
    """Read vLLM logs and GPU memory history: boots, co-boot races, steps, creep, plateaus, the plan check."""
    from seatplan.documents.io import read_plan
    from seatplan.errors import SeatplanError
    from seatplan.fileio import check_output_file, write_output_json
    from seatplan.observe import inputs
    from seatplan.observe.detect import DetectSettings
    from seatplan.observe.diagnose import diagnose
    from seatplan.observe.sources.shared import Rejections
    from seatplan.output import emit_json, progress, to_jsonable

    words = leftover_words(context)
    if words is not None:
        raise SeatplanError(f"each file goes after the option that says what it is, not on its own ({words})", where="seatplan diagnose",
                            fix="write " + " ".join(f"{option_for_file(word)} {shlex.quote(word)}" for word in context.args))
    if not (vllm_log or beszel or nvidia_smi or prometheus or vllm_metrics):
        raise SeatplanError("nothing to read", where="diagnose",
                            fix="pass at least one of --vllm-log, --beszel, --nvidia-smi, --prometheus, --vllm-metrics")
    if output is not None:
        check_output_file(output, "diagnose document", "diagnose.json")
    offset_s = inputs.utc_offset_seconds(utc_offset)
    with progress("reading logs and GPU memory history", enabled=not json_output):
        rejected = Rejections()
        boots, stats = inputs.read_vllm_logs(vllm_log, year=log_year, utc_offset_s=offset_s)
        series, processes, gpu_side_stats = inputs.read_gpu_sources(
            beszel=beszel, beszel_system=beszel_system, nvidia_smi=nvidia_smi, prometheus=prometheus,
            since=since, step_seconds=step_seconds, utc_offset_s=offset_s, rejected=rejected,
            **({} if timeout_s is None else {"timeout_s": timeout_s}))
        inputs.name_hosts(series, inputs.host_names(host_name, fleet))
        stats.extend(gpu_side_stats)
        stats.extend(inputs.read_vllm_metrics(vllm_metrics, rejected, **({} if timeout_s is None else {"timeout_s": timeout_s})))
        report_rejections(rejected.as_list())
        planned = read_plan(plan) if plan is not None else None
        settings = DetectSettings(min_step_mib=min_step_mib, min_creep_mib=min_creep_mib)
        rule_pins = inputs.kv_rule_pins(boots, fleet) if boots else {}
        report, observed = diagnose(boots=boots, stats=stats, series=series, processes=processes, plan=planned,
                                    seat_map=inputs.seat_map(planned, fleet), rule_pins=rule_pins, settings=settings)
        # One document: -o writes what --json prints; plan --observed reads its observed part.
        report = report.model_copy(update={"rejected_inputs": rejected.as_list(), "observed": observed})
    if output is not None:
        write_output_json(output, to_jsonable(report), "diagnose document")
    if json_output:
        emit_json(report)
    else:
        from seatplan.observe.show import show_report

        show_report(report, output, wide)
    raise typer.Exit(plan_exit_code(report))


# With --plan: 0 every planned GPU held its spare, 1 at least one overran it, 3 none overran but some GPU could
# not be checked (no history matched it). 2 stays bad input, as for every command.
EXIT_SPARE_OVERRUN = 1
EXIT_UNCHECKED = 3


def plan_exit_code(report) -> int:
    statuses = {verdict.status for verdict in report.verdicts}
    if "fail" in statuses:
        return EXIT_SPARE_OVERRUN
    return EXIT_UNCHECKED if "unchecked" in statuses else 0


def report_rejections(rejected) -> None:
    """Every left-out line or row on stderr (the report carries them too), so no rejection passes unseen."""
    if not rejected:
        return
    from seatplan.output import error_console

    for entry in rejected:
        plural = "" if entry.count == 1 else "s"
        unit = "row" if "rowid" in entry.where else "line"
        error_console().print(f"warning: {entry.count} {unit}{plural} left out ({entry.reason}); first at {entry.where}",
                              markup=False, soft_wrap=True)
