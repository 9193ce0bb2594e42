"""Readers of the files that describe a running deployment: nvidia-smi CSV, the LiteLLM config, compose files, env files.

Each turns unreadable input into a ``SeatplanError`` naming the file (and line) and the fix; what it reads
is kept as written (strings), for ``assemble`` to check. Files are read with a size cap and YAML with the
fleet loader's alias and depth limits, so a hostile file cannot make adopt build a huge document.
"""

from __future__ import annotations

import contextlib
import csv
import re
import shlex
import subprocess
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import yaml

from seatplan.adopt.evidence import APPS_QUERY, ComputeApp, GpuReading, Launch, Route
from seatplan.adopt.fleet_rules import seat_value_problem
from seatplan.documents.fleet_file import check_yaml_limits
from seatplan.engine.command import COMMAND_KEY
from seatplan.engine.parse import parse_env
from seatplan.errors import SeatplanError
from seatplan.fileio import read_bounded_bytes

MAX_FILE_BYTES = 1 << 20  # a LiteLLM config, a compose file or an env file is a few kilobytes
MAX_ENV_FILES = 1000
SMI_QUERY = "index,name,uuid,memory.total,memory.reserved,memory.used"
# Keys of seatplan's own env files that are not the engine's environment (render/targets.py env_file).
SEATPLAN_KEYS = {"SEATPLAN_SEAT", "SEATPLAN_HEALTH_URL", COMMAND_KEY}
GPU_KEYS = ("CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES")
# The line render writes under its header: "# seat NAME (served as S) on HOST GPU 0, 1; boot order ..." (targets.env_file)
RENDERED_SEAT_LINE = re.compile(r"^# seat (?P<seat>\S+) \(served as \S+\) on (?P<host>\S+) (?P<kind>GPU|CPU budget) (?P<gpus>[\d, ]+);", re.M)
# The words that start a vLLM server; what follows them is the engine's arguments.
LAUNCHER_ENDS = ("serve", "vllm.entrypoints.openai.api_server")


def read_text(path: Path, what: str, fix: str) -> str:
    raw = read_bounded_bytes(path, what, fix, MAX_FILE_BYTES, too_large_fix=f"check that this is the {what}")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as problem:
        line = raw.count(b"\n", 0, problem.start) + 1
        raise SeatplanError(f"the {what} is not UTF-8 text ({problem.reason})", where=f"{path}:{line}", fix="save it as UTF-8") from None


def read_yaml(path: Path, what: str) -> tuple[Any, Any]:
    """The document and its composed node (for line numbers), with the fleet loader's size limits."""
    text = read_text(path, what, f"give the path of the {what}")
    try:
        loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)(text)
        try:
            node = loader.get_single_node()
            if node is None:
                raise SeatplanError(f"the {what} is empty", where=str(path), fix=f"give the path of the {what}")
            check_yaml_limits(node, str(path))
            return loader.construct_document(node), node
        finally:
            loader.dispose()
    except yaml.MarkedYAMLError as problem:
        mark = problem.problem_mark or problem.context_mark
        raise SeatplanError(f"the {what} is not valid YAML: {problem.problem or problem.context}",
                            where=f"{path}:{mark.line + 1 if mark else 1}", fix="correct the YAML at that line") from None
    except yaml.YAMLError as problem:
        raise SeatplanError(f"the {what} is not valid YAML: {problem}", where=str(path), fix="save it as plain UTF-8 YAML") from None


def _child(node: Any, key: str, *, key_node: bool = False) -> Any:
    """The value node under ``key`` (or the key's own node, whose line is where the entry starts)."""
    if isinstance(node, yaml.MappingNode):
        for name_node, value_node in node.value:
            if isinstance(name_node, yaml.ScalarNode) and name_node.value == key:
                return name_node if key_node else value_node
    return None


def _line(node: Any) -> int:
    return int(node.start_mark.line) + 1 if node is not None else 1


# ----------------------------------------------------------------------------- nvidia-smi


