"""Compose files: the services that start vLLM engines (``command:`` the engine's arguments, the image's entrypoint
the server) and the GPU services that are not vLLM (fixed seats).

Compose's own rules, followed: variables (``${VAR}``, ``${VAR:-default}``, ``$$``) filled in from the ``.env``
beside the file; ``env_file:`` then ``environment:``; YAML anchors and merge keys (``<<: *engine``, the YAML
loader's); ``ports:`` in the short and long syntax with ranges (``compose_ports``); ``profiles`` (a service runs
only under a profile ``COMPOSE_PROFILES`` names); ``device_ids`` a set of GPUs. ``extends:`` and ``include:`` are
not read: an error says so and how to adopt what compose runs (``docker compose config``).
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

from seatplan.adopt.evidence import Launch
from seatplan.adopt.fleet_rules import seat_value_problem
from seatplan.adopt.readers.commands import engine_words, split_command
from seatplan.adopt.readers.compose_ports import PortMapping, published_port, read_ports
from seatplan.adopt.readers.compose_template import TemplateError, substitute
from seatplan.adopt.readers.dotenv import read_env_text
from seatplan.adopt.readers.healthcheck import healthcheck_url
from seatplan.adopt.readers.text import GPU_KEYS, child, env_file_refusal, gpu_list, line_of, read_text, read_yaml
from seatplan.adopt.readers.vllm_config import spliced
from seatplan.adopt.secrets import secret_references
from seatplan.errors import SeatplanError
from seatplan.units import whole_number


def read_compose(path: Path) -> tuple[list[Launch], list[str]]:
    """A compose file in the style of vLLM's docs (the image's entrypoint is the server, ``command:`` its arguments), with
    its ``${VAR}``s filled in from the ``.env`` beside it; the engines and GPU services it starts, and warnings."""
    raw, node = read_yaml(path, "compose file")
    if isinstance(raw, dict) and "include" in raw:
        raise SeatplanError("the compose file includes others (include:), which adopt does not read", where=f"{path}:{line_of(child(node, 'include', key_node=True))}",
                            fix=f"adopt what compose runs: docker compose -f {path.name} config > resolved.yaml on the host, then --compose resolved.yaml")
    services = raw.get("services") if isinstance(raw, dict) else None
    if not isinstance(services, dict) or not services:
        raise SeatplanError("the compose file has no services", where=str(path), fix="give a compose file with services:")
    warnings: list[str] = []
    dotenv = _dotenv(path, warnings)
    host = _rendered_compose_host(path)
    note = f"{path}: the comment seatplan render wrote"
    service_nodes = child(node, "services")
    active = {word.strip() for word in dotenv.get("COMPOSE_PROFILES", "").split(",") if word.strip()}
    launches = []
    for name, service in services.items():
        where = f"{path}:{line_of(child(service_nodes, str(name), key_node=True))}"
        if not isinstance(service, dict):
            raise SeatplanError(f"service {str(name)[:60]!r} is not a mapping", where=where, fix="correct the compose file")
        if "extends" in service:
            raise SeatplanError(f"service {str(name)[:60]!r} extends another (extends:), which adopt does not read", where=where,
                                fix=f"adopt what compose runs: docker compose -f {path.name} config > resolved.yaml on the host, then --compose resolved.yaml")
        profiles = service.get("profiles")
        if isinstance(profiles, list) and profiles and not active & {str(profile) for profile in profiles}:
            warnings.append(f"{where}: service {str(name)[:60]!r} runs only under profile {', '.join(map(str, profiles))[:80]}, which "
                            "COMPOSE_PROFILES in the .env beside the file does not name: not adopted (set COMPOSE_PROFILES there if it runs)")
            continue
        filled = interpolated(service, dotenv, where, warnings)
        launch = _compose_launch(str(name), filled, service, where, path)
        if launch is not None:
            launch.host, launch.host_note = host, note if host else ""
            if host:
                launch.started_note = f"{path}: seatplan's own compose file (seatplan starts it)"
            launches.append(launch)
    if host:
        _rendered_waits(path, launches)
    return launches + (_not_managed(path, host) if host else []), warnings


def _dotenv(path: Path, warnings: list[str]) -> dict[str, str]:
    """The ``.env`` beside the compose file, which compose reads for interpolation (the shell's environment, which
    also counts for compose, is not this machine's: adopt leaves it out). Its values are interpolated as compose's
    dotenv reader does, each from the lines above it (``MODEL=${BASE}/q06``); a single-quoted one stays literal."""
    beside = path.parent / ".env"
    refused = env_file_refusal(beside) if os.path.lexists(beside) else None
    if refused:
        warnings.append(f"{beside} {refused}: refused, not read (its variables are not known)")
        return {}
    if not beside.is_file():
        return {}
    read = read_env_text(read_text(beside, ".env file", "give a readable .env beside the compose file"), str(beside))
    warnings += read.problems
    values: dict[str, str] = {}
    for key, value in read.values.items():
        where = f"{beside}:{read.lines[key]}"
        values[key] = value if key in read.literal else _substituted(value, values, where, warnings, "the lines above it")
    return values


def interpolated(value: Any, env: dict[str, str], where: str, warnings: list[str]) -> Any:
    """Every string of a service with compose's interpolation applied (``compose_template``)."""
    if isinstance(value, str):
        return _substituted(value, env, where, warnings, "the .env beside the compose file")
    if isinstance(value, list):
        return [interpolated(item, env, where, warnings) for item in value]
    if isinstance(value, dict):
        return {key: interpolated(item, env, where, warnings) for key, item in value.items()}
    return value


def _substituted(text: str, env: dict[str, str], where: str, warnings: list[str], source: str) -> str:
    said: set[str] = set()

    def unset(name: str) -> None:
        if name not in said:
            said.add(name)
            warnings.append(f"{where}: ${{{name}}} is not set in {source}: read as empty, as compose would")

    try:
        return substitute(text, env, unset)
    except TemplateError as problem:
        raise SeatplanError(f"compose stops here: {problem}", where=where,
                            fix=f"set the variable in {source} (adopt reads no shell environment), or correct the template") from None


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
                                   device="cuda", gpus=gpu_list(found["gpus"]), gpus_source=note, host=host, host_note=note,
                                   health_url=found["url"], health_note=note))
    return launches


