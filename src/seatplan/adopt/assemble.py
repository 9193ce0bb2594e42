"""What adopt read → the fleet file's values, each with where it came from; what it cannot tell is TODO.

Pure: evidence in (``evidence``), a tree of noted values and warnings out (``writer`` prints it). Rules:
a running engine's own answer wins over a file (the file may be for the next restart; a difference is a
warning), a file wins over nothing, and nothing is made up: no GPU, device, context or version without
evidence (docs/adopt.md lists what each value is read from).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import httpx2

from seatplan.adopt.args import PLAN_OWNED, SeatArgs, read_args
from seatplan.adopt.evidence import APPS_QUERY, ComputeApp, EngineSeen, GpuReading, Launch, Route
from seatplan.adopt.fleet_rules import host_value_problem, seat_value_problem
from seatplan.adopt.memory import Share, compare, seat_share
from seatplan.adopt.readers.compose_gateway import GatewayContainer
from seatplan.adopt.secrets import SECRET_FLAGS
from seatplan.documents.fleet import MAX_GPU_BYTES
from seatplan.documents.fleet_file import TODO
from seatplan.encode import name_problem
from seatplan.engine.command import DEFAULT_LAUNCHER
from seatplan.engine.endpoint import DEFAULT_PORT
from seatplan.errors import SeatplanError
from seatplan.secrets import looks_secret
from seatplan.units import MAX_GPU_INDEX, MAX_PLAUSIBLE_BYTES, whole_number
from seatplan.versions import modelled, try_release

# GPU memory in use above this, where no adopted seat runs, is some other process's (an idle CUDA context
# takes a few hundred MiB; a service that matters to the plan holds GiBs): a rule of thumb, not measured here.
UNACCOUNTED_MIB = 1024
SEAT_KEYS = ("tensor_parallel_size", "dtype", "kv_cache_dtype", "max_num_seqs", "max_num_batched_tokens", "enforce_eager")


@dataclass(frozen=True)
class Noted:
    """One value of the fleet file and the comment saying where it came from (``value`` None: a comment only)."""

    value: Any
    note: str


Tree = dict[str, Any]  # key → Noted | Tree | list[Tree]


@dataclass(frozen=True)
class SeatPlace:
    """Where an adopted seat runs and how its processes can be told (``adopt/observed.py`` ties PIDs to seats with it)."""

    host: str  # TODO where no source names it (the fleet file then asks for it); its GPUs are read under the same key
    gpus: list[int]  # its GPUs' indices on that host ([] where current_layout is TODO)
    ports: frozenset[int]  # the ports its engine is reached on and listens on (a container's own port beside the published one)
    engine: str  # "vllm" or "fixed"


@dataclass
class Adopted:
    tree: Tree
    warnings: list[str] = field(default_factory=list)
    todo: int = 0
    places: dict[str, SeatPlace] = field(default_factory=dict)  # seat name → where it runs
    readings: dict[tuple[str, int], GpuReading] = field(default_factory=dict)  # (host, index) → what nvidia-smi listed


@dataclass
class _Seat:
    name: str
    name_note: str
    launch: Launch | None
    engine: EngineSeen | None
    card: dict[str, Any] | None
    routes: list[Route]
    args: SeatArgs
    host: str | None = None
    host_note: str = ""
    address: str | None = None
    # how the gateway reaches the engine, read off its route's api_base: a name for the whole host
    # (host.docker.internal, localhost) or the compose service and container port
    gateway_reach: str | None = None
    gateway_service: dict[str, Any] | None = None
    gateway_note: str = ""
    address_note: str = ""


def _url_host_port(url: str | None) -> tuple[str | None, int | None]:
    if not url:
        return None, None
    try:
        parsed = httpx2.URL(url)
    except (httpx2.InvalidURL, TypeError, ValueError):
        return None, None
    return (parsed.host or None), parsed.port or (443 if parsed.scheme == "https" else 80)


def _served(launch: Launch, args: SeatArgs) -> str | None:
    name = args.values.get("served_model_name") or args.values.get("model")
    return str(name) if name is not None else None


def _launch_port(launch: Launch, args: SeatArgs) -> int:
    return launch.published_port or int(args.values.get("port", DEFAULT_PORT))


def _match(launch: Launch, args: SeatArgs, cards: list[tuple[EngineSeen, dict[str, Any]]]) -> tuple[EngineSeen, dict[str, Any]] | None:
    """The running engine this file starts: the one serving its name on its port (or the only one serving its name)."""
    served = _served(launch, args)
    named = [(engine, card) for engine, card in cards if card.get("id") == served]
    on_port = [pair for pair in named if _url_host_port(pair[0].base_url)[1] == _launch_port(launch, args)]
    if len(on_port) == 1:
        return on_port[0]
    return named[0] if len(named) == 1 else None


def collect_seats(launches: list[Launch], engines: list[EngineSeen], routes: list[Route], warnings: list[str]) -> list[_Seat]:
    cards = [(engine, card) for engine in engines for card in engine.models]
    seats: list[_Seat] = []
    taken: set[int] = set()
    for launch in launches:
        args = read_args(launch.args)
        warnings += [f"{launch.source}: {problem}" for problem in args.problems]
        pair = _match(launch, args, [pair for pair in cards if id(pair[1]) not in taken])
        if pair is not None:
            taken.add(id(pair[1]))
        elif engines:
            warnings.append(f"{launch.source}: no engine given serves {_served(launch, args)!r}: its values come from the file alone")
        name, note = (launch.seat, f"{launch.source}") if launch.seat else (_served(launch, args) or TODO, "the served name")
        seats.append(_Seat(name=name, name_note=note, launch=launch, engine=pair[0] if pair else None, card=pair[1] if pair else None,
                           routes=[], args=args))
    for engine, card in cards:
        if id(card) not in taken:
            name, note = engine_seat_name(str(card.get("id")), f"GET {engine.base_url}/v1/models")
            seats.append(_Seat(name=name, name_note=note, launch=None, engine=engine, card=card, routes=[], args=SeatArgs()))
    for engine in engines:
        if not engine.models or engine.problems:
            warnings.append(f"{engine.base_url} ({engine.source}): " + ("; ".join(engine.problems) or "serves no model"))
    _attach_routes(seats, routes, engines, warnings)
    return seats


def engine_seat_name(served: str, source: str) -> tuple[str, str]:
    """The seat name of an engine known only by what it serves: that name, or where it is no seat name (``Qwen/Qwen3-8B``,
    an absolute model path: vLLM serves an engine without --served-model-name under its --model) its last part. The
    served name itself stays as served_model_name, what clients ask for."""
    last = served.rstrip("/").rsplit("/", 1)[-1]
    if name_problem("seat name", served) is not None and "/" in served and name_problem("seat name", last) is None:
        return last, f"{source}: the last part of the served name (a seat name holds no '/')"
    return served, source


def _by_served(seats: list[_Seat], served: str, route: Route) -> _Seat | None:
    """The seat a file starts serving ``served``; of replicas serving one name, the one on the route's port (else the
    first without a route yet), so each replica keeps its own route and key."""
    candidates = [seat for seat in seats if seat.launch is not None and _served(seat.launch, seat.args) == served]
    if len(candidates) <= 1:
        return candidates[0] if candidates else None
    _, port = _url_host_port(route.base_url)
    on_port = [seat for seat in candidates if port is not None and port in (seat.args.values.get("port"), seat.launch.published_port if seat.launch else None)]
    return (on_port or [seat for seat in candidates if not seat.routes] or candidates)[0]


def _attach_routes(seats: list[_Seat], routes: list[Route], engines: list[EngineSeen], warnings: list[str]) -> None:
    for route in routes:
        if route.hosted:
            continue  # the provider's own API (no api_base): no engine of this fleet, and render keeps the entry as it is
        served = route.backend_name or route.model_name
        if route.had_credentials:
            warnings.append(f"{route.source}: {route.model_name}: its api_base carries a user or password: left out of everything adopt "
                            "prints and writes (the engine is asked without it)")
        owner = next((seat for seat in seats if seat.engine is not None and seat.engine.base_url == route.base_url
                      and seat.card is not None and seat.card.get("id") == served), None)
        owner = owner or _by_served(seats, served, route)
        owner = owner or next((seat for seat in seats if seat.launch is None and seat.engine is None and seat.routes
                               and (seat.routes[0].backend_name or seat.routes[0].model_name) == served), None)
        if owner is None:
            # never dropped: the gateway sends traffic here, so the plan must hold a seat for it, whatever is not known
            why = ("its api_base is not a plain URL" if route.base_url is None else
                   f"no engine at {route.base_url} answered" if any(engine.base_url == route.base_url for engine in engines) else
                   f"no engine at {route.base_url} was read")
            name, note = engine_seat_name(served, f"{route.source}: the LiteLLM config routes {route.model_name!r} here")
            warnings.append(f"{route.source}: {route.model_name}: {why}, and no file given starts {served!r}: seat {name} is written "
                            "with TODOs (give the file that starts it: --compose, --env-dir or --systemd)")
            owner = _Seat(name=name, name_note=note, launch=None, engine=None, card=None, routes=[], args=SeatArgs())
            seats.append(owner)
        owner.routes.append(route)


# ----------------------------------------------------------------------------- hosts


ENGINE_KEY_VARIABLE = SECRET_FLAGS["--api-key"]  # what vLLM reads its key from
# Names a gateway in a container reaches engines by that name no host: Docker's name for the host it runs on, and the
# compose services of the files read (resolved on the compose network)
DOCKER_HOST_NAMES = ("host.docker.internal", "gateway.docker.internal")


LOOPBACK_NAMES = ("localhost", "127.0.0.1", "::1")


def gateway_reaches(seat: _Seat, services: set[str | None], container: GatewayContainer | None, warnings: list[str]) -> None:
    """How the gateway reaches the seat's engine, from its route's api_base and the gateway's compose service: Docker's
    name for the host (``host.docker.internal``: what compose maps to host-gateway, where the host's published ports
    and the engines seatplan starts answer), a compose service on the gateway's network and its container port (where
    the host is not mapped), or localhost (the gateway on the host's network: ``network_mode: host``, or no container)."""
    route = next((route for route in seat.routes if route.base_url), None)
    if route is None:
        return
    host, port = _url_host_port(route.base_url)
    note = f"{route.source}: the gateway's api_base {route.base_url}"
    if host in services and host is not None:
        if container is not None and container.host_gateway:
            seat.gateway_reach = "host.docker.internal"
            seat.gateway_note = (f"{note} names the compose service; {container.source}: the gateway maps host.docker.internal to "
                                 "host-gateway, where the engine's published port answers (and the engine seatplan starts)")
        else:
            seat.gateway_service, seat.gateway_note = {"service": host, "port": port}, note + " (a compose service on the gateway's network)"
    elif host in DOCKER_HOST_NAMES:
        seat.gateway_reach, seat.gateway_note = host, note
        if container is not None and not container.host_gateway and not container.host_network:
            warnings.append(f"{route.source}: the gateway reaches {route.model_name} at {host}, but {container.source} maps no "
                            "host.docker.internal (extra_hosts: [\"host.docker.internal:host-gateway\"]): on Linux that name resolves nowhere")
    elif host in LOOPBACK_NAMES:
        if container is not None and not container.host_network:
            seat.gateway_reach = TODO
            seat.gateway_note = (f"{note}: the gateway runs in a container ({container.source}), where {host} is the container itself: "
                                 "every route through it fails; write host.docker.internal (with extra_hosts host-gateway) or the host's address")
            warnings.append(f"{route.source}: {route.model_name}: {seat.gateway_note}: gateway_reaches is TODO")
        else:  # as written: 127.0.0.1 stays 127.0.0.1
            seat.gateway_reach, seat.gateway_note = host, note + " (the gateway on the host's network)"


def place_hosts(seats: list[_Seat], readings: list[GpuReading], warnings: list[str], container: GatewayContainer | None = None) -> None:
    services = {seat.launch.started_by.get("compose_service") for seat in seats if seat.launch and seat.launch.started_by}
    for seat in seats:
        gateway_reaches(seat, services, container, warnings)
        launch = seat.launch
        url, url_from = (seat.engine.base_url, seat.engine.source) if seat.engine else (seat.routes[0].base_url, seat.routes[0].source) if seat.routes else (None, "")
        if url is None and launch is not None and not launch.fixed and launch.health_url:
            # seatplan's own env file names the URL apply waits on; a fixed seat's health URL is asked on the host
            # itself (a compose healthcheck's loopback), so it says nothing of how the engines are reached (issue 50)
            url, url_from = launch.health_url, f"{launch.source}: SEATPLAN_HEALTH_URL"
        url_host, _ = _url_host_port(url)
        if url_host in DOCKER_HOST_NAMES or url_host in services:
            url_host = None  # the gateway's own view: it names no host
        if launch is not None and launch.host:
            seat.host, seat.host_note = launch.host, launch.host_note
            if url_host and url_host != launch.host:
                seat.address, seat.address_note = url_host, f"{url_from}: the host of {url}"
        elif url_host:
            seat.host, seat.host_note = url_host, f"{url_from}: the host of {url}"
        elif _host_by_uuid(launch, readings):
            seat.host, seat.host_note = _host_by_uuid(launch, readings), f"{launch.gpus_source if launch else ''}: its GPU UUID in nvidia-smi"
        else:
            warnings.append(f"seat {seat.name}: no engine URL and no rendered comment says which host runs it")


def _host_by_uuid(launch: Launch | None, readings: list[GpuReading]) -> str | None:
    """A GPU UUID is unique across machines: the nvidia-smi output that lists it names the seat's host."""
    hosts = {reading.host for reading in readings if launch and launch.gpus and reading.uuid in launch.gpus and reading.host}
    return hosts.pop() if len(hosts) == 1 else None


def _host_order(seats: list[_Seat], readings: list[GpuReading]) -> list[str]:
    names = [seat.host or TODO for seat in seats] + [reading.host for reading in readings if reading.host]
    return list(dict.fromkeys(names)) or [TODO]


def assign_readings(readings: list[GpuReading], hosts: list[str]) -> dict[str, list[GpuReading]]:
    by_host: dict[str, list[GpuReading]] = {host: [] for host in hosts}
    for reading in readings:
        if reading.host is not None:
            by_host.setdefault(reading.host, []).append(reading)
        elif len(hosts) == 1:
            by_host[hosts[0]].append(reading)
        else:
            raise SeatplanError(f"the engines run on {len(hosts)} hosts ({', '.join(hosts)}) and this nvidia-smi output names none",
                                where=reading.source.rsplit(":", 1)[0], fix="name the host it came from: --nvidia-smi HOST=CSV")
    return by_host


# ----------------------------------------------------------------------------- GPUs of a seat


def seat_gpus(seat: _Seat, readings: list[GpuReading], warnings: list[str]) -> Noted:
    """The GPU indices the seat runs on, from CUDA_VISIBLE_DEVICES / device_ids (UUIDs through nvidia-smi)."""
    launch = seat.launch
    if launch is None or launch.gpus is None:
        why = "no env or compose file of this seat names its GPUs (CUDA_VISIBLE_DEVICES, device_ids)"
        warnings.append(f"seat {seat.name}: {why}: current_layout is TODO")
        return Noted(TODO, why)
    indices: list[int] = []
    for word in launch.gpus:
        index = whole_number(word, maximum=MAX_GPU_INDEX)
        if index is not None:
            indices.append(index)
            continue
        by_uuid = [reading.index for reading in readings if reading.uuid == word]
        if len(by_uuid) == 1:
            indices.append(by_uuid[0])
            continue
        why = f"{launch.gpus_source} says {word[:60]!r}, which is no GPU index"
        if word.startswith("GPU-"):
            why += " and no nvidia-smi output given lists that UUID"
        warnings.append(f"seat {seat.name}: {why}: current_layout is TODO")
        return Noted(TODO, why)
    indices = list(dict.fromkeys(indices))  # a set: GPU 0 by index and by UUID is one GPU
    unlisted = sorted({index for index in indices if readings and all(reading.index != index for reading in readings)})
    if unlisted:
        why = f"{launch.gpus_source} names GPU {', '.join(map(str, unlisted))}, which nvidia-smi does not list ({readings[0].source.rsplit(':', 1)[0]})"
        warnings.append(f"seat {seat.name}: {why}: current_layout is TODO")
        return Noted(TODO, why)
    note = launch.gpus_source + (" (UUIDs through nvidia-smi)" if any(whole_number(word, maximum=MAX_GPU_INDEX) is None for word in launch.gpus) else "")
    return Noted(indices[0] if len(indices) == 1 else indices, note)


# ----------------------------------------------------------------------------- one seat


def _card_int(seat: _Seat, key: str) -> int | None:
    value = seat.card.get(key) if seat.card else None
    # an engine's JSON is foreign text: a context beyond 2**31 tokens is no model's (a hostile or broken answer)
    return whole_number(value, minimum=1, maximum=2**31) if isinstance(value, int) else None


def _label(seat: _Seat, key: str) -> str | None:
    labels = seat.engine.cache_labels if seat.engine else None
    return labels.get(key) if labels else None


def _from_files(seat: _Seat) -> str:
    """Where a seat's command line was read: the file that starts it, and vLLM's --config file where it has one."""
    if seat.launch is None:
        return ""
    return seat.launch.source + (f" (with {seat.launch.config_note})" if seat.launch.config_note else "")


def _pick(seat: _Seat, key: str, running: Any, running_note: str, warnings: list[str]) -> Noted | None:
    """The engine's own answer, else the file's flag; a difference between them is a warning."""
    in_file = seat.args.values.get(key)
    file_note = f"{_from_files(seat)}: {seat.args.flags.get(key)}" if seat.launch and key in seat.args.values else ""
    if running is not None:
        if in_file is not None and in_file != running:
            warnings.append(f"seat {seat.name}: {key}: the engine runs {running}, {file_note} says {in_file} (a restart pending?); took the running value")
        return Noted(running, running_note)
    if in_file is not None:
        return Noted(in_file, file_note)
    return None


def seat_tree(seat: _Seat, warnings: list[str]) -> Tree:
    tree: Tree = {"name": Noted(seat.name, seat.name_note)}
    models_url = f"GET {seat.engine.base_url}/v1/models" if seat.engine else ""
    root = seat.card.get("root") if seat.card else None
    model = _pick(seat, "model", str(root) if isinstance(root, str) and root else None, f"{models_url} root", warnings)
    tree["model"] = model or Noted(TODO, "no engine answered and no file names the model")
    served = seat.card.get("id") if seat.card else seat.args.values.get("served_model_name") or seat.args.values.get("model")
    if served is None and seat.routes:
        served = seat.routes[0].backend_name or seat.routes[0].model_name
    if served is not None and str(served) != seat.name:
        tree["served_model_name"] = _served_name(seat, str(served), _served_note(seat, models_url), warnings)
    tree["port"] = _port(seat, warnings)
    length = _pick(seat, "max_model_len", _card_int(seat, "max_model_len"), f"{models_url} max_model_len", warnings)
    if length is None and "max_model_len" in seat.args.refused:
        length = Noted(TODO, f"{seat.launch.source if seat.launch else ''}: its --max-model-len holds a value vLLM refuses")
    elif length is None and seat.launch is not None:
        # the same rule on both sides: vLLM and the plan derive the context from the model's config when the flag is absent
        length = Noted(None, f"no --max-model-len in {seat.launch.source}: vLLM derives it from the model's config, and so does the plan")
    elif length is None:
        warnings.append(f"seat {seat.name}: neither the engine nor a file says its context: max_model_len is TODO")
    tree["max_model_len"] = length or Noted(TODO, "no engine answered /v1/models and no file starts it")
    tree["kv_cache_memory_bytes"] = _kv_pin(seat, warnings)
    cap = seat.args.values.get("max_new_tokens")
    if cap is not None:
        tree["max_new_tokens"] = Noted(cap, f"{seat.launch.source if seat.launch else ''}: --override-generation-config")
    else:
        gateway_caps = [route.max_tokens for route in seat.routes if route.max_tokens is not None]
        tree["max_new_tokens"] = Noted(None, "the engine has no default output cap"
                                       + (f"; the gateway's max_tokens is {gateway_caps[0]} ({seat.routes[0].source})" if gateway_caps else ""))
    for key in SEAT_KEYS:
        if key in seat.args.values:
            tree[key] = Noted(seat.args.values[key], f"{_from_files(seat)}: {seat.args.flags[key]}")
    if "kv_cache_dtype" not in tree and (_label(seat, "cache_dtype") or "auto") != "auto":
        tree["kv_cache_dtype"] = Noted(_label(seat, "cache_dtype"), f"GET {seat.engine.base_url if seat.engine else ''}/metrics cache_dtype")
    if seat.args.extra_args:
        tree["extra_args"] = Noted(seat.args.extra_args, f"{seat.launch.source if seat.launch else ''}: the other arguments, as given")
    for flag, value in seat.args.dropped.items():
        tree[f"({flag})"] = Noted(None, f"{value} left out: {PLAN_OWNED[flag]}")
    env = _env(seat, warnings)
    if env:
        tree["env"] = env
    tree |= _started_by(seat, warnings)
    if seat.gateway_service is not None:
        tree["gateway_reaches"] = Noted(seat.gateway_service, seat.gateway_note)
    return held_to_the_loader(tree, seat.name, "vllm", warnings)


def _started_by(seat: _Seat, warnings: list[str]) -> Tree:
    """How the engine is started today, so the first apply can stop it (the cut-over); a comment where not known."""
    launch = seat.launch
    if launch is not None and launch.started_by is not None:
        return {"started_by": Noted(launch.started_by, launch.started_note)}
    if launch is not None and "seatplan" in launch.started_note:
        return {}
    why = launch.started_note if launch is not None else "no file given starts it"
    warnings.append(f"seat {seat.name}: started_by left out ({why}), so the first apply cannot stop the engine running today: "
                    "write started_by by hand (docs/fleet.md)")
    return {"(started_by)": Noted(None, f"not known: {why}")}


def held_to_the_loader(tree: Tree, name: str, engine: str, warnings: list[str]) -> Tree:
    """Every value of a seat, each as the fleet loader takes it; one it refuses (a model path with a quote, an argument
    holding a control character) is TODO with a warning, so plan stops at that line and at no other."""
    for key, noted in list(tree.items()):
        if key == "name" or not isinstance(noted, Noted) or noted.value is None or noted.value == TODO:
            continue  # the name passes check_names; a comment or a TODO is no value
        substituted = _substituted(noted.value)
        problem = substituted or seat_value_problem(key, noted.value, engine)
        if problem is not None:
            verdict = "adopt cannot carry it" if substituted else "the fleet file refuses it"
            fix = "correct it where it came from (the comment names it) and adopt again, or write the value by hand"
            warnings.append(f"seat {name}: {key}: {noted.note}: {verdict} ({problem}): {key} is TODO; fix: {fix}")
            tree[key] = Noted(TODO, f"{noted.note}: {'not carried' if substituted else 'refused'} ({problem})")
    return tree


def _substituted(value: Any) -> str | None:
    """A command substitution (``$(…)``, backticks) left in a word: the shell that starts the engine runs it and passes
    what it prints, which adopt cannot know; carried as written, the rendered engine would get other words."""
    words = value if isinstance(value, list) else [value]
    for word in words:
        if isinstance(word, str) and ("$(" in word or "`" in word):
            return (f"{word[:60]!r} holds a command substitution ($(…) or backticks) that the shell starting the engine runs; "
                    "what it prints is not known here: write the value it gives")
    return None


def _served_name(seat: _Seat, served: str, note: str, warnings: list[str]) -> Noted:
    """The name clients ask for, as the fleet loader takes it; one it refuses (a relative path, a space) is TODO:
    any other name would change what every client of the engine asks for."""
    problem = _substituted(served) or seat_value_problem("served_model_name", served, engine="vllm")
    if problem is None:
        return Noted(served, note)
    fix = "start the engine with --served-model-name NAME (the name its clients ask for) and write NAME here"
    warnings.append(f"seat {seat.name}: {note}: {problem}: served_model_name is TODO; fix: {fix}")
    return Noted(TODO, f"{note}: {problem}: {fix}")


def _served_note(seat: _Seat, models_url: str) -> str:
    if seat.card:
        return f"{models_url} id"
    if seat.launch is not None and "served_model_name" in seat.args.values:
        return f"{seat.launch.source}: --served-model-name"
    if seat.launch is not None:
        # vLLM 0.32 vllm/entrypoints/launchers/api_server/app_state.py:49-52: served_model_names = [args.model] without the flag
        return f"{seat.launch.source}: no --served-model-name, so vLLM serves it under its --model"
    return f"{seat.routes[0].source}: the LiteLLM config" if seat.routes else "the LiteLLM config"


def _port(seat: _Seat, warnings: list[str]) -> Noted:
    launch = seat.launch
    if launch is not None and launch.port_unknown:
        warnings.append(f"seat {seat.name}: {launch.port_unknown}: port is TODO; fix: publish one host port (\"8006:8000\") or write it by hand")
        return Noted(TODO, launch.port_unknown)
    if launch is not None and launch.published_port is not None:
        return Noted(launch.published_port, f"{launch.source}: ports (the host side)")
    if "port" in seat.args.values:
        return Noted(seat.args.values["port"], f"{launch.source if launch else ''}: --port")
    if "port" in seat.args.refused and seat.engine is None:  # the warning said TODO: vLLM's default is not what runs
        return Noted(TODO, f"{launch.source if launch else ''}: its --port holds a value vLLM refuses")
    url = seat.engine.base_url if seat.engine else seat.routes[0].base_url if seat.routes and launch is None else None
    _, url_port = _url_host_port(url)
    if url_port is not None:
        return Noted(url_port, f"the port of {url}")
    return Noted(DEFAULT_PORT, "no --port: vLLM's default (vllm/entrypoints/launchers/cli_args.py)")


def _kv_pin(seat: _Seat, warnings: list[str]) -> Noted:
    label = _label(seat, "kv_cache_memory_bytes")
    # vLLM exports every CacheConfig field as str(value), so an unset kv_cache_memory_bytes reads "None"
    # (vLLM 0.32 vllm/config/cache.py:322 CacheConfig.metrics_info, vllm/v1/metrics/loggers.py:1114 log_metrics_info)
    running = whole_number(label, maximum=MAX_PLAUSIBLE_BYTES) if label is not None and label != "None" else None
    if label is not None and label != "None" and running is None:
        warnings.append(f"seat {seat.name}: GET {seat.engine.base_url if seat.engine else ''}/metrics: kv_cache_memory_bytes {label[:40]!r} is no "
                        f"byte count a GPU holds (ASCII digits, at most {MAX_PLAUSIBLE_BYTES:,}): not taken")
    metrics = f"GET {seat.engine.base_url if seat.engine else ''}/metrics vllm:cache_config_info kv_cache_memory_bytes"
    picked = _pick(seat, "kv_cache_memory_bytes", running, metrics, warnings)
    if picked is not None:
        return picked
    if label == "None" or (seat.launch is not None and seat.engine is None):
        util = _label(seat, "gpu_memory_utilization") or seat.args.dropped.get("--gpu-memory-utilization")
        return Noted(None, "not pinned today" + (f" (sized by --gpu-memory-utilization {util})" if util else "")
                     + ": the plan pins it by the KV rule")
    warnings.append(f"seat {seat.name}: no /metrics and no file says whether its KV cache is pinned: kv_cache_memory_bytes is TODO")
    return Noted(TODO, "unknown: no vllm:cache_config_info and no --kv-cache-memory-bytes")


def _key_reference(seat: _Seat, variable: str) -> tuple[str, str]:
    """The one variable the engine's key (``VLLM_API_KEY``) and the gateway's ``api_key: os.environ/NAME`` for it are
    read from, and why: the variable the command line names (``--api-key ${VLLM_LOCAL_KEY}``), else the one the
    gateway sends the key from, else the variable vLLM reads itself."""
    written = seat.launch.secret_refs.get(variable) if seat.launch else None
    if written is not None:
        return written, f"the command line takes it from ${{{written}}}"
    sent = next((route.key_env for route in seat.routes if route.key_env), None) if variable == ENGINE_KEY_VARIABLE else None
    if sent is not None:
        return sent, f"the gateway sends the engine's key from {sent} ({seat.routes[0].source}): one variable for both"
    return variable, f"vLLM reads {variable} in its place"


def _env(seat: _Seat, warnings: list[str]) -> Tree:
    """The engine's environment; a secret (by name or shape, ``secrets``) as a reference to the GPU host's environment,
    never its value, and a flag's secret (``--api-key``) as the variable vLLM reads in its place, from the one variable
    the engine and the gateway share (``_key_reference``)."""
    env: Tree = {}
    launch = seat.launch
    for key, value in sorted((launch.env if launch else {}).items()):
        where = launch.env_notes.get(key, launch.source) if launch else ""
        if seat_value_problem("env", {key: "x"}, engine="vllm") is not None:  # the loader's own rule for an env name
            warnings.append(f"{where}: {key[:40]!r} is left out: an env file cannot carry that name")
        elif looks_secret(key, value):
            reference, _ = _key_reference(seat, key) if key == ENGINE_KEY_VARIABLE else (key, "")
            env[key] = Noted({"from_host_env": reference}, f"a secret, in {where}: not copied; export {reference} on the GPU host "
                             "(or keep it in an env_files file there)")
            warnings.append(f"{where}: {key} holds a secret (by its name or its value's shape): written as {key}: "
                            f"{{from_host_env: {key}}}, not copied; export {key} on the GPU host before apply")
        elif seat_value_problem("env", {key: value}, engine="vllm") is not None:
            warnings.append(f"{where}: {key[:40]!r} is left out: an env file cannot carry its value (a quote or control character)")
        else:
            env[key] = Noted(value, where)
    for variable, flag in seat.args.secrets.items():
        reference, why = _key_reference(seat, variable)
        if variable not in env:
            env[variable] = Noted({"from_host_env": reference}, f"{launch.source if launch else ''}: {flag} on its command line, a secret: "
                                  f"not copied; {why}: export {reference} on the GPU host")
        warnings.append(f"seat {seat.name}: {launch.source if launch else ''}: {flag} holds a secret: written as {variable}: "
                        f"{{from_host_env: {reference}}}; export {reference} on the GPU host before apply")
    return env


# ----------------------------------------------------------------------------- the fleet


def host_tree(name: str, readings: list[GpuReading], seats: list[_Seat], layout: dict[str, Noted], warnings: list[str],
              shares: dict[tuple[str, int], list[Share]] | None = None, apps: list[ComputeApp] | None = None) -> Tree:
    on_host = [seat for seat in seats if (seat.host or TODO) == name]
    tree: Tree = {"name": Noted(name, on_host[0].host_note if on_host else (readings[0].source if readings else "no evidence of a host"))}
    devices = {seat.launch.device for seat in on_host if seat.launch and seat.launch.device}
    if readings:
        tree["device"] = Noted("cuda", f"nvidia-smi lists its GPUs ({readings[0].source.rsplit(':', 1)[0]})")
    elif len(devices) == 1:
        device = devices.pop()
        tree["device"] = Noted(device, next(seat.launch.source for seat in on_host if seat.launch and seat.launch.device == device))
    else:
        tree["device"] = Noted(TODO, "cuda or cpu: no nvidia-smi output for this host and no file tells")
    addresses = {seat.address: seat.address_note for seat in on_host if seat.address}
    if len(addresses) == 1:
        (address, note), = addresses.items()
        tree["address"] = Noted(address, note)
    # where the gateway reaches the host at its address anyway, there is nothing to say
    reaches = {seat.gateway_reach for seat in on_host if seat.gateway_reach and seat.gateway_service is None} - {tree.get("address", Noted(name, "")).value, name}
    if len(reaches) == 1:
        reach = reaches.pop()
        tree["gateway_reaches"] = Noted(reach, next(seat.gateway_note for seat in on_host if seat.gateway_reach == reach))
    elif reaches:
        warnings.append(f"host {name}: the gateway reaches its engines at {', '.join(sorted(reaches))}: gateway_reaches is left out "
                        "(a host has one; give the others a seat's gateway_reaches: {service: NAME, port: PORT})")
    tree |= host_launch(name, [seat.launch for seat in on_host if seat.launch is not None and not seat.launch.fixed], warnings)
    if readings:
        held = {index for seat in on_host for index in _indices(layout.get(seat.name))}
        every_seat_placed = all(_indices(layout.get(seat.name)) for seat in on_host)
        tree["gpus"] = [_gpu_tree(reading, name, reading.index not in held, warnings, (shares or {}).get((name, reading.index), []))
                        | (_keep_clear_offer(reading, apps) if every_seat_placed and reading.index not in held else {})
                        for reading in sorted(readings, key=lambda reading: reading.index)]
        return tree
    indices = sorted({index for seat in on_host for index in _indices(layout.get(seat.name))})
    if indices:
        tree["gpus"] = [{"index": Noted(index, "named by a seat's file"),
                         "total_bytes": Noted(TODO, "no nvidia-smi output: the total as CUDA reports it (a memory budget on a cpu host)")}
                        for index in indices]
    else:
        tree["gpus"] = Noted(TODO, "no nvidia-smi output and no file names a GPU: list them as {index: N, total_bytes: SIZE}")
    return tree


def host_launch(host: str, launches: list[Launch], warnings: list[str]) -> Tree:
    """How the host starts vLLM today, for render's defaults (issue 50): the launcher its units and env files run
    (``/opt/vllm/bin/vllm serve``; the default ``vllm serve`` is not written), the image its compose services run, and the
    restart mode when every engine on it is started the same way. Where they differ, a comment names each, and render's
    flag chooses."""
    tree: Tree = {}
    launchers: dict[tuple[str, ...], list[str]] = {}
    for launch in launches:
        if launch.launcher:
            launchers.setdefault(tuple(launch.launcher), []).append(launch.launcher_note)
    if len(launchers) == 1:
        (words, notes), = launchers.items()
        note = ", ".join(notes)
        problem = host_value_problem("launcher", list(words))
        if problem is not None:
            warnings.append(f"host {host}: {note}: the launcher {' '.join(words)[:120]!r} is left out: {problem}")
        elif list(words) != list(DEFAULT_LAUNCHER):
            tree["launcher"] = Noted(list(words), note)
    elif launchers:
        tree["(launcher)"] = Noted(None, "; ".join(f"{', '.join(notes)}: {' '.join(words)[:80]}" for words, notes in launchers.items())
                                   + ": render --launcher picks one")
    images: dict[str, list[str]] = {}
    for launch in launches:
        if launch.engine_image:
            images.setdefault(launch.engine_image, []).append(launch.engine_image_note)
    if len(images) == 1:
        (image, notes), = images.items()
        note = ", ".join(notes)
        problem = host_value_problem("image", image)
        if problem is None:
            tree["image"] = Noted(image, note)
        else:
            warnings.append(f"host {host}: {note}: the image {image[:120]!r} is left out: {problem}")
    elif images:
        tree["(image)"] = Noted(None, "; ".join(f"{', '.join(notes)}: {image}" for image, notes in images.items()) + ": render --image picks one")
    kinds: dict[str, list[str]] = {}
    for launch in launches:
        if launch.started_by is not None:
            kind = "systemd" if "systemd_unit" in launch.started_by else "compose" if "compose_file" in launch.started_by else ""
            kinds.setdefault(kind, []).append(launch.seat or launch.source)
    if len(kinds) == 1 and "" not in kinds and len(next(iter(kinds.values()))) == len(launches):
        (kind, seats), = kinds.items()
        tree["restart"] = Noted(kind, f"the started_by of {', '.join(seats)}")
    elif len(kinds) > 1:
        tree["(restart)"] = Noted(None, "; ".join(f"{', '.join(seats)} by {kind or 'a command'}" for kind, seats in kinds.items())
                                  + " (their started_by): render --restart picks one, else compose")
    return tree


def _indices(noted: Noted | None) -> list[int]:
    if noted is None or noted.value == TODO:
        return []
    return list(noted.value) if isinstance(noted.value, list) else [int(noted.value)]


def _gpu_tree(reading: GpuReading, host: str, unheld: bool, warnings: list[str], shares: list[Share]) -> Tree:
    tree = _gpu_values(reading)
    differs = compare(reading, shares)
    if differs is not None:
        why, extra_bytes = differs
        warnings.append(f"{host} GPU {reading.index}: {why}")
        tree["(reserved_bytes)"] = Noted(None, f"{extra_bytes} ({why})" if extra_bytes else why)
    if unheld and reading.used_mib is not None and reading.used_mib > UNACCOUNTED_MIB:
        # A GPU no adopted seat holds (one that seats hold is compared with their shares above)
        why = (f"{reading.source}: memory.used {reading.used_mib} MiB, and no adopted seat runs here: add that process as a fixed seat "
               "or set reserved_bytes (else the plan takes the memory as free)")
        warnings.append(f"{host} GPU {reading.index}: {why}")
        tree["(reserved_bytes)"] = Noted(None, why)
    return tree


def _keep_clear_offer(reading: GpuReading, apps: list[ComputeApp] | None) -> Tree:
    """A GPU that nothing adopt read runs on (no seat's files name it, nvidia-smi shows no memory in use past an idle
    context, no compute process) is offered as ``keep_clear`` in a comment (issue 50): adopt cannot tell an operator's
    spare kept clear from room to use, so it writes neither, and says what each source showed."""
    used = reading.used_mib is not None and reading.used_mib > UNACCOUNTED_MIB
    on_it = [app for app in apps or [] if app.gpu_uuid == reading.uuid]
    if used or on_it:
        return {}
    shown = ["no adopted seat's files name it"]
    if reading.used_mib is not None:
        shown.append(f"{reading.source}: memory.used {reading.used_mib} MiB")
    if apps is not None:
        sources = sorted({app.source.rsplit(":", 1)[0] for app in apps})
        shown.append(f"no process of {', '.join(sources) or '--compute-apps'} on it")
    return {"(keep_clear)": Noted(None, f"true  # {'; '.join(shown)}: write it to keep this GPU clear, else the plan may place seats here")}


def _gpu_values(reading: GpuReading) -> Tree:
    if reading.reserved_mib is None:
        total_note = f"{reading.source}: memory.total {reading.total_mib} MiB; no memory.reserved column, so this counts the driver's reserve"
    else:
        total_note = f"{reading.source}: memory.total {reading.total_mib} MiB - memory.reserved {reading.reserved_mib} MiB (CUDA's total, estimated)"
    return {
        "index": Noted(reading.index, f"{reading.source}: {reading.uuid}"),
        "name": Noted(reading.name, reading.source),
        "total_bytes": Noted(reading.cuda_total_bytes, total_note) if 0 <= reading.cuda_total_bytes <= MAX_GPU_BYTES else
        Noted(TODO, f"{reading.source}: memory.total {reading.total_mib} MiB is no size a GPU has (0 to {MAX_GPU_BYTES >> 40} TiB): "
                    "not written; give the size CUDA reports"),
    }


def policy_tree(engines: list[EngineSeen], warnings: list[str]) -> Tree:
    versions = {engine.version: engine for engine in engines if engine.version and try_release(engine.version)}
    unread = [engine for engine in engines if engine.version and not try_release(engine.version)]
    unmodelled = {version: problem for version in sorted(versions) if (problem := _unmodelled(version)) is not None}
    if unmodelled:
        said = "; ".join(f"{versions[version].base_url}/version: {problem}" for version, problem in unmodelled.items())
        warnings.append(f"{said}: policy.vllm_version is TODO")
        return {"vllm_version": Noted(TODO, f"{said} (docs/verify.md)")}
    if len(versions) == 1:
        version, engine = next(iter(versions.items()))
        return {"vllm_version": Noted(version, f"GET {engine.base_url}/version")}
    if versions:
        warnings.append(f"the engines run different vLLM versions ({', '.join(sorted(versions))}): policy.vllm_version is TODO")
        return {"vllm_version": Noted(TODO, f"the engines differ: {', '.join(sorted(versions))}")}
    if unread:  # an engine answered, with no version in it: not "no engine answered"
        said = ", ".join(f"{engine.base_url}/version" for engine in unread[:4])
        warnings.append(f"{said} answered no version seatplan can read: policy.vllm_version is TODO")
        return {"vllm_version": Noted(TODO, f"{said} answered no readable version")}
    warnings.append("no engine answered /version: policy.vllm_version is TODO")
    return {"vllm_version": Noted(TODO, "no engine answered /version")}


def _unmodelled(version: str) -> str | None:
    """Why seatplan cannot plan for this version (no version at all, or a release outside its formulas); None if it can."""
    try:
        modelled(version)
    except ValueError as problem:
        return str(problem)
    return None


def _check_unique(seats: list[_Seat]) -> None:
    """Two sources starting a seat of one name (an env file and a compose service): say which, rather than pick."""
    first: dict[str, _Seat] = {}
    for seat in seats:
        other = first.setdefault(seat.name, seat)
        if other is not seat:
            raise SeatplanError(f"seat {seat.name!r} is started by two sources: {other.name_note} and {seat.name_note}", where=seat.name_note,
                                fix="give adopt one of them (the files that start the engines today)")


def adopt(readings: list[GpuReading], launches: list[Launch], engines: list[EngineSeen], routes: list[Route],
          apps: list[ComputeApp] | None = None, container: GatewayContainer | None = None) -> Adopted:
    """``container``: the gateway's own compose service, where a compose file given runs it (how it reaches the engines)."""
    warnings: list[str] = []
    engine_seats = collect_seats([launch for launch in launches if not launch.fixed], engines, routes, warnings)
    fixed = [_Seat(name=launch.seat or TODO, name_note=launch.source, launch=launch, engine=None, card=None, routes=[], args=SeatArgs())
             for launch in launches if launch.fixed]
    seats = engine_seats + fixed
    if not seats:
        raise SeatplanError("found no engine to adopt" + "".join(f"\n  {warning}" for warning in warnings), where="adopt",
                            fix="check that the engines run and answer /v1/models, or give their --env-dir or --compose files")
    _check_unique(seats)
    place_hosts(seats, readings, warnings, container)
    hosts = _host_order(seats, readings)
    by_host = assign_readings(readings, hosts)
    layout = {seat.name: seat_gpus(seat, by_host.get(seat.host or TODO, []), warnings) for seat in seats}
    many = len(by_host) > 1
    seat_trees = [seat_tree(seat, warnings) for seat in engine_seats] + [
        fixed_tree(seat, {other.name: layout[other.name] for other in seats if other.host == seat.host}, by_host.get(seat.host or TODO, []),
                   apps, warnings, many) for seat in fixed]
    shares: dict[tuple[str, int], list[Share]] = {}
    for seat, values in zip(seats, seat_trees):
        for index in _indices(layout[seat.name]):
            shares.setdefault((seat.host or TODO, index), []).append(seat_share(seat.name, values))
    tree: Tree = {
        "hosts": [host_tree(name, by_host[name], seats, layout, warnings, shares, apps) for name in by_host],
        "policy": policy_tree(engines, warnings),
        "seats": seat_trees,
        "current_layout": {seat.name: _layout_ref(layout[seat.name], seat.host, many) for seat in seats},
    }
    places = {seat.name: SeatPlace(seat.host or TODO, _indices(layout[seat.name]), _seat_ports(seat), "fixed" if seat.launch and seat.launch.fixed else "vllm")
              for seat in seats}
    readings_by_gpu = {(host, reading.index): reading for host, listed in by_host.items() for reading in listed}
    return Adopted(tree=tree, warnings=warnings, places=places, readings=readings_by_gpu)


def _seat_ports(seat: _Seat) -> frozenset[int]:
    """The host port it is reached on, and the port its engine listens on where that differs (inside a container)."""
    ports = {_url_host_port(seat.engine.base_url)[1]} if seat.engine else set()
    if seat.launch is not None:
        ports |= {seat.launch.published_port, seat.args.values.get("port", DEFAULT_PORT)}
    return frozenset(port for port in ports if isinstance(port, int))


def _layout_ref(noted: Noted, host: str | None, many: bool) -> Noted:
    if noted.value == TODO or not many:
        return noted
    refs = [f"{host or TODO}:{index}" for index in _indices(noted)]
    return Noted(refs[0] if len(refs) == 1 else refs, noted.note)


# ----------------------------------------------------------------------------- fixed seats


def fixed_tree(seat: _Seat, layout: dict[str, Noted], readings: list[GpuReading], apps: list[ComputeApp] | None,
               warnings: list[str], many: bool) -> Tree:
    """A compose service that uses GPUs and starts no vLLM engine: a fixed seat where it runs, costing what nvidia-smi saw it hold.

    ``layout``: the GPUs of the seats on its host (a process on a GPU it shares cannot be told apart)."""
    launch = seat.launch
    assert launch is not None  # fixed seats come from compose services
    tree: Tree = {"name": Noted(seat.name, seat.name_note),
                  "engine": Noted("fixed", f"{launch.source}: {launch.gpu_evidence}, and it starts no vLLM engine")}
    tree["memory_cap_bytes"] = fixed_cap(seat, layout, readings, apps, warnings)
    if launch.image and not launch.image_left_out:
        tree |= _fixed_image(seat.name, launch, warnings)
    elif launch.image:
        tree["(image)"] = Noted(None, f"{launch.image} ({launch.source}) left out: seatplan's compose file would run it without "
                                f"{launch.image_left_out}, so it stays yours to start")
    if launch.published_port is not None:
        tree["port"] = Noted(launch.published_port, f"{launch.source}: ports (the host side)")
    tree |= _fixed_health(seat.name, launch, warnings)
    gpus = layout[seat.name]
    held = _indices(gpus)
    if len(held) > 1:
        tree["tensor_parallel_size"] = Noted(len(held), "one per GPU it holds (the fleet file pins one GPU per rank)")
    if held:
        tree["pin"] = Noted(_layout_ref(gpus, seat.host, many).value, f"{gpus.note}: where it runs; the plan keeps it there")
    else:
        tree["(pin)"] = Noted(None, "its GPUs are TODO in current_layout: pin it to the same GPUs")
    return held_to_the_loader(tree, seat.name, "fixed", warnings)


def _fixed_image(name: str, launch: Launch, warnings: list[str]) -> Tree:
    """The image and command compose runs, each as the fleet loader takes it; an image it refuses (compose
    interpolation, a space) is TODO with a warning, so plan refuses the file at that line and nowhere else."""
    image_problem = seat_value_problem("image", launch.image)
    command_problem = seat_value_problem("command", launch.args) if launch.args else None
    tree: Tree = {}
    if image_problem is None and command_problem is None:
        tree["image"] = Noted(launch.image, f"{launch.source}: image (seatplan's compose file runs it, first)")
        if launch.args:
            tree["command"] = Noted(launch.args, f"{launch.source}: command")
        return tree
    refused = f"image {launch.image!r}: {image_problem}" if image_problem else f"its command: {command_problem}"
    fix = "write the image compose pulls (a plain reference such as ghcr.io/org/name:tag), or delete the line to keep starting it yourself"
    warnings.append(f"seat {name}: {launch.source}: the fleet file refuses its {refused}: image is TODO; fix: {fix}")
    tree["image"] = Noted(TODO, f"{launch.source}: the fleet file refuses its {refused}: {fix}")
    if launch.args and command_problem is None:
        tree["command"] = Noted(launch.args, f"{launch.source}: command")
    elif launch.args:
        tree["(command)"] = Noted(None, f"{launch.source}: left out, the fleet file refuses it ({command_problem})")
    return tree


def _fixed_health(name: str, launch: Launch, warnings: list[str]) -> Tree:
    """health_url from the compose healthcheck (or render's comment line), as the fleet loader takes it; else left out."""
    problem = seat_value_problem("health_url", launch.health_url) if launch.health_url else None
    if launch.health_url and problem is None:
        return {"health_url": Noted(launch.health_url, launch.health_note or launch.gpus_source)}
    why = f"{launch.health_note}: the fleet file refuses the URL ({problem})" if problem else launch.health_left_out
    if problem or launch.health_refused:
        warnings.append(f"seat {name}: {why}: health_url left out; fix: add the URL the GPU host reaches it at as health_url by hand")
    return {"(health_url)": Noted(None, f"left out: {why}" if why.startswith(launch.source) else f"{launch.source}: left out: {why}")} if why else {}


def fixed_cap(seat: _Seat, layout: dict[str, Noted], readings: list[GpuReading], apps: list[ComputeApp] | None, warnings: list[str]) -> Noted:
    """The most memory its processes hold on one of its GPUs, where it is the only adopted seat there; else TODO."""
    why = _cap_unknown(seat, layout, readings, apps)
    if isinstance(why, str):
        warnings.append(f"seat {seat.name}: {why}: memory_cap_bytes is TODO (plan would otherwise take that memory as free)")
        return Noted(TODO, why)
    index, on_gpu = max(why.items(), key=lambda item: sum(app.used_mib or 0 for app in item[1]))
    used_mib = sum(app.used_mib or 0 for app in on_gpu)
    pids = ", ".join(f"{app.pid} {app.process_name}" for app in on_gpu)
    return Noted(used_mib * 2**20, f"{on_gpu[0].source.rsplit(':', 1)[0]}: {used_mib} MiB used on GPU {index} by pid {pids} "
                 "(a reading, not its peak: raise it to the most the service takes)")


def _cap_unknown(seat: _Seat, layout: dict[str, Noted], readings: list[GpuReading],
                 apps: list[ComputeApp] | None) -> str | dict[int, list[ComputeApp]]:
    """Why the cap cannot be read (a string), or each of its GPUs with the processes on it."""
    held = _indices(layout[seat.name])
    if apps is None:
        return f"no --compute-apps CSV (nvidia-smi --query-compute-apps={APPS_QUERY} --format=csv) to read the memory it holds"
    if not held:
        return "its GPUs are not known, so no process can be tied to it"
    processes: dict[int, list[ComputeApp]] = {}
    for index in held:
        sharing = [other for other in layout if other != seat.name and index in _indices(layout[other])]
        reading = next((reading for reading in readings if reading.index == index), None)
        if sharing:
            return f"it shares GPU {index} with seat {sharing[0]}, and the compute-apps CSV cannot tell whose process is whose"
        if reading is None:
            return f"no --nvidia-smi output gives GPU {index}'s UUID, which the compute-apps CSV names GPUs by"
        processes[index] = [app for app in apps if app.gpu_uuid == reading.uuid]
        if not processes[index]:
            return f"the compute-apps CSV lists no process on GPU {index} ({reading.uuid}): is the service running?"
        if any(app.used_mib is None for app in processes[index]):
            return f"the compute-apps CSV says [N/A] for the memory of a process on GPU {index}"
    return processes