def read_smi_csv(text: str, source: str, host: str | None) -> list[GpuReading]:
    """``nvidia-smi --query-gpu=index,name,uuid,memory.total[,memory.reserved] --format=csv[,nounits]``."""
    rows = list(csv.reader(text.splitlines(), skipinitialspace=True))
    header: list[str] | None = None
    gpus: list[GpuReading] = []
    for number, row in enumerate(rows, start=1):
        if not row or not "".join(row).strip():
            continue
        cells = [cell.strip() for cell in row]
        if header is None or cells[0].startswith("index"):
            header = [cell.split(" [")[0].strip() for cell in cells]
            missing = {"index", "name", "uuid", "memory.total"} - set(header)
            if missing:
                raise SeatplanError(f"the nvidia-smi CSV lacks {', '.join(sorted(missing))}", where=f"{source}:{number}",
                                    fix=f"run nvidia-smi --query-gpu={SMI_QUERY} --format=csv")
            continue
        where = f"{source}:{number}"
        if len(cells) != len(header):
            raise SeatplanError(f"{len(cells)} fields under a header of {len(header)}", where=where,
                                fix=f"give the whole output of nvidia-smi --query-gpu={SMI_QUERY} --format=csv")
        values = dict(zip(header, cells))
        reserved, used = values.get("memory.reserved"), values.get("memory.used")
        gpus.append(GpuReading(host=host, index=_whole(values["index"], "index", where), name=values["name"], uuid=values["uuid"],
                               total_mib=_mib(values["memory.total"], "memory.total", where),
                               reserved_mib=None if reserved is None else _mib(reserved, "memory.reserved", where), source=where,
                               used_mib=None if used is None or used.startswith("[") else _mib(used, "memory.used", where)))
    if not gpus:
        raise SeatplanError("no GPU in the nvidia-smi output", where=source, fix=f"run nvidia-smi --query-gpu={SMI_QUERY} --format=csv")
    indices = [gpu.index for gpu in gpus]
    if len(set(indices)) != len(indices):
        raise SeatplanError("a GPU index appears twice (a log of several readings?)", where=source,
                            fix=f"give one reading: nvidia-smi --query-gpu={SMI_QUERY} --format=csv (no -l)")
    return gpus


def _whole(cell: str, what: str, where: str, digits: int = 6) -> int:
    if not cell.isdigit() or len(cell) > digits:
        raise SeatplanError(f"{what} {cell[:40]!r} is not a whole number", where=where, fix="give nvidia-smi's own CSV output")
    return int(cell)


def _mib(cell: str, what: str, where: str) -> int:
    number = cell.removesuffix("MiB").strip()
    return _whole(number, f"{what} (MiB)", where)


def host_and_path(spec: str) -> tuple[str | None, Path]:
    """``PATH`` or ``HOST=PATH`` (as ``seatplan diagnose`` takes them): the host a file came from, when it does not say."""
    host, equals, path = spec.partition("=")
    if not equals or "/" in host or not host:
        return None, Path(spec)
    return host, Path(path)


def read_smi_file(spec: str) -> list[GpuReading]:
    """``CSV`` or ``HOST=CSV``."""
    host, path = host_and_path(spec)
    text = read_text(path, "nvidia-smi CSV", f"save nvidia-smi --query-gpu={SMI_QUERY} --format=csv to a file")
    return read_smi_csv(text, str(path), host)


def read_compute_apps(text: str, source: str) -> list[ComputeApp]:
    """``nvidia-smi --query-compute-apps=pid,process_name,gpu_uuid,used_memory --format=csv[,nounits]``."""
    apps: list[ComputeApp] = []
    header: list[str] | None = None
    fix = f"run nvidia-smi --query-compute-apps={APPS_QUERY} --format=csv"
    for number, row in enumerate(csv.reader(text.splitlines(), skipinitialspace=True), start=1):
        cells = [cell.strip() for cell in row]
        if not "".join(cells):
            continue
        where = f"{source}:{number}"
        if header is None:
            header = [cell.split(" [")[0].strip() for cell in cells]
            missing = {"pid", "gpu_uuid", "used_gpu_memory"} - {"used_gpu_memory" if name == "used_memory" else name for name in header}
            if missing:
                raise SeatplanError(f"the compute-apps CSV lacks {', '.join(sorted(missing))}", where=where, fix=fix)
            continue
        if len(cells) != len(header):
            raise SeatplanError(f"{len(cells)} fields under a header of {len(header)}", where=where, fix=f"give the whole output of {fix.removeprefix('run ')}")
        values = dict(zip(header, cells))
        used = values.get("used_memory", values.get("used_gpu_memory", ""))
        apps.append(ComputeApp(pid=_whole(values["pid"], "pid", where, digits=10), process_name=values.get("process_name", "")[:200],
                               gpu_uuid=values["gpu_uuid"], used_mib=None if used.startswith("[") else _mib(used, "used_memory", where), source=where))
    if header is None:
        raise SeatplanError("the compute-apps CSV is empty (not even its header)", where=source, fix=fix)
    return apps