def _compose_words(value: Any, where: str, what: str) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        return split_command(value, where)
    if isinstance(value, list) and all(isinstance(word, (str, int, float)) and not isinstance(word, bool) for word in value):
        return [str(word) for word in value]
    raise SeatplanError(f"{what} is neither a string nor a list of words", where=where, fix=f"write {what} as a list of strings")


def _compose_launch(name: str, service: dict, raw: dict, where: str, path: Path) -> Launch | None:
    """``service`` with its variables filled in; ``raw`` as written (what seatplan's own compose file would write back)."""
    entrypoint = _compose_words(service.get("entrypoint"), where, "entrypoint")
    command = _compose_words(service.get("command"), where, "command")
    image = str(service.get("image", ""))
    env, notes, warnings = _service_env(service, where, path)
    args = engine_words(entrypoint + command, env)
    if args is None and ("vllm" not in image or not command or entrypoint):
        # not a vLLM engine: a GPU user (speech, TTS) is a fixed seat; the gateway or a database is not adopted
        launch = _fixed_launch(name, service, raw, env, command, where)
        if launch is not None and "vllm" in image:
            launch.warnings.append(f"{where}: service {name[:60]!r} runs vLLM's image, but its entrypoint {' '.join(entrypoint)[:80]!r} starts no "
                                   "engine adopt can read (vllm serve, the module launcher, behind sh -c or exec): adopted as a fixed seat")
        return launch
    args = args if args is not None else command
    launch = Launch(source=where, seat=name, args=args, env={key: value for key, value in env.items() if key not in GPU_KEYS},
                    env_notes=notes, warnings=warnings, **_started(path, name, where))
    launch.args, launch.config_note = spliced(launch.args, path.parent, where)
    launch.secret_refs = secret_references(" ".join(_raw_words(raw.get("entrypoint")) + _raw_words(raw.get("command"))))
    if image:
        launch.engine_image, launch.engine_image_note = image, f"{where}: image"
    named = _service_gpus(service, env, where)
    if named is not None:
        (launch.gpus, launch.gpus_source), launch.device = named, "cuda"
    launch.published_port, launch.port_unknown = published_port(read_ports(service.get("ports"), where), launch.args, where)
    return launch


def _raw_words(value: Any) -> list[str]:
    """A command as written (before compose fills its variables in), as words to look for a secret's variable in."""
    return [str(item) for item in value] if isinstance(value, list) else [value] if isinstance(value, str) else []


def _started(path: Path, name: str, where: str) -> dict[str, Any]:
    """started_by: this compose file (its absolute path here: the same on the GPU host, where adopt runs there) and service."""
    absolute = str(path.absolute())  # as the operator named it (a link kept): on the GPU host, the path compose is run with
    given = {"compose_file": absolute, "compose_service": name}
    if seat_value_problem("started_by", given) is not None:
        return {"started_note": f"{where}: compose service {name[:60]!r} of {absolute[:120]!r}, which a fleet file cannot name "
                "(a path of letters, digits and ._/@+-): write started_by by hand"}
    return {"started_by": given, "started_note": f"{where}: the compose service that runs it (the file's path where adopt ran: "
            "correct it if the GPU host keeps it elsewhere)"}


