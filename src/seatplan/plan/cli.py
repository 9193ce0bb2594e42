"""``seatplan plan``, ``explain``, ``fit`` and ``schema``.

Only Typer is imported at load time; the models, the facts stage, OR-Tools and Rich are imported
inside the commands so ``seatplan --help`` stays fast.
"""

from __future__ import annotations

from pathlib import Path

import typer

from seatplan.clihelp import WIDE, add_command
from seatplan.documents.fleet import DEFAULT_KV_FACTOR
from seatplan.numeric_options import count_option, number_option, size_option, tokens_option
from seatplan.versions import DEFAULT_VLLM_VERSION

EXIT_INFEASIBLE = 3


def register(app: typer.Typer) -> None:
    add_command(app, "plan", plan_command)
    add_command(app, "explain", explain_command)
    add_command(app, "fit", fit_command)
    add_command(app, "schema", schema_command)


def plan_command(
    fleet: Path = typer.Argument(..., metavar="FLEET", help="the fleet file (YAML)"),
    usage: Path | None = typer.Option(None, "--usage", help="usage summary from `seatplan usage --json`"),
    observed: Path | None = typer.Option(None, "--observed", help="observed footprints from `seatplan diagnose`"),
    output: Path | None = typer.Option(None, "-o", "--output", help="save the plan document here (atomic write)"),
    time_limit_s: float = typer.Option(30.0, "--time-limit", parser=number_option("--time-limit", minimum=0.1, maximum=86_400, example="30"),
                                       help="seconds the placement search may take"),
    max_moves: int | None = typer.Option(
        None, "--max-moves", parser=count_option("--max-moves", minimum=0, example="2"),
            help="move at most this many running seats (current_layout): a point on the spare-versus-moves frontier"
    ),
    current: Path | None = typer.Option(
        None, "--current", help="what runs now: the last plan or the directory `seatplan render` wrote (its GPUs and commands)"
    ),
    json_output: bool = typer.Option(False, "--json", help="print the plan document as JSON"),
    wide: bool = WIDE,
) -> None:
    """Size every seat, place them for the largest worst-case spare at plateau, and print the vLLM command lines."""
    from seatplan.documents.fleet_file import load_fleet
    from seatplan.documents.io import read_observed, read_usage
    from seatplan.fileio import check_output_file, write_output_text
    from seatplan.plan.current import read_current, stale_layout_warning
    from seatplan.plan.planner import build_plan

    if output is not None:
        check_output_file(output, "plan", "plan.json")
    loaded = load_fleet(fleet)
    running = read_current(current, loaded.fleet) if current else None
    usage_summary = read_usage(usage) if usage else None
    observations = read_observed(observed) if observed else None
    from seatplan.output import progress

    with progress("sizing and placing the seats", enabled=not json_output):
        plan = build_plan(
            loaded,
            usage=usage_summary,
            usage_path=str(usage) if usage else None,
            observed=observations,
            observed_path=str(observed) if observed else None,
            time_limit_s=time_limit_s,
            max_moves=max_moves,
            current=running,
        )
    stale = stale_layout_warning(loaded.fleet, fleet, running, passed=True) if running else last_plan_disagrees(loaded.fleet, fleet, output)
    plan.warnings += [stale] if stale else []
    # a rollout with no order that fits, or --max-moves no layout meets: as a fleet that does not fit
    placed = plan.worst_case_spare_bytes is not None and plan.infeasible is None and (plan.rollout is None or plan.rollout.fails is None)
    if output is not None and placed:
        write_output_text(output, plan.model_dump_json(indent=2) + "\n", "plan")
    if json_output:
        from seatplan.output import emit_json

        emit_json(plan)
    else:
        from seatplan.output import console
        from seatplan.plan.show import print_plan

        out = console(wide)
        print_plan(out, plan)
        if output is not None and placed:
            out.print(f"plan saved to {output}")
    if not placed:
        # on stderr under --json too: stdout carries the plan, which says why in its own fields
        from rich.markup import escape

        from seatplan.output import error_console

        where = "the plan's infeasible field" if json_output else "the seats above"
        reason = (plan.infeasible.summary.split(". ", 1)[0] if plan.infeasible and not plan.infeasible.seats
                  else f"the fleet does not fit; see {where}" if plan.infeasible else plan.warnings[-1])
        if plan.infeasible is None and plan.rollout is not None and plan.rollout.fails is not None:
            reason = f"the rollout does not fit: {plan.rollout.fails.reason}"
        error_console().print(f"[bold red]error:[/] {escape(reason)}", markup=True)
        raise typer.Exit(EXIT_INFEASIBLE)