def read_apps_file(path: Path) -> list[ComputeApp]:
    """The processes on the GPUs (their UUIDs name the GPU, on whichever host)."""
    text = read_text(path, "compute-apps CSV", f"save nvidia-smi --query-compute-apps={APPS_QUERY} --format=csv to a file")
    return read_compute_apps(text, str(path))


def run_smi(timeout_s: float) -> list[GpuReading]:
    """nvidia-smi on this host (``--gpus-from-host``), given ``timeout_s`` to answer (a hung driver hangs it)."""
    command = ["nvidia-smi", f"--query-gpu={SMI_QUERY}", "--format=csv"]
    saved = f"or pass --nvidia-smi CSV saved on the GPU host (nvidia-smi --query-gpu={SMI_QUERY} --format=csv > gpus.csv)"
    try:
        process = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    except OSError as problem:
        raise SeatplanError(f"cannot run nvidia-smi: {problem.strerror or problem}", where="--gpus-from-host",
                            fix=f"run adopt on the GPU host (with nvidia-smi on PATH), {saved}") from None
    try:
        stdout, stderr = process.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        process.kill()
        # one stuck in the driver may not die at once: give it a moment to go, never wait for ever
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.communicate(timeout=1.0)
        raise SeatplanError(f"nvidia-smi did not answer within {timeout_s:g} s", where="--gpus-from-host",
                            fix=f"check the NVIDIA driver (nvidia-smi hangs when it does), give it longer with --timeout, {saved}") from None
    if process.returncode != 0:
        said = stderr.decode("utf-8", "replace").strip() or stdout.decode("utf-8", "replace").strip()
        raise SeatplanError(f"nvidia-smi exited with status {process.returncode}: {said[:300] or 'no message'}", where="--gpus-from-host",
                            fix=f"check the NVIDIA driver, {saved}")
    try:
        text = stdout[:MAX_FILE_BYTES].decode("utf-8")
    except UnicodeDecodeError as problem:
        raise SeatplanError(f"nvidia-smi's output is not UTF-8 text ({problem.reason})", where="--gpus-from-host",
                            fix=f"check what nvidia-smi prints here, {saved}") from None
    try:
        return read_smi_csv(text, "nvidia-smi on this host", None)
    except SeatplanError as problem:
        raise SeatplanError(f"nvidia-smi's output: {problem.message}", where=f"--gpus-from-host ({problem.where})",
                            fix=f"check what `{' '.join(command)}` prints here, {saved}") from None


# ----------------------------------------------------------------------------- LiteLLM config


def read_litellm_config(path: Path) -> list[Route]:
    data, node = read_yaml(path, "LiteLLM config")
    entries = data.get("model_list") if isinstance(data, dict) else None
    if not isinstance(entries, list) or not entries:
        raise SeatplanError("the LiteLLM config has no model_list", where=str(path), fix="give the proxy's config.yaml (the one with model_list:)")
    items = _child(node, "model_list")
    routes = []
    for position, entry in enumerate(entries):
        where = f"{path}:{_line(items.value[position]) if items is not None else 1}"
        if not isinstance(entry, dict) or not isinstance(entry.get("model_name"), str):
            raise SeatplanError(f"model_list[{position}] has no model_name", where=where, fix="each model_list entry has model_name: and litellm_params:")
        given = entry.get("litellm_params")
        params: dict[str, Any] = given if isinstance(given, dict) else {}
        model = params.get("model")
        backend = model.split("/", 1)[1] if isinstance(model, str) and "/" in model else None
        api_base = params.get("api_base")
        base_url = api_base.rstrip("/").removesuffix("/v1") if isinstance(api_base, str) and api_base.startswith(("http://", "https://")) else None
        max_tokens = params.get("max_tokens")
        routes.append(Route(model_name=entry["model_name"], backend_name=backend, base_url=base_url,
                            max_tokens=max_tokens if isinstance(max_tokens, int) and not isinstance(max_tokens, bool) else None, source=where))
    return routes


# ----------------------------------------------------------------------------- commands


def engine_args(words: list[str]) -> list[str] | None:
    """The words after the launcher (``vllm serve``, ``python -m vllm.entrypoints.openai.api_server``); None if none is there."""
    for position, word in enumerate(words):
        if word in LAUNCHER_ENDS and (word != "serve" or (position and words[position - 1].endswith("vllm"))):
            return words[position + 1 :]
    return None