def _service_env(service: dict, where: str, path: Path) -> tuple[dict[str, str], dict[str, str], list[str]]:
    """``env_file:`` (in order, a later file winning; ``required: false`` for one that may be missing) then
    ``environment:`` over it, as compose merges them; where each key came from; warnings."""
    env: dict[str, str] = {}
    notes: dict[str, str] = {}
    warnings: list[str] = []
    given = service.get("env_file")
    for entry in [given] if isinstance(given, (str, dict)) else given if isinstance(given, list) else []:
        named = entry.get("path") if isinstance(entry, dict) else entry
        required = not (isinstance(entry, dict) and entry.get("required") is False)
        if not isinstance(named, str) or not named:
            raise SeatplanError("env_file names no file", where=where, fix="write env_file: as a path or a list of paths")
        file = path.parent / named
        refused = env_file_refusal(file) if os.path.lexists(file) else None
        if refused:
            warnings.append(f"{where}: env_file {named[:80]!r}: {file} {refused}: refused, not read (its variables are not known)")
            continue
        if file.is_file() and not file.resolve().is_relative_to(path.parent.resolve()):
            warnings.append(f"{where}: env_file {named[:80]!r} is outside the compose file's folder ({file.resolve()}): read as compose "
                            "would, but check that it is the engine's own file")
        if not file.is_file():
            if required:
                warnings.append(f"{where}: env_file {named[:80]!r} is not beside the compose file: its variables are not known "
                                "(copy it from the GPU host beside the compose file)")
            continue
        read = read_env_text(read_text(file, "env file", "give readable env files"), str(file))
        warnings += read.problems
        for key, value in read.values.items():
            env[key], notes[key] = value, f"{file}:{read.lines[key]} (env_file)"
    for key, value in _compose_env(service.get("environment"), where).items():
        env[key], notes[key] = value, where
    return env, notes, warnings


def _service_gpus(service: dict, env: dict[str, str], where: str, naming_none: tuple[str, ...] = ()) -> tuple[list[str], str] | None:
    """The GPUs a compose service names and where: its device reservation's ids, else the first GPU key of its
    environment whose value is not one of ``naming_none``."""
    device_ids = _device_ids(service, where)
    if device_ids is not None:
        return list(dict.fromkeys(device_ids)), f"{where}: deploy.resources.reservations.devices.device_ids"
    key = next((key for key in GPU_KEYS if key in env and env[key].strip() not in naming_none), None)
    return None if key is None else (gpu_list(env[key]), f"{where}: environment {key}")


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


def _fixed_launch(name: str, service: dict, raw: dict, env: dict[str, str], command: list[str], where: str) -> Launch | None:
    evidence = _gpu_use(service, env)
    if evidence is None:
        return None
    launch = Launch(source=where, seat=name, args=[], fixed=True, gpu_evidence=evidence, device="cuda",
                    image=str(raw["image"]) if isinstance(raw.get("image"), str) else None)
    named = _service_gpus(service, env, where, naming_none=(*NO_GPU_WORDS, EVERY_GPU_WORD))
    if named is not None:
        launch.gpus, launch.gpus_source = named
    for word in launch.gpus or []:
        if whole_number(word, maximum=MAX_DEVICE_INDEX) is None and not GPU_UUID.fullmatch(word):
            raise SeatplanError(f"service {name[:60]!r} names GPU {word[:60]!r}, neither a device index (0 to {MAX_DEVICE_INDEX}) nor a GPU UUID",
                                where=where, fix="write the GPUs as nvidia-smi names them: an index (0, 1) or a UUID (GPU-...)")
    published = _first_published(read_ports(service.get("ports"), where))
    launch.published_port = published[0] if published else None
    launch.args = command
    launch.env = {key: value for key, value in env.items() if key not in GPU_KEYS}
    launch.health_url, launch.health_note, launch.health_left_out = healthcheck_url(service, where)
    refused = seat_value_problem("health_url", launch.health_url) if launch.health_url else None
    if refused is not None:
        launch.health_url, launch.health_refused = None, True
        launch.health_left_out = f"{launch.health_note}: the fleet file refuses the URL ({refused})"
    launch.image_left_out = _not_rendered(raw, launch, published)
    return launch


def _first_published(mappings: list[PortMapping]) -> tuple[int, str] | None:
    """The host and container side of a fixed service's first port published on a known host port."""
    return next(((mapping.host, str(mapping.container)) for mapping in mappings if mapping.host is not None), None)


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
