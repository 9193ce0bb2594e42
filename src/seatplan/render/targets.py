"""Pure builders: the plan's engines → env files, compose files, the LiteLLM config and Prometheus rules.

Each builder returns ``{relative path: text}``; nothing here touches the disk. Texts carry no time
stamps, so rendering an unchanged plan gives byte-identical files (and apply restarts nothing).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable

from seatplan import versions
from seatplan.documents.launch import Pinned
from seatplan.documents.plan import Plan, PlannedSeat, seat_launch
from seatplan.encode import check_name, compose_literal, dump_yaml, env_assignment, go_template_text, promql_string
from seatplan.engine.change import restart_digest
from seatplan.engine.command import COMMAND_KEY, ENV_FILES_KEY, FROM_HOST_KEY, HEALTH_URL_KEY, RESTART_DIGEST_KEY, SEAT_KEY, shell_line
from seatplan.engine.endpoint import listens_everywhere, published_port
from seatplan.render.engines import ENGINE_KEY_VARIABLE, Engine, FixedSeat
from seatplan.render.gateway_config import GatewayMerge, LiveConfig, SeatRoute, merge_config, own_config
from seatplan.render.settings import RenderSettings, container_launcher
from seatplan.units import MiB, human_bytes

Files = dict[str, str]
# No plan path or time here: an unchanged seat must render byte for byte the same (no restart).
HEADER = "# Written by `seatplan render` (seatplan-render.json says from which plan); edit the fleet file and re-render instead.\n"
HEALTH_START_PERIOD = "15m"  # weight loading and compilation of a large model take minutes
# An env file names the secrets it is given by reference, never their values (docs/fleet.md, "Secrets"): FROM_HOST_KEY
# `NAME=HOSTVAR ...` (the engine's NAME takes the host's HOSTVAR), ENV_FILES_KEY the files on the host the engine reads
# too (systemd EnvironmentFile=, compose env_file); engine.command holds the keys, engine.launch reads them back.
ENGINE_LAUNCHER = "bin/seatplan-engine.sh"
# Starts one engine from its environment: systemd's ExecStart, and script mode's `seatplan-engine.sh ENV_FILE`. The
# names in SEATPLAN_ENV_FROM_HOST are POSIX names (checked at load and at render), so `eval` meets nothing else.
LAUNCHER_SCRIPT = r"""#!/bin/sh
# Written by `seatplan render`: starts a seat's engine. Under systemd its environment comes from EnvironmentFile=
# (the seat's env file, then its env_files); given ENV_FILE (script mode) it reads that file and its
# SEATPLAN_ENV_FILES itself. Each NAME=HOSTVAR of SEATPLAN_ENV_FROM_HOST takes HOSTVAR's value from the environment
# this runs in (systemd: PassEnvironment=); no value is ever written in a file.
set -eu
if [ $# -ge 1 ]; then
  set -a; . "$1"; for file in ${SEATPLAN_ENV_FILES:-}; do . "$file"; done; set +a
fi
for pair in ${SEATPLAN_ENV_FROM_HOST:-}; do
  name=${pair%%=*}; source=${pair#*=}
  if [ "$name" != "$source" ] && eval "[ -n \"\${$source+set}\" ]"; then
    eval "export $name=\"\${$source}\""
  fi
done
# The PID the engine runs as (exec keeps it) and the file its stderr goes to, for apply's health check
# (bin/seatplan-health.py): /health counts only from this process, and its log is shown when it exits.
run_dir="$(dirname "$0")/../run"
if [ -n "${SEATPLAN_SEAT:-}" ] && mkdir -p "$run_dir" 2>/dev/null; then
  log=$(readlink "/proc/$$/fd/2" 2>/dev/null || true)  # read before any redirection of this shell's own
  printf '%s\n%s\n' "$$" "$log" > "$run_dir/$SEATPLAN_SEAT.pid.new" && mv -f "$run_dir/$SEATPLAN_SEAT.pid.new" "$run_dir/$SEATPLAN_SEAT.pid" || true
fi
eval "exec $SEATPLAN_COMMAND"
"""


# ----------------------------------------------------------------------------- env files


def env_file(engine: Engine, settings: RenderSettings) -> str:
    seat, launch = engine.seat, engine.launch
    kv = (f"KV {launch.kv.kv_cache_memory_bytes:,} bytes" if isinstance(launch.kv, Pinned)
          else f"KV sized by --gpu-memory-utilization {launch.gpu_memory_utilization:.3f}")
    # Only what the seat itself decides goes in: apply restarts an engine whenever its env file's bytes change, so
    # a neighbour's edit that shifts the boot order must not touch this file (issue 18).
    lines = [
        HEADER.rstrip("\n"),
        f"# seat {seat.name} (served as {seat.served_model_name}) on {engine.host} {'GPU' if seat.device == 'cuda' else 'CPU budget'} "
        f"{', '.join(engine.gpu_indices)}; {kv}, max_model_len {launch.max_model_len:,}",
    ]
    lines += [env_assignment(key, value) for key, value in sorted(seat.env.items())]
    # secrets by reference: the names only; the launcher (ENGINE_LAUNCHER) copies each value from the host's variable
    if seat.env_from_host:
        lines.append(env_assignment(FROM_HOST_KEY, " ".join(f"{key}={source}" for key, source in sorted(seat.env_from_host.items()))))
    if seat.env_files:
        lines.append(env_assignment(ENV_FILES_KEY, " ".join(seat.env_files)))
    digest = restart_digest(seat_launch(seat))
    lines += [
        env_assignment(SEAT_KEY, seat.name),
        env_assignment(HEALTH_URL_KEY, engine.health_url),
        # the one change model's digest of this launch: apply restarts the engine when the running one carries another
        *([env_assignment(RESTART_DIGEST_KEY, digest)] if digest else []),
        env_assignment(COMMAND_KEY, shell_line(engine.restart_args)),
    ]
    return "\n".join(lines) + "\n"


def env_files(engines: Iterable[Engine], settings: RenderSettings) -> Files:
    return {f"env/{engine.name}.env": env_file(engine, settings) for engine in engines}


# ----------------------------------------------------------------------------- compose


def compose_path(host: str, hosts: list[str]) -> str:
    return "compose.yaml" if len(hosts) == 1 else f"compose/{host}.yaml"


def model_volume(model: str) -> dict:
    """The model directory mounted read-only at the same path (what --model names inside the container)."""
    return {"type": "bind", "source": compose_literal(model), "target": compose_literal(model), "read_only": True}


def compose_service(engine: Engine, previous: Engine | None, settings: RenderSettings) -> dict:
    seat = engine.seat
    launcher = container_launcher(settings)
    model = engine.launch.model
    health_probe = f"import urllib.request; urllib.request.urlopen('http://127.0.0.1:{engine.port}/health', timeout=5)"
    service: dict = {
        "image": compose_literal(engine.image or ""),  # bundle.render_files renders compose only where each engine has one
        "entrypoint": [compose_literal(word) for word in launcher],
        "command": [compose_literal(arg) for arg in engine.boot_args[len(launcher):]],
        "environment": compose_environment(seat),
        "ports": [published_port(settings.bind_host, engine.port)],
        "ipc": "host",
        # the long form: a `:` in the path cannot split it, and `$` is escaped as everywhere in the file
        "volumes": [model_volume(model)] if model.startswith("/") else ["${HF_HOME:-~/.cache/huggingface}:/root/.cache/huggingface"],
        "healthcheck": {
            "test": ["CMD", "python3", "-c", health_probe],
            "interval": "10s",
            "timeout": "5s",
            "retries": 3,
            "start_period": HEALTH_START_PERIOD,
        },
        "restart": "unless-stopped",
    }
    if seat.env_files:
        service["env_file"] = [compose_literal(path) for path in seat.env_files]
    if seat.device == "cuda":
        # Inside the container the reserved GPUs are renumbered from 0: the host's ids go here, not in CUDA_VISIBLE_DEVICES.
        service["deploy"] = {"resources": {"reservations": {"devices": [{"driver": "nvidia", "device_ids": engine.gpu_indices, "capabilities": ["gpu"]}]}}}
    if previous is not None:
        service["depends_on"] = {previous.name: {"condition": "service_healthy"}}
    if not service["environment"]:
        service.pop("environment")
    return service


def compose_environment(seat: PlannedSeat) -> dict[str, str]:
    """The seat's values with every `$` escaped; a secret given by reference as `${HOSTVAR}`, the one `$` left for Compose
    to fill from the environment `docker compose` runs in."""
    environment = {key: compose_literal(value) for key, value in seat.env.items() if key != "CUDA_VISIBLE_DEVICES"}
    environment |= {key: "${" + check_name("env key", source, f"seat {seat.name}, env_from_host") + "}" for key, source in seat.env_from_host.items()}
    return dict(sorted(environment.items()))


def seat_compose_files(engines: list[Engine], settings: RenderSettings) -> Files:
    """``compose-seats/SEAT.yaml``: the seat's own service alone (no boot order), what apply recreates it from, so
    each step writes, backs up and puts back only its seat's files (compose.yaml stays the cold-boot file)."""
    return {seat_compose_path(engine.name): HEADER + dump_yaml({"name": "seatplan", "services": {engine.name: compose_service(engine, None, settings)}})
            for engine in engines}


def seat_compose_path(seat: str) -> str:
    return f"compose-seats/{seat}.yaml"


def fixed_service(fixed: FixedSeat, settings: RenderSettings) -> dict:
    """A fixed seat with an image: compose runs it as given (no shell), before the engines."""
    seat = fixed.seat
    service: dict = {"image": seat.image, "restart": "unless-stopped"}
    if seat.command:
        service["command"] = [compose_literal(word) for word in seat.command]
    if seat.port is not None:
        service["ports"] = [published_port(settings.bind_host, seat.port)]
    if seat.device == "cuda":
        service["deploy"] = {"resources": {"reservations": {"devices": [{"driver": "nvidia", "device_ids": fixed.gpu_indices, "capabilities": ["gpu"]}]}}}
    return service


def fixed_notes(fixed: list[FixedSeat]) -> str:
    """The fixed seats' comment lines: each one compose does not run (no image in the fleet file), named so the
    rollout shows it, and the health URL the engines wait for, which compose itself does not carry (adopt reads both back)."""
    lines = []
    for item in fixed:
        wait = f", the engines wait for {item.seat.health_url}" if item.seat.health_url else ""
        if not item.managed:
            lines.append(f"# not managed by seatplan (no image in the fleet file): {item.name} on GPU {', '.join(item.gpu_indices)}{wait}\n")
        elif wait:
            lines.append(f"# fixed seat {item.name} runs below{wait}\n")
    return "".join(lines)


def compose_hosts(engines: list[Engine], fixed: list[FixedSeat]) -> list[str]:
    """The hosts that get a compose file: each that runs an engine or a fixed seat compose runs (one with an image).
    Ansible's compose file names come from the same list, so the two agree on every path."""
    return sorted({engine.host for engine in engines} | {item.host for item in fixed if item.managed})


def compose_host_line(host: str, engines: bool, path: str) -> str:
    """The comment naming the file's host (adopt reads it back); a host without an engine is not one apply reaches."""
    if engines:
        return f"# host {host}: engines start one at a time in the plan's boot order\n"
    return (f"# host {host}: no engine here, only fixed seats; seatplan apply reaches the hosts that run an engine, "
            f"so start this file there yourself: docker compose -f {path.rsplit('/', 1)[-1]} up -d\n")


def compose_files(engines: list[Engine], settings: RenderSettings, fixed: list[FixedSeat] | None = None) -> Files:
    fixed = fixed or []
    hosts = compose_hosts(engines, fixed)
    files = {}
    for host in hosts:
        on_host = [engine for engine in engines if engine.host == host]
        fixed_here = [item for item in fixed if item.host == host]
        services = {item.name: fixed_service(item, settings) for item in fixed_here if item.managed}
        for position, engine in enumerate(on_host):
            services[engine.name] = compose_service(engine, on_host[position - 1] if position else None, settings)
        last_fixed = next((item.name for item in reversed(fixed_here) if item.managed), None)
        if on_host and last_fixed is not None:  # the fixed seats boot first: the first engine waits for them
            services[on_host[0].name]["depends_on"] = {last_fixed: {"condition": "service_started"}}
        document = {"name": "seatplan", "services": services}
        files[compose_path(host, hosts)] = HEADER + compose_host_line(host, bool(on_host), compose_path(host, hosts)) + fixed_notes(fixed_here) + dump_yaml(document)
    return files


# ----------------------------------------------------------------------------- LiteLLM

def engine_key_variable(engine: Engine, settings: RenderSettings) -> str | None:
    """The variable that holds the engine's key, for the engine and the gateway alike: the seat's own reference (or
    --engine-key-env's, render/engines.py ``keyed``)."""
    return engine.seat.env_from_host.get(ENGINE_KEY_VARIABLE)


def open_engine_warnings(engines: list[Engine], settings: RenderSettings) -> list[str]:
    """Engines reachable from the network without a key let anyone skip the gateway (its keys, budgets and logs)."""
    open_engines = [engine.name for engine in engines if listens_everywhere(settings.bind_host) and engine_key_variable(engine, settings) is None
                    and ENGINE_KEY_VARIABLE not in engine.seat.env]
    if not open_engines:
        return []
    return [f"engines {', '.join(open_engines)} listen on every interface without an API key: anyone on the network can skip the gateway; "
            "render with --bind 127.0.0.1 (the gateway on the same host) or give each seat a key by reference "
            "(env: {VLLM_API_KEY: {from_host_env: ENGINE_KEY}} in the fleet file, docs/fleet.md \"Secrets\")"]



def _loopback(address: str) -> bool:
    try:
        return ipaddress.ip_address(address.strip("[]")).is_loopback
    except ValueError:
        return address == "localhost"


def unreachable_route_warnings(engines: list[Engine], settings: RenderSettings) -> list[str]:
    """An engine bound to the loopback interface only (--bind 127.0.0.1) answers no gateway that reaches it elsewhere
    (host.docker.internal is the Docker bridge's address on the host, a compose service a container's own)."""
    unreachable = [f"{engine.name} ({engine.gateway_base_url})" for engine in engines
                   if settings.bind_host is not None and _loopback(settings.bind_host) and not _loopback(engine.gateway_address or engine.address)]
    if not unreachable:
        return []
    return [f"engines {', '.join(unreachable)}: --bind {settings.bind_host} keeps them on the loopback interface, where the gateway does not "
            "reach them (every route through it would fail): bind them to the address the gateway reaches (the Docker bridge's for "
            "host.docker.internal) or to every interface with an API key"]


def seat_routes(engines: list[Engine], settings: RenderSettings) -> list[SeatRoute]:
    """What the plan decides for each engine's route through the gateway (render/gateway_config.py keeps the rest)."""
    routes = []
    for engine in engines:
        key_variable = engine_key_variable(engine, settings)
        routes.append(SeatRoute(seat=engine.name, served=engine.seat.served_model_name, api_base=f"{engine.gateway_base_url}/v1",
                                api_key=f"os.environ/{key_variable}" if key_variable is not None else None,
                                max_tokens=engine.seat.max_new_tokens, port=engine.port))
    return routes


def gateway_merge(engines: list[Engine], settings: RenderSettings, live: LiveConfig | None) -> GatewayMerge | None:
    """The live gateway config with the seats' routes changed; None where render was given none."""
    return merge_config(live.text, live.display, seat_routes(engines, settings)) if live is not None else None


def litellm_config(engines: list[Engine], settings: RenderSettings, live: LiveConfig | None = None) -> Files:
    """The gateway's config: the live one (``--gateway-config`` where render runs) with only the seats' routes changed,
    else seatplan's own (the routes and the master key's reference)."""
    merged = gateway_merge(engines, settings, live)
    text = merged.text if merged is not None else own_config(seat_routes(engines, settings), settings.gateway_key_env, HEADER)
    return {"litellm/config.yaml": text}


# ----------------------------------------------------------------------------- Prometheus


def gpu_free_rules(plan: Plan, engines: list[Engine], settings: RenderSettings) -> list[dict]:
    cuda_hosts = {engine.host for engine in engines if engine.seat.device == "cuda"}
    rules = []
    for gpu in plan.gpus:
        threshold_mib = (gpu.spare_bytes - settings.free_tolerance_bytes) // MiB
        if gpu.host not in cuda_hosts or not gpu.seats or threshold_mib <= 0:
            continue
        rules.append({
            "alert": "SeatplanGpuFreeBelowPlan",
            "expr": f"DCGM_FI_DEV_FB_FREE{{Hostname={promql_string(gpu.host)},gpu={promql_string(str(gpu.index))}}} < {threshold_mib}",
            "for": settings.free_memory_for,
            "labels": {"severity": "warning", "seatplan_host": go_template_text(gpu.host), "seatplan_gpu": str(gpu.index)},
            "annotations": {
                "summary": f"GPU {go_template_text(gpu.host)}:{gpu.index} has less free memory than the plan left spare",
                "description": f"planned spare at plateau {human_bytes(gpu.spare_bytes)} minus tolerance {human_bytes(settings.free_tolerance_bytes)} = {threshold_mib} MiB; "
                f"free now {{{{ $value }}}} MiB; seats {go_template_text(', '.join(gpu.seats))}",
            },
        })
    return rules


def seat_rules(engine: Engine, version: tuple[int, ...], settings: RenderSettings) -> list[dict]:
    seat = engine.seat
    instance = f"instance={promql_string(engine.instance)}"
    labels = {"severity": "warning", "seat": go_template_text(seat.name)}
    name = go_template_text(seat.name)
    rules = []
    if seat.num_gpu_blocks is not None:
        rules.append({
            "alert": "SeatplanKvBlocksDifferFromPlan",
            "expr": f'vllm:cache_config_info{{{instance},num_gpu_blocks!="{seat.num_gpu_blocks}"}}',
            "labels": labels,
            "annotations": {"summary": f"{name} runs with {{{{ $labels.num_gpu_blocks }}}} KV blocks; the plan pins {seat.num_gpu_blocks}"},
        })
    if seat.kv_cache_tokens is not None and versions.has("metric_kv_cache_size_labels", version):
        # kv_cache_size_tokens = int(num_blocks / blocks per request × max_model_len): a served context
        # other than the plan's moves it even when the block count holds.
        rules.append({
            "alert": "SeatplanContextDiffersFromPlan",
            "expr": f'vllm:cache_config_info{{{instance},kv_cache_size_tokens!="{seat.kv_cache_tokens}"}}',
            "labels": labels,
            "annotations": {
                "summary": f"{name} reports {{{{ $labels.kv_cache_size_tokens }}}} KV tokens; the plan's max_model_len {seat.max_model_len} gives {seat.kv_cache_tokens}"
            },
        })
    usage_metric = "vllm:kv_cache_usage_perc" if versions.has("metric_kv_cache_usage_perc", version) else "vllm:gpu_cache_usage_perc"
    rules.append({
        "alert": "SeatplanKvCacheNearlyFull",
        "expr": f"{usage_metric}{{{instance}}} > {settings.kv_usage_threshold:g}",
        "for": settings.kv_usage_for,
        "labels": labels,
        "annotations": {"summary": f"{name}'s KV cache has been above {settings.kv_usage_threshold:.0%} for {settings.kv_usage_for}: requests queue or are preempted"},
    })
    return rules


def prometheus_rules(plan: Plan, engines: list[Engine], settings: RenderSettings) -> Files:
    version = versions.modelled(plan.inputs.vllm_version)
    rules = gpu_free_rules(plan, engines, settings) + [rule for engine in engines for rule in seat_rules(engine, version, settings)]
    document = {"groups": [{"name": "seatplan", "rules": rules}]}
    header = HEADER + "# engines are matched by instance=\"ADDRESS:PORT\", the label a static scrape target gets\n"
    return {"prometheus/seatplan.rules.yaml": header + dump_yaml(document)}