def split_command(text: str, where: str) -> list[str]:
    try:
        return shlex.split(text)
    except ValueError as problem:
        raise SeatplanError(f"the engine command cannot be read as shell words ({problem})", where=where,
                            fix="close the quote in that command") from None


def _unquote(value: str) -> str:
    """parse_env keeps ``"..."``; a hand-written env file quotes that way as often as with ``'``."""
    if len(value) >= 2 and value[0] == value[-1] == '"':
        try:
            words = shlex.split(value)
        except ValueError:
            return value
        return words[0] if len(words) == 1 else value
    return value


# ----------------------------------------------------------------------------- env files


def read_env_file(path: Path) -> Launch | None:
    """One env file: seatplan's own (SEATPLAN_COMMAND) or hand-written (any variable holding a ``vllm serve`` line)."""
    text = read_text(path, "env file", "give a directory of readable .env files")
    values = {key.removeprefix("export ").strip(): _unquote(value) for key, value in parse_env(text).items()}
    command_key = COMMAND_KEY if COMMAND_KEY in values else next((key for key, value in values.items() if _starts_vllm(value)), None)
    if command_key is None:
        return None
    words = split_command(values[command_key], str(path))
    args = engine_args(words)
    launch = Launch(source=str(path), seat=values.get("SEATPLAN_SEAT") or path.stem, args=args if args is not None else words,
                    env={key: value for key, value in values.items() if key not in SEATPLAN_KEYS and key != command_key and key not in GPU_KEYS},
                    health_url=values.get("SEATPLAN_HEALTH_URL"))
    for key in GPU_KEYS:
        if key in values:
            launch.gpus, launch.gpus_source = _gpu_list(values[key]), f"{path}: {key}"
            launch.device = "cuda"
            break
    rendered = RENDERED_SEAT_LINE.search(text)
    if rendered and rendered["seat"] == launch.seat:
        launch.host, launch.host_note = rendered["host"], f"{path}: the comment seatplan render wrote"
        launch.device = "cpu" if rendered["kind"] == "CPU budget" else "cuda"
        if launch.gpus is None:
            launch.gpus, launch.gpus_source = _gpu_list(rendered["gpus"]), f"{path}: the comment seatplan render wrote"
    return launch


def _starts_vllm(value: str) -> bool:
    """A hand-written file's own variable holding the server line (``VLLM_ARGS="vllm serve ..."``)."""
    try:
        return engine_args(shlex.split(value)) is not None
    except ValueError:  # an unclosed quote: not a command line (SEATPLAN_COMMAND is split, and refused, below)
        return False


def _gpu_list(text: str) -> list[str]:
    return [part.strip() for part in text.split(",") if part.strip()]


def read_env_dir(directory: Path) -> list[Launch]:
    if not directory.is_dir():
        raise SeatplanError("not a directory", where=str(directory), fix="give the directory holding the engines' .env files")
    paths = sorted(path for path in directory.iterdir() if path.suffix == ".env" and path.is_file())
    if len(paths) > MAX_ENV_FILES:
        raise SeatplanError(f"more than {MAX_ENV_FILES} .env files", where=str(directory), fix="give the directory of the engines' env files")
    launches = [launch for launch in (read_env_file(path) for path in paths) if launch is not None]
    if not launches:
        raise SeatplanError("no .env file here starts a vLLM engine", where=str(directory),
                            fix="give the directory whose .env files hold the `vllm serve ...` line (SEATPLAN_COMMAND or your own variable)")
    return launches


# ----------------------------------------------------------------------------- compose


def read_compose(path: Path) -> list[Launch]:
    """A compose file in the style of vLLM's docs: the image's entrypoint is the server, ``command:`` its arguments."""
    data, node = read_yaml(path, "compose file")
    services = data.get("services") if isinstance(data, dict) else None
    if not isinstance(services, dict) or not services:
        raise SeatplanError("the compose file has no services", where=str(path), fix="give a compose file with services:")
    host = _rendered_compose_host(path)
    note = f"{path}: the comment seatplan render wrote"
    service_nodes = _child(node, "services")
    launches = []
    for name, service in services.items():
        where = f"{path}:{_line(_child(service_nodes, str(name), key_node=True))}"
        if not isinstance(service, dict):
            raise SeatplanError(f"service {str(name)[:60]!r} is not a mapping", where=where, fix="correct the compose file")
        launch = _compose_launch(str(name), service, where, path)
        if launch is not None:
            launch.host, launch.host_note = host, note if host else ""
            launches.append(launch)
    if host:
        _rendered_waits(path, launches)
    return launches + (_not_managed(path, host) if host else [])


