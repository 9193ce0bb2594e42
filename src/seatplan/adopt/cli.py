"""``seatplan adopt``: a fleet file from what already runs."""

from __future__ import annotations

from pathlib import Path

import typer

from seatplan.clihelp import add_command
from seatplan.numeric_options import number_option


def register(app: typer.Typer) -> None:
    add_command(app, "adopt", adopt_command)


def adopt_command(
    output: Path = typer.Option(..., "-o", "--output", help="the fleet file to write"),
    litellm_config: Path | None = typer.Option(None, "--litellm-config", help="the LiteLLM proxy's config.yaml: its model_list names the engines"),
    engine: list[str] = typer.Option([], "--engine", metavar="<URL>", help="an engine's URL (http://HOST:PORT), asked for /v1/models, /version and /metrics; repeatable"),
    compose: list[str] = typer.Option([], "--compose", metavar="<[HOST=]FILE>", help="a compose file that starts engines (command: args, device_ids); repeatable"),
    systemd: list[str] = typer.Option([], "--systemd", metavar="<[HOST=]DIR>", help="a directory of the engines' systemd .service units (ExecStart, "
                                      "Environment, EnvironmentFile; templates with %i); repeatable"),
    env_dir: list[str] = typer.Option([], "--env-dir", metavar="<[HOST=]DIR>", help="a directory of the engines' .env files (the vllm command, CUDA_VISIBLE_DEVICES); repeatable"),
    nvidia_smi: list[str] = typer.Option([], "--nvidia-smi", metavar="<[HOST=]CSV>", help="the CSV of nvidia-smi "
                                         "--query-gpu=index,name,uuid,memory.total,memory.reserved,memory.used --format=csv; repeatable"),
    compute_apps: list[Path] = typer.Option([], "--compute-apps", metavar="<CSV>", help="the CSV of nvidia-smi --query-compute-apps=pid,process_name,gpu_uuid,used_memory "
                                            "--format=csv: the memory a fixed seat (a GPU service that is not vLLM) holds; repeatable"),
    gpus_from_host: bool = typer.Option(False, "--gpus-from-host", help="run nvidia-smi here (the engines' only host)"),
    processes: list[str] = typer.Option([], "--processes", metavar="<[HOST=]FILE>", help="the output of `ps -ww -eo pid,ppid,args` on the GPU host: "
                                        "ties each compute-apps PID to the seat whose vLLM command line it runs under; repeatable"),
    processes_from_host: bool = typer.Option(False, "--processes-from-host", help="read this host's processes from /proc (the engines' only "
                                             "host): ties each compute-apps PID to the seat whose port it or its parent listens on"),
    observed: Path | None = typer.Option(None, "--observed", help="also write what the box shows each seat and GPU holding "
                                         "(the observations `seatplan plan --observed` reads)"),
    timeout_s: float = typer.Option(10.0, "--timeout", parser=number_option("--timeout", minimum=0.1, maximum=3600, example="10"),
                                   help="seconds each request to an engine may take, from connecting to the answer's last byte "
                                   "(and nvidia-smi under --gpus-from-host)"),
    json_output: bool = typer.Option(False, "--json", help="print {fleet, seats, hosts, todo, warnings}"),
) -> None:
    """Write a fleet file from the running deployment: GPUs, engines, their files and the gateway; unknowns are TODO."""
    from seatplan.adopt.api import Sources, adopt_sources
    from seatplan.errors import SeatplanError
    from seatplan.fileio import atomic_write_json, atomic_write_text, check_output_file

    if nvidia_smi and gpus_from_host:
        raise SeatplanError("--nvidia-smi and --gpus-from-host both given", where="adopt", fix="give one source of GPUs")
    sources = Sources(litellm_config=litellm_config, engines=list(engine), composes=list(compose), env_dirs=list(env_dir), systemd_dirs=list(systemd),
                      nvidia_smi=list(nvidia_smi), gpus_from_host=gpus_from_host, timeout_s=timeout_s,
                      compute_apps=list(compute_apps), processes=list(processes), processes_from_host=processes_from_host)
    if observed is not None:
        check_output_file(observed, "--observed", "observed.json")
    result = adopt_sources(sources, str(output))
    atomic_write_text(output, result.text)
    if observed is not None and result.observed is not None:
        atomic_write_json(observed, result.observed.model_dump(mode="json"))
    tree = result.adopted.tree
    summary = {"fleet": str(output), "seats": len(tree["seats"]), "hosts": len(tree["hosts"]), "todo": result.todo,
               "warnings": result.adopted.warnings}
    if observed is not None and result.observed is not None:
        summary["observed"] = {"file": str(observed), "seats": sorted(result.observed.seats), "gpus": len(result.observed.gpus_used)}
    if json_output:
        from seatplan.output import emit_json

        emit_json(summary)
        return
    from seatplan.output import console, error_console

    for warning in result.adopted.warnings:
        error_console().print(f"warning: {warning}", markup=False, highlight=False, soft_wrap=True)
    todo = f"; {len(result.todo)} TODO to fill before `seatplan plan` ({', '.join(result.todo)})" if result.todo else "; seatplan plan takes it as is"
    console().print(f"wrote {output}: {summary['hosts']} host(s), {summary['seats']} seat(s){todo}", markup=False, highlight=False, soft_wrap=True)
    if observed is not None and result.observed is not None:
        seen = result.observed
        console().print(f"wrote {observed}: observed footprints of {len(seen.seats)} seat(s) ({', '.join(sorted(seen.seats)) or 'none tied'}) "
                        f"and {len(seen.gpus_used)} GPU total(s); plan with `seatplan plan {output} --observed {observed}`",
                        markup=False, highlight=False, soft_wrap=True)