def last_plan_disagrees(fleet, fleet_path: Path, output: Path | None) -> str | None:
    """Without --current, the plan about to be replaced (``-o``'s file, when it is a plan of this fleet) is what the
    operator last rolled out, likely: its layout against the fleet file's current_layout."""
    from seatplan.errors import SeatplanError
    from seatplan.plan.current import from_plan, stale_layout_warning

    if output is None or not output.is_file() or not fleet.current_layout:
        return None
    try:
        last = from_plan(output)
    except SeatplanError:
        return None  # not a plan: -o will overwrite it, as before
    if not {seat.name for seat in fleet.seats} & set(last.gpus):
        return None
    return stale_layout_warning(fleet, fleet_path, last, passed=False)


def explain_command(
    plan_file: Path = typer.Argument(..., metavar="PLAN", help="a plan saved with `seatplan plan -o`"),
    seat: str | None = typer.Argument(None, metavar="SEAT", help="the seat to explain"),
    rollout: bool = typer.Option(False, "--rollout", help="the rollout's steps instead, each start's check with its numbers"),
    json_output: bool = typer.Option(False, "--json", help="print the seat's plan entry (with --rollout: the rollout) as JSON"),
    wide: bool = WIDE,
) -> None:
    """Every rule behind one seat's numbers: inputs, results, footprint parts and command line; with --rollout, the rollout's steps and each start's check."""
    import difflib

    from seatplan.documents.io import read_plan
    from seatplan.errors import SeatplanError

    plan = read_plan(plan_file)
    if rollout or seat is None:
        explain_rollout(plan, plan_file, seat, rollout=rollout, json_output=json_output, wide=wide)
        return
    entry = plan.seat(seat)
    if entry is None:
        names = [item.name for item in plan.seats]
        close = difflib.get_close_matches(seat, names, n=1)
        raise SeatplanError(
            f"no seat {seat!r} in this plan" + (f"; did you mean {close[0]}?" if close else ""),
            where=str(plan_file),
            fix=f"name one of: {', '.join(names)}",
        )
    if json_output:
        from seatplan.output import emit_json

        emit_json(entry)
        return
    from seatplan.output import console
    from seatplan.plan.show import explanation_renderable

    out = console(wide)
    out.print(explanation_renderable(entry, out.width), soft_wrap=True)


def explain_rollout(plan, plan_file: Path, seat: str | None, *, rollout: bool, json_output: bool, wide: bool) -> None:
    """``seatplan explain PLAN --rollout`` (issue 29): the steps from what ran, each start's check with its numbers."""
    from seatplan.errors import SeatplanError

    if not rollout or seat is not None:
        raise SeatplanError("name a seat, or pass --rollout (not both)", where=str(plan_file),
                            fix=f"seatplan explain {plan_file} SEAT, or seatplan explain {plan_file} --rollout")
    if json_output:
        from seatplan.output import emit_json

        emit_json(plan.rollout)
        return
    from seatplan.output import console
    from seatplan.plan.rollout_show import rollout_renderable

    out = console(wide)
    out.print(rollout_renderable(plan, out.width), soft_wrap=True)