def _rendered_compose_host(path: Path) -> str | None:
    """seatplan's own compose files name their host in a comment line (render/targets.py compose_files)."""
    found = re.search(r"^# host (\S+): (?:engines start one at a time|no engine here, only fixed seats)",
                      read_text(path, "compose file", "give a readable compose file"), re.M)
    return found[1] if found else None


# The lines seatplan's compose file writes for a fixed seat (render/targets.py fixed_notes): one it does not run, and the
# health URL of one it runs; the URL as the fleet file's health_url pattern takes it.
_WAIT = r"the engines wait for (?P<url>https?://[^\s'\"`$\\]+)"
NOT_MANAGED_LINE = re.compile(rf"^# not managed by seatplan \(no image in the fleet file\): (?P<seat>\S+) on GPU (?P<gpus>[\d, ]+?)(?:, {_WAIT})?$")
RUNS_BELOW_LINE = re.compile(rf"^# fixed seat (?P<seat>\S+) runs below, {_WAIT}$")


def _rendered_waits(path: Path, launches: list[Launch]) -> None:
    """The health URL render wrote for each fixed seat its compose file runs (compose itself carries none)."""
    fixed = {launch.seat: launch for launch in launches if launch.fixed and launch.health_url is None}
    for number, line in enumerate(read_text(path, "compose file", "give a readable compose file").splitlines(), start=1):
        found = RUNS_BELOW_LINE.match(line)
        if found and found["seat"] in fixed:
            launch = fixed[found["seat"]]
            launch.health_url, launch.health_note, launch.health_left_out = found["url"], f"{path}:{number}: the comment seatplan render wrote", ""


def _not_managed(path: Path, host: str) -> list[Launch]:
    """The fixed seats a rendered compose file names but does not run: each back where the plan put it."""
    launches = []
    for number, line in enumerate(read_text(path, "compose file", "give a readable compose file").splitlines(), start=1):
        found = NOT_MANAGED_LINE.match(line)
        if found:
            where, note = f"{path}:{number}", f"{path}:{number}: the comment seatplan render wrote"
            launches.append(Launch(source=where, seat=found["seat"], args=[], fixed=True, gpu_evidence="the comment seatplan render wrote",
                                   device="cuda", gpus=_gpu_list(found["gpus"]), gpus_source=note, host=host, host_note=note,
                                   health_url=found["url"], health_note=note))
    return launches


def _compose_words(value: Any, where: str, what: str) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        return [word.replace("$$", "$") for word in split_command(value, where)]
    if isinstance(value, list) and all(isinstance(word, (str, int, float)) and not isinstance(word, bool) for word in value):
        return [str(word).replace("$$", "$") for word in value]  # compose writes a literal $ as $$
    raise SeatplanError(f"{what} is neither a string nor a list of words", where=where, fix=f"write {what} as a list of strings")


def _compose_launch(name: str, service: dict, where: str, path: Path) -> Launch | None:
    entrypoint = _compose_words(service.get("entrypoint"), where, "entrypoint")
    command = _compose_words(service.get("command"), where, "command")
    image = str(service.get("image", ""))
    args = engine_args(entrypoint + command)
    env = _compose_env(service.get("environment"), where)
    if args is None and ("vllm" not in image or not command):
        # not a vLLM engine: a GPU user (speech, TTS) is a fixed seat; the gateway or a database is not adopted
        return _fixed_launch(name, service, env, command, where)
    args = args if args is not None else command
    launch = Launch(source=where, seat=name, args=args, env={key: value for key, value in env.items() if key not in GPU_KEYS})
    named = _service_gpus(service, env, where)
    if named is not None:
        (launch.gpus, launch.gpus_source), launch.device = named, "cuda"
    launch.published_port = _published_port(service.get("ports"), args)
    return launch


def _service_gpus(service: dict, env: dict[str, str], where: str, naming_none: tuple[str, ...] = ()) -> tuple[list[str], str] | None:
    """The GPUs a compose service names and where: its device reservation's ids, else the first GPU key of its
    environment whose value is not one of ``naming_none``."""
    device_ids = _device_ids(service, where)
    if device_ids is not None:
        return device_ids, f"{where}: deploy.resources.reservations.devices.device_ids"
    key = next((key for key in GPU_KEYS if key in env and env[key].strip() not in naming_none), None)
    return None if key is None else (_gpu_list(env[key]), f"{where}: environment {key}")


# Keys of a compose service that seatplan's own compose file carries for a fixed seat (render/targets.py fixed_service);
# a service with any other (volumes, environment, an entrypoint) would lose it if seatplan ran it, so its image is not adopted.
RENDERED_FIXED_KEYS = {"image", "command", "ports", "deploy", "restart", "runtime", "environment"}  # environment: GPU keys only
MAX_DEVICE_INDEX = 1023  # more GPUs than any box has: a larger id is a typo or a hostile file
GPU_UUID = re.compile(r"^(GPU|MIG)-[0-9A-Za-z][0-9A-Za-z/-]{0,100}$")  # MIG: MIG-<uuid> or MIG-GPU-<uuid>/GI/CI
# NVIDIA_VISIBLE_DEVICES values that name no GPU (the NVIDIA container runtime's own words): none/void mount none,
# all mounts every one (which, no file says)
NO_GPU_WORDS = ("none", "void", "")
EVERY_GPU_WORD = "all"


def _gpu_use(service: dict, env: dict[str, str]) -> str | None:
    """What says a service uses GPUs: a device reservation with the gpu capability, ``runtime: nvidia``, or its environment."""
    deploy = service.get("deploy")
    resources = deploy.get("resources") if isinstance(deploy, dict) else None
    reservations = resources.get("reservations") if isinstance(resources, dict) else None
    devices = reservations.get("devices") if isinstance(reservations, dict) else None
    for device in devices if isinstance(devices, list) else []:
        capabilities = device.get("capabilities") if isinstance(device, dict) else None
        if (isinstance(capabilities, list) and "gpu" in capabilities) or (isinstance(device, dict) and device.get("driver") == "nvidia"):
            return "deploy.resources.reservations.devices"
    if service.get("runtime") == "nvidia":
        return "runtime: nvidia"
    return next((f"environment {key}" for key in GPU_KEYS if key in env and env[key].strip() not in NO_GPU_WORDS), None)


def _fixed_launch(name: str, service: dict, env: dict[str, str], command: list[str], where: str) -> Launch | None:
    evidence = _gpu_use(service, env)
    if evidence is None:
        return None
    launch = Launch(source=where, seat=name, args=[], fixed=True, gpu_evidence=evidence, device="cuda",
                    image=str(service["image"]) if isinstance(service.get("image"), str) else None)
    named = _service_gpus(service, env, where, naming_none=(*NO_GPU_WORDS, EVERY_GPU_WORD))
    if named is not None:
        launch.gpus, launch.gpus_source = named
    for word in launch.gpus or []:
        if not (word.isdigit() and int(word) <= MAX_DEVICE_INDEX) and not GPU_UUID.fullmatch(word):
            raise SeatplanError(f"service {name[:60]!r} names GPU {word[:60]!r}, neither a device index (0 to {MAX_DEVICE_INDEX}) nor a GPU UUID",
                                where=where, fix="write the GPUs as nvidia-smi names them: an index (0, 1) or a UUID (GPU-...)")
    published = _first_published(service.get("ports"), where)
    launch.published_port = published[0] if published else None
    launch.args = command
    launch.env = {key: value for key, value in env.items() if key not in GPU_KEYS}
    launch.health_url, launch.health_note, launch.health_left_out = healthcheck_url(service, where)
    refused = seat_value_problem("health_url", launch.health_url) if launch.health_url else None
    if refused is not None:
        launch.health_url, launch.health_refused = None, True
        launch.health_left_out = f"{launch.health_note}: the fleet file refuses the URL ({refused})"
    launch.image_left_out = _not_rendered(service, launch, published)
    return launch


def _first_published(ports: Any, where: str) -> tuple[int, str] | None:
    """The host and container side of a fixed service's first ``HOST:CONTAINER`` port."""
    for entry in ports if isinstance(ports, list) else []:
        parts = str(entry).split(":")
        if len(parts) >= 2 and parts[-2].isdigit():
            if len(parts[-2]) > 5 or not 0 < int(parts[-2]) < 65536:
                raise SeatplanError(f"port {str(entry)[:40]!r} publishes no TCP port", where=where, fix="publish a port from 1 to 65535")
            return int(parts[-2]), parts[-1].split("/")[0]
    return None