def fit_command(
    model: str = typer.Argument(..., metavar="MODEL", help="model directory or Hugging Face id"),
    gpu_memory_bytes: int = typer.Option(..., "--gpu-memory", parser=size_option("--gpu-memory", example="96GiB"), metavar="<size>",
                                         help="memory per GPU the seat may use, e.g. 96GiB"),
    tensor_parallel_size: int = typer.Option(1, "--tp", "--tensor-parallel-size", parser=count_option("--tp", maximum=1024, example="2"),
                                        help="tensor-parallel size (GPUs per engine)"),
    dtype: str = typer.Option("auto", "--dtype", help="model dtype: auto, bfloat16, float16, float32"),
    kv_cache_dtype: str = typer.Option("auto", "--kv-cache-dtype", help="auto (the model dtype) or fp8"),
    vllm_version: str = typer.Option(DEFAULT_VLLM_VERSION, "--vllm-version", help="the vLLM release whose formulas to use (0.8 to 0.32)"),
    max_num_seqs: int | None = typer.Option(None, "--max-num-seqs", parser=count_option("--max-num-seqs", example="256"),
                                      help="as vLLM's flag (default: vLLM's server default for this GPU size)"),
    max_num_batched_tokens: int | None = typer.Option(None, "--max-num-batched-tokens", parser=tokens_option("--max-num-batched-tokens", example="8192"),
                                                metavar="<tokens>", help="as vLLM's flag (default: vLLM's server default for this GPU size)"),
    headroom_bytes: int = typer.Option(0, "--headroom", parser=size_option("--headroom", minimum=0, example="2GiB"), metavar="<size>",
                                       help="memory to keep free on the GPU"),
    kv_factor: float = typer.Option(DEFAULT_KV_FACTOR, "--kv-factor", parser=number_option("--kv-factor", minimum=0.01, maximum=100, example="1.0"),
                                    help="the plan's KV factor, for the sized-by-rule answer"),
    enforce_eager: bool = typer.Option(False, "--enforce-eager", help="as vLLM's flag: no CUDA graphs, so none of their memory"),
    json_output: bool = typer.Option(False, "--json", help="print the fit report as JSON"),
    wide: bool = WIDE,
) -> None:
    """The longest context, and the concurrency at the published context, that fit beside the weights and overhead."""
    from seatplan.documents.fleet import Policy
    from seatplan.engine.settings import batch_limits
    from seatplan.errors import SeatplanError
    from seatplan.facts.api import load_model_facts
    from seatplan.facts.models import EngineSettings, parse_vllm_version
    from seatplan.plan.fit import fit_model, fit_shortfall

    try:
        parse_vllm_version(vllm_version)
        policy = Policy(vllm_version=vllm_version, kv_factor=kv_factor)
        settings_limits = batch_limits(max_num_seqs, max_num_batched_tokens, gpu_memory_bytes)
        settings = EngineSettings(
            tensor_parallel_size=tensor_parallel_size,
            dtype=dtype,
            kv_cache_dtype=kv_cache_dtype,
            vllm_version=vllm_version,
            max_num_batched_tokens=settings_limits.max_num_batched_tokens,
        )
    except ValueError as problem:
        raise SeatplanError(str(problem), where="--vllm-version", fix="write the vLLM version as e.g. 0.32") from None
    facts = load_model_facts(model, settings)
    report = fit_model(facts, gpu_memory_bytes=gpu_memory_bytes, headroom_bytes=headroom_bytes, policy=policy, limits=settings_limits, enforce_eager=enforce_eager)
    if json_output:
        from seatplan.output import emit_json

        emit_json(report)
    else:
        from seatplan.output import console
        from seatplan.plan.show import print_fit

        print_fit(console(wide), report)
    shortfall = fit_shortfall(report, tensor_parallel_size)
    if shortfall is not None:
        from seatplan.output import error_console

        error_console().print(f"error: {shortfall}", markup=False, soft_wrap=True)
        raise typer.Exit(EXIT_INFEASIBLE)


def schema_command(
    json_output: bool = typer.Option(False, "--json", help="(the schema is JSON either way)"),
) -> None:
    """Print the fleet file's JSON Schema (point your editor's YAML language server at it)."""
    from seatplan.documents.fleet import Fleet
    from seatplan.output import emit_json

    schema = Fleet.model_json_schema()
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "seatplan fleet file"
    emit_json(schema)