def _not_rendered(service: dict, launch: Launch, published: tuple[int, str] | None) -> str:
    """What seatplan's compose file would drop if it ran this service (render/targets.py fixed_service), or ""."""
    # a healthcheck read as health_url goes on as the wait the engines make for it (render's playbook)
    carried = RENDERED_FIXED_KEYS | ({"healthcheck"} if launch.health_url else set())
    dropped = sorted(str(key) for key in service if key not in carried)
    if _interpolates(service.get("command")):
        # compose fills ${VAR} in from its environment; seatplan's compose file writes the word as it reads ($$)
        dropped.append("the compose variables in its command")
    if launch.env:
        dropped.append("environment")
    if published is not None and published[1] != str(published[0]):
        dropped.append(f"the port mapping {published[0]}:{published[1]}")
    if launch.gpus is None:
        dropped.append("its GPUs")
    return ", ".join(dropped)


def _interpolates(value: Any) -> bool:
    """A ``$`` that compose reads as a variable (``$$`` is a literal ``$``) in a string or a list of words."""
    words = [value] if isinstance(value, str) else value if isinstance(value, list) else []
    return any("$" in str(word).replace("$$", "") for word in words)


# ----------------------------------------------------------------------------- healthcheck → health_url

# The programs whose healthcheck fetches a URL; anything else (a script, nc, grpc_health_probe) tells no URL.
HTTP_FETCHERS = ("curl", "wget")
LOOPBACK = ("localhost", "127.0.0.1", "::1", "0.0.0.0")


def healthcheck_url(service: dict, where: str) -> tuple[str | None, str, str]:
    """A fixed service's health URL as the GPU host reaches it, from its compose ``healthcheck``: (URL, where it came
    from, why none). Only a curl or wget of one http(s) URL on the container's loopback, at a published port (or on
    the host's network) is read; the caller checks the URL by the fleet loader's own rule, never trusting it."""
    check = service.get("healthcheck")
    if not isinstance(check, dict) or check.get("disable") in (True, "true"):
        return None, "", ""
    words, why = _healthcheck_words(check.get("test"))
    if words is None:
        return None, "", why
    shown = " ".join(words)[:120]
    if not words or words[0].rsplit("/", 1)[-1] not in HTTP_FETCHERS:
        return None, "", f"its healthcheck runs {shown!r}, not curl or wget of a URL"
    urls = [word for word in words[1:] if word.lower().startswith(("http://", "https://"))]
    if len(urls) != 1:
        return None, "", f"its healthcheck {shown!r} fetches {'no http(s) URL' if not urls else 'more than one URL'}"
    return _host_side(urls[0], service, f"{where}: healthcheck {shown!r}")


def _healthcheck_words(test: Any) -> tuple[list[str] | None, str]:
    """The command of a compose healthcheck ``test`` (the Compose Specification, services.healthcheck.test: a string is
    CMD-SHELL followed by it; a list starts with NONE, CMD (then the words) or CMD-SHELL (then one shell line)), as
    words up to the first shell operator."""
    if isinstance(test, str):
        return _shell_command(test)
    if not isinstance(test, list) or not test or not all(isinstance(word, str) for word in test):
        return None, "" if test is None else "its healthcheck test is neither a string nor a list of strings"
    if test[0] == "NONE":
        return None, ""
    if test[0] == "CMD":
        return [word.replace("$$", "$") for word in test[1:]], ""  # compose writes a literal $ as $$
    if test[0] == "CMD-SHELL":
        return _shell_command(" ".join(test[1:]))
    return None, f"its healthcheck test starts with {test[0][:40]!r}, not NONE, CMD or CMD-SHELL"


def _shell_command(line: str) -> tuple[list[str] | None, str]:
    """The first command of a shell line (``curl -f URL || exit 1`` → curl -f URL), as sh would split its words."""
    lexer = shlex.shlex(line.replace("$$", "$"), posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    try:
        words = list(lexer)
    except ValueError as problem:
        return None, f"its healthcheck cannot be read as shell words ({problem})"
    operators = [position for position, word in enumerate(words) if word and set(word) <= set(lexer.punctuation_chars)]
    return words[: operators[0]] if operators else words, ""


def _host_side(url: str, service: dict, note: str) -> tuple[str | None, str, str]:
    """The URL as the GPU host reaches it: a loopback URL inside the container is the published port on the host."""
    try:
        parts = urlsplit(url)
        port = parts.port or (443 if parts.scheme.lower() == "https" else 80)
    except ValueError:
        return None, "", f"its healthcheck URL {url[:80]!r} is no URL"
    if parts.username is not None or parts.password is not None:
        return None, "", "its healthcheck URL carries a user or password, which a fleet file does not hold"
    if service.get("network_mode") == "host":
        return url, f"{note} (network_mode: host)", ""
    if (parts.hostname or "") not in LOOPBACK:
        return None, "", f"its healthcheck reaches {str(parts.hostname)[:60]!r} from inside the container, which the GPU host may not"
    published = _published(service.get("ports")).get(str(port))
    if published is None:
        return None, "", f"its healthcheck asks container port {port}, which it does not publish, so the GPU host cannot reach it"
    address, host_port = published
    host = address or str(parts.hostname)  # published on every address: the container's own loopback name serves the host too
    netloc = f"[{host}]:{host_port}" if ":" in host else f"{host}:{host_port}"
    return urlunsplit(parts._replace(netloc=netloc)), f"{note}: container port {port} published on {host_port}", ""


def _published(ports: Any) -> dict[str, tuple[str | None, int]]:
    """Each published container port (``[IP:]HOST:CONTAINER[/tcp]``) → the address it is bound to (None: every one) and its port."""
    found: dict[str, tuple[str | None, int]] = {}
    for entry in ports if isinstance(ports, list) else []:
        text = str(entry)
        if text.endswith("/udp"):
            continue  # an HTTP health check is TCP
        container = text.rsplit(":", 1)[-1].split("/")[0]
        rest = text.rsplit(":", 1)[0] if ":" in text else ""
        address, _, host_port = rest.rpartition(":")
        address = address.strip("[]")
        if host_port.isdigit() and len(host_port) <= 5 and 0 < int(host_port) < 65536:
            found.setdefault(container, (None if address in ("", "0.0.0.0", "::") else address, int(host_port)))
    return found


def _compose_env(value: Any, where: str) -> dict[str, str]:
    if value is None:
        return {}
    if isinstance(value, dict):
        return {str(key): "" if item is None else str(item).replace("$$", "$") for key, item in value.items()}
    if isinstance(value, list):
        pairs = [str(item).split("=", 1) for item in value]
        return {pair[0]: pair[1].replace("$$", "$") if len(pair) == 2 else "" for pair in pairs}
    raise SeatplanError("environment is neither a mapping nor a list", where=where, fix="write environment: as KEY: value lines")


def _device_ids(service: dict, where: str) -> list[str] | None:
    deploy = service.get("deploy")
    reservations = deploy.get("resources", {}).get("reservations", {}) if isinstance(deploy, dict) and isinstance(deploy.get("resources"), dict) else {}
    devices = reservations.get("devices") if isinstance(reservations, dict) else None
    if not isinstance(devices, list):
        return None
    ids = [str(device_id) for device in devices if isinstance(device, dict) and isinstance(device.get("device_ids"), list)
           for device_id in device["device_ids"]]
    return ids or None


def _published_port(ports: Any, args: list[str]) -> int | None:
    """The host side of ``HOST:CONTAINER`` for the engine's ``--port`` (vLLM's default 8000)."""
    if not isinstance(ports, list):
        return None
    container = "8000"
    for position, word in enumerate(args[:-1]):
        if word == "--port":
            container = args[position + 1]
    for entry in ports:
        parts = str(entry).split(":")
        if len(parts) >= 2 and parts[-1].split("/")[0] == container and parts[-2].isdigit() and len(parts[-2]) <= 5:
            return int(parts[-2])
    return None


def env_dirs_and_files(env_dirs: list[str], composes: list[str]) -> list[Launch]:
    """``--env-dir [HOST=]DIR`` and ``--compose [HOST=]FILE``: the host named where the files do not name it."""
    launches: list[Launch] = []
    for option, specs, reader in (("--env-dir", env_dirs, read_env_dir), ("--compose", composes, read_compose)):
        for spec in specs:
            host, path = host_and_path(spec)
            for launch in reader(path):
                if launch.host is None and host is not None:
                    launch.host, launch.host_note = host, f"{option} {host}=..."
                launches.append(launch)
    return launches


def smi_readings(specs: list[str], from_host: bool, timeout_s: float) -> list[GpuReading]:
    readings: list[GpuReading] = []
    for spec in specs:
        readings += read_smi_file(spec)
    if from_host:
        readings += run_smi(timeout_s)
    return readings

