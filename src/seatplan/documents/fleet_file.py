"""Reading the fleet file: YAML → :class:`Fleet`, with every error naming its line, and the fleet's rules.

The YAML is read by the general line-aware loader, ``documents.yaml_lines`` (``read_yaml_lines``); here are the
fleet's own rules on top: pydantic's error locations and seatplan's checks (hosts, seats, GPU references, ports,
``TODO``s) reported as ``fleet.yaml:23: seats[2].max_model_length: unknown key; did you mean ...``, and the
answers other stages ask of a fleet (a GPU reference resolved, the GPUs a seat may use, a model's path).
"""

from __future__ import annotations

import difflib
import hashlib
import re
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError
from pydantic_core import ErrorDetails

from seatplan.documents.fleet import Fleet, GpuSpec, HostSpec, SeatSpec
from seatplan.documents.io import KIND_NAMES, kind_said
from seatplan.documents.yaml_lines import PathKey, check_yaml_limits, format_path, line_of, read_yaml_lines
from seatplan.encode import control_character
from seatplan.errors import SeatplanError
from seatplan.fileio import check_input_file
from seatplan.hub_names import parse_hub_id
from seatplan.units import MAX_GPU_INDEX, whole_number

__all__ = [
    "FLEET_FIX", "TODO", "FleetProblem", "LoadedFleet", "allowed_gpus", "check_fleet", "check_yaml_limits", "control_problems",
    "eligible_gpus", "format_path", "gpu_refs", "line_of", "load_fleet", "parse_fleet", "require_ports", "resolve_gpu_ref",
    "resolve_model", "todo_problems",
]


@dataclass(frozen=True)
class FleetProblem:
    path: PathKey
    message: str
    fix: str | None = None


@dataclass
class LoadedFleet:
    fleet: Fleet
    path: Path
    sha256: str
    lines: dict[PathKey, int] = field(default_factory=dict)

    @property
    def base_dir(self) -> Path:
        return self.path.parent

    def where(self, path: PathKey) -> str:
        return f"{self.path}:{line_of(self.lines, path)}" if self.lines else str(self.path)


# ----------------------------------------------------------------------------- pydantic errors → lines


def _data_path(data: Any, loc: tuple[Any, ...]) -> PathKey:
    """pydantic's location without its union-member tags: only the steps that exist in the data."""
    path: list[str | int] = []
    current = data
    for step in loc:
        if isinstance(current, dict) and step in current:
            current = current[step]
        elif isinstance(current, list) and isinstance(step, int) and 0 <= step < len(current):
            current = current[step]
        elif isinstance(current, dict) and isinstance(step, str) and not _looks_like_tag(step):
            path.append(step)  # a missing or unknown key: name it, stop walking
            break
        else:
            continue
        path.append(step)
    return tuple(path)


def _looks_like_tag(step: str) -> bool:
    return any(mark in step for mark in ("[", "(")) or step in {"int", "str", "float", "bool", "list", "dict", "none"}


def _model_at(path: PathKey) -> type[BaseModel] | None:
    """The fleet model class whose fields the mapping at ``path`` holds."""
    annotation: Any = Fleet
    for step in path:
        model = _unwrap_model(annotation)
        if model is not None and isinstance(step, str):
            if step not in model.model_fields:
                return None
            annotation = model.model_fields[step].annotation
            continue
        annotation = _container_item(annotation)
        if annotation is None:
            return None
    return _unwrap_model(annotation)


def _unwrap_model(annotation: Any) -> type[BaseModel] | None:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in typing.get_args(annotation):
        found = _unwrap_model(arg)
        if found is not None:
            return found
    return None


def _container_item(annotation: Any) -> Any:
    origin = typing.get_origin(annotation)
    if origin in (list, tuple):
        return typing.get_args(annotation)[0]
    if origin is dict:
        return typing.get_args(annotation)[1]
    if origin in (typing.Union, types.UnionType):
        for arg in typing.get_args(annotation):
            item = _container_item(arg)
            if item is not None:
                return item
    return None


def _problems_from_validation(error: ValidationError, data: Any) -> list[FleetProblem]:
    problems: list[FleetProblem] = []
    seen: set[PathKey] = set()
    for detail in error.errors(include_url=False):
        path = _data_path(data, tuple(detail["loc"]))
        if path in seen:
            continue
        seen.add(path)
        problems.append(_word_problem(detail, path))
    return problems


def _word_problem(detail: ErrorDetails, path: PathKey) -> FleetProblem:
    kind = detail["type"]
    if kind == "extra_forbidden" and path:
        parent = _model_at(path[:-1])
        known = sorted(parent.model_fields) if parent else []
        close = difflib.get_close_matches(str(path[-1]), known, n=1, cutoff=0.5)
        if close:
            return FleetProblem(path, f"unknown key; did you mean {close[0]}?", f"rename it to {close[0]}")
        return FleetProblem(path, "unknown key", f"known keys here: {', '.join(known)}" if known else "remove it (docs/fleet.md lists the keys)")
    if kind == "missing":
        return FleetProblem(path, "required key is missing", f"add {path[-1]}:" if path else "declare hosts: and seats: (docs/fleet.md)")
    message = str(detail["msg"]).removeprefix("Value error, ")
    return FleetProblem(path, message, getattr(detail.get("ctx", {}).get("error"), "fix", None) or _number_fix(detail) or _field_fix(path))


def _number_fix(detail: ErrorDetails) -> str | None:
    """A number written with a decimal comma (``1,25``) or a thousands separator (``8,192``): the fix is the number
    as YAML reads it (issue 32), not the key's description."""
    written = detail.get("input")
    if detail["type"] not in ("float_parsing", "int_parsing") or not isinstance(written, str):
        return None
    text = written.strip()
    if re.fullmatch(r"\d{1,3}(,\d{3})+", text):
        plain = text.replace(",", "")
        if detail["type"] == "int_parsing":
            return f"write {plain} (no thousands separator: YAML reads {text} as text)"
        return f"write {plain}, or {text.replace(',', '.')} if the comma is a decimal point (YAML reads {text} as text)"
    if re.fullmatch(r"\d*,\d+", text) and detail["type"] == "float_parsing":
        return f"write {text.replace(',', '.')} (a decimal point: YAML reads {text} as text)"
    return None


def _field_fix(path: PathKey) -> str:
    """What the key takes, from the fleet schema's own description of it (docs/fleet.md lists them all)."""
    parent = _model_at(path[:-1]) if path else None
    field = parent.model_fields.get(str(path[-1])) if parent is not None else None
    if field is not None and field.description:
        return f"{path[-1]}: {field.description} (docs/fleet.md)"
    return "see docs/fleet.md for what this key takes"


# ----------------------------------------------------------------------------- checks pydantic cannot do


def resolve_gpu_ref(fleet: Fleet, ref: int | str) -> tuple[str, int] | None:
    """``2`` (the only host's GPU 2) or ``"host:2"`` → ``(host, 2)``; None when no such GPU exists."""
    if isinstance(ref, str) and whole_number(ref, maximum=MAX_GPU_INDEX) is not None:
        ref = int(ref)
    if isinstance(ref, int):
        if len(fleet.hosts) != 1:
            return None
        host = fleet.hosts[0]
        return (host.name, ref) if any(gpu.index == ref for gpu in host.gpus) else None
    host_name, _, index_text = ref.rpartition(":")
    if whole_number(index_text, maximum=MAX_GPU_INDEX) is None:
        return None
    for host in fleet.hosts:
        if host.name == host_name and any(gpu.index == int(index_text) for gpu in host.gpus):
            return (host.name, int(index_text))
    return None


def resolve_model(model: str, base_dir: Path) -> str:
    """A model directory relative to the fleet file, or the name as given (a Hugging Face id).

    A name that is not there and cannot be a Hub id (``./m``, ``~/m``, ``/m``, ``a/b/c``, ``models/Org--Name``,
    a bare ``m``) is an error naming the absolute path tried: relative paths are taken from the fleet file's
    directory, not from where seatplan runs, and a user who guessed otherwise needs to see which one was looked at.
    """
    candidate = Path(model).expanduser()
    if not candidate.is_absolute():
        candidate = base_dir / candidate
    if candidate.exists():
        return str(candidate.resolve())
    if parse_hub_id(model) is None or _under_a_local_directory(model, base_dir):
        raise SeatplanError(f"model directory {model} does not exist (tried {candidate.absolute()})", where=str(candidate.absolute()),
                            fix="a relative model path is taken from the fleet file's directory; correct it, give an absolute "
                                "path, or a Hugging Face id (ORG/NAME[@REVISION])")
    return model


def _under_a_local_directory(model: str, base_dir: Path) -> bool:
    """``models/qwen3`` where ``models/`` sits beside the fleet file: a path with a typo, not a Hub id."""
    head = model.split("/", 1)[0]
    return "/" in model and (base_dir / head).is_dir()


def gpu_refs(value: int | str | list[int | str] | None) -> list[int | str]:
    if value is None:
        return []
    return list(value) if isinstance(value, list) else [value]


def allowed_gpus(fleet: Fleet, seat: SeatSpec) -> list[tuple[str, int]] | None:
    """The GPUs a seat's ``pin``/``avoid`` allows, the one place it is decided (placement's ``pin_or_avoid`` filter
    judges by it): its pins; else every GPU it does not avoid; None when it names neither (every GPU). ``keep_clear``
    is not judged here: it is a filter of its own (the loader refuses a pin to a keep-clear GPU)."""
    pins = [key for key in (resolve_gpu_ref(fleet, ref) for ref in gpu_refs(seat.pin)) if key is not None]
    if pins:
        return pins
    avoided = {resolve_gpu_ref(fleet, ref) for ref in seat.avoid}
    if not avoided:
        return None
    return [(host.name, gpu.index) for host in fleet.hosts for gpu in host.gpus if (host.name, gpu.index) not in avoided]


def eligible_gpus(fleet: Fleet, seat: SeatSpec) -> list[tuple[str, int]]:
    """The GPUs a seat may land on: those :func:`allowed_gpus` allows that are not kept clear (placement's two
    static filters; its other filters judge size and load)."""
    allowed = allowed_gpus(fleet, seat)
    return [(host.name, gpu.index) for host in fleet.hosts for gpu in host.gpus
            if not gpu.keep_clear and (allowed is None or (host.name, gpu.index) in allowed)]


def control_problems(data: Any, path: PathKey = ()) -> list[FleetProblem]:
    """Every key or string value holding a character no file seatplan writes can carry (NUL, a control
    character, NEL, LS, PS): refused before any model sees it, as each consumer would misread it."""
    if isinstance(data, str):
        bad = control_character(data)
        return [FleetProblem(path, f"holds the control character {bad}", "remove it; fleet strings are plain text on one line")] if bad else []
    problems: list[FleetProblem] = []
    if isinstance(data, dict):
        for key, value in data.items():
            problems += control_problems(key, path + (str(key),)) + control_problems(value, path + (str(key),))
    elif isinstance(data, list):
        for position, item in enumerate(data):
            problems += control_problems(item, path + (position,))
    return problems


def check_fleet(fleet: Fleet) -> list[FleetProblem]:
    """Impossible values that pass the type checks: each names the path of the offending value."""
    problems: list[FleetProblem] = []
    problems += _check_hosts(fleet.hosts)
    problems += _check_seats(fleet)
    problems += _check_layout(fleet)
    return problems


def _check_hosts(hosts: list[HostSpec]) -> list[FleetProblem]:
    problems: list[FleetProblem] = []
    names: set[str] = set()
    for host_no, host in enumerate(hosts):
        if host.name in names:
            problems.append(FleetProblem(("hosts", host_no, "name"), f"host {host.name!r} is declared twice", "give each host a distinct name"))
        names.add(host.name)
        indexes: set[int] = set()
        for gpu_no, gpu in enumerate(host.gpus):
            problems += _check_gpu(("hosts", host_no, "gpus", gpu_no), gpu, indexes)
            indexes.add(gpu.index)
    return problems


def _check_gpu(path: PathKey, gpu: GpuSpec, indexes: set[int]) -> list[FleetProblem]:
    problems: list[FleetProblem] = []
    if gpu.index in indexes:
        problems.append(FleetProblem(path + ("index",), f"GPU index {gpu.index} appears twice on this host", "each GPU index once per host"))
    if gpu.total_bytes <= 0:
        problems.append(FleetProblem(path + ("total_bytes",), "a GPU's total memory must be more than 0", "write it as e.g. 95.59GiB"))
    elif gpu.reserved_bytes >= gpu.total_bytes:
        problems.append(
            FleetProblem(path + ("reserved_bytes",), "reserved memory is not less than the GPU's total", "reserve less than total_bytes, or mark the GPU keep_clear")
        )
    return problems


def _check_seats(fleet: Fleet) -> list[FleetProblem]:
    problems: list[FleetProblem] = []
    names: dict[str, int] = {}
    ports: dict[int, int] = {}
    largest_host = max(len(host.gpus) for host in fleet.hosts)
    for seat_no, seat in enumerate(fleet.seats):
        path: PathKey = ("seats", seat_no)
        if seat.name in names:
            problems.append(FleetProblem(path + ("name",), f"seat name {seat.name!r} is also used by seats[{names[seat.name]}]", "give each seat a distinct name"))
        names.setdefault(seat.name, seat_no)
        if seat.port is not None:
            if seat.port in ports:
                problems.append(FleetProblem(path + ("port",), f"port {seat.port} is also used by seats[{ports[seat.port]}]", "give each seat its own port"))
            ports.setdefault(seat.port, seat_no)
        problems += _check_seat_engine(path, seat)
        problems += _check_seat_parallelism(path, seat, largest_host)
        problems += _check_seat_gpus(fleet, path, seat)
    return problems


def _check_seat_engine(path: PathKey, seat: SeatSpec) -> list[FleetProblem]:
    if seat.engine == "fixed":
        if seat.memory_cap_bytes is None:
            return [FleetProblem(path, "a fixed seat needs memory_cap_bytes (the memory it is known to use per GPU)", "add memory_cap_bytes: e.g. 6GiB")]
        return []
    problems = []
    if not seat.model:
        problems.append(FleetProblem(path, "a vllm seat needs a model", "add model: a model directory or Hugging Face id"))
    if seat.memory_cap_bytes is not None:
        problems.append(
            FleetProblem(path + ("memory_cap_bytes",), "memory_cap_bytes is for fixed seats; a vllm seat's footprint is computed", "remove it, or set engine: fixed")
        )
    return problems


def _check_seat_parallelism(path: PathKey, seat: SeatSpec, largest_host: int) -> list[FleetProblem]:
    tp = seat.tensor_parallel_size
    if tp & (tp - 1):
        return [FleetProblem(path + ("tensor_parallel_size",), f"tensor_parallel_size {tp} is not a power of two", "use 1, 2, 4 or 8")]
    if tp > largest_host:
        return [FleetProblem(path + ("tensor_parallel_size",),
            f"tensor_parallel_size {tp} is more than the {largest_host} GPUs of the largest host",
            f"use at most {largest_host}")]
    return []


def _check_seat_gpus(fleet: Fleet, path: PathKey, seat: SeatSpec) -> list[FleetProblem]:
    problems: list[FleetProblem] = []
    pins = gpu_refs(seat.pin)
    for position, ref in enumerate(pins):
        ref_path = path + ("pin",) + ((position,) if isinstance(seat.pin, list) else ())
        resolved = resolve_gpu_ref(fleet, ref)
        if resolved is None:
            problems.append(FleetProblem(ref_path, f"pin to GPU {ref!r}, which the fleet does not declare", _gpu_ref_fix(fleet)))
        elif _gpu(fleet, resolved).keep_clear:
            problems.append(FleetProblem(ref_path, f"pin to GPU {ref!r}, which is keep_clear", "pin another GPU, or drop keep_clear"))
    if pins and len(pins) != seat.tensor_parallel_size:
        problems.append(
            FleetProblem(path + ("pin",), f"{len(pins)} GPU(s) pinned for tensor_parallel_size {seat.tensor_parallel_size}", "pin one GPU per tensor-parallel rank")
        )
    for position, ref in enumerate(seat.avoid):
        if resolve_gpu_ref(fleet, ref) is None:
            problems.append(FleetProblem(path + ("avoid", position), f"avoid GPU {ref!r}, which the fleet does not declare", _gpu_ref_fix(fleet)))
    return problems


def _check_layout(fleet: Fleet) -> list[FleetProblem]:
    problems: list[FleetProblem] = []
    names = {seat.name for seat in fleet.seats}
    for seat_name, value in fleet.current_layout.items():
        path: PathKey = ("current_layout", seat_name)
        if seat_name not in names:
            close = difflib.get_close_matches(seat_name, sorted(names), n=1)
            problems.append(FleetProblem(path, f"current_layout names seat {seat_name!r}, which is not declared" + (f"; did you mean {close[0]}?" if close else ""),
                                         f"rename it to {close[0]}" if close else "remove it, or declare the seat under seats:"))
        for ref in gpu_refs(value):
            if resolve_gpu_ref(fleet, ref) is None:
                problems.append(FleetProblem(path, f"current_layout puts {seat_name} on GPU {ref!r}, which the fleet does not declare", _gpu_ref_fix(fleet)))
    return problems


def require_ports(loaded: LoadedFleet) -> None:
    """Refuse a vLLM seat without a port before it is planned: its health check, the gateway's route and verify
    all reach the engine on it, so a plan without one could not be rendered. A fixed seat needs none (seatplan
    neither starts nor reaches it). Every such seat is named, each with a port no seat of the file uses."""
    fleet = loaded.fleet
    taken = {seat.port for seat in fleet.seats if seat.port is not None}
    free = (port for port in range(8000, 65536) if port not in taken)
    problems = [
        FleetProblem(("seats", seat_no), f"seat {seat.name} has no port; render, the gateway and verify reach its engine on it",
                     f"add port: {next(free)} to seat {seat.name} (each seat its own port)")
        for seat_no, seat in enumerate(fleet.seats) if seat.engine == "vllm" and seat.port is None
    ]
    _raise_problems(problems, loaded.lines, str(loaded.path))


def _gpu(fleet: Fleet, ref: tuple[str, int]) -> GpuSpec:
    host = next(host for host in fleet.hosts if host.name == ref[0])
    return next(gpu for gpu in host.gpus if gpu.index == ref[1])


def _gpu_ref_fix(fleet: Fleet) -> str:
    if len(fleet.hosts) == 1:
        return f"use a GPU index of host {fleet.hosts[0].name}: {', '.join(str(gpu.index) for gpu in fleet.hosts[0].gpus)}"
    return "write HOST:INDEX with a declared host and GPU index"


# ----------------------------------------------------------------------------- TODOs left by adopt

TODO = "TODO"  # what `seatplan adopt` writes where it could not tell a value (docs/adopt.md)


def todo_problems(data: Any, path: PathKey = ()) -> list[FleetProblem]:
    """Every value still ``TODO``: a plan from a guessed fleet would be a guess, so each must be filled first."""
    if isinstance(data, str):
        return [FleetProblem(path, "still TODO: `seatplan adopt` could not tell this value",
                             "fill it in (the comment on that line says what was missing), then plan again")] if data.strip() == TODO else []
    if isinstance(data, dict):
        return [problem for key, value in data.items() for problem in todo_problems(value, path + (str(key),))]
    if isinstance(data, list):
        return [problem for position, value in enumerate(data) for problem in todo_problems(value, path + (position,))]
    return []


# ----------------------------------------------------------------------------- entry point


def parse_fleet(text: str, display: str) -> tuple[Fleet, dict[PathKey, int]]:
    """Validate fleet YAML ``text``; ``display`` is the file name errors carry."""
    data, lines = read_yaml_lines(text, display)
    if not isinstance(data, dict):
        raise SeatplanError("the fleet file must be a mapping with hosts: and seats:", where=f"{display}:1", fix="see docs/fleet.md")
    _refuse_other_files(data, display)
    _raise_problems(todo_problems(data), lines, display)
    _raise_problems(control_problems(data), lines, display)
    try:
        fleet = Fleet.model_validate(data)
    except ValidationError as error:
        _raise_problems(_problems_from_validation(error, data), lines, display)
    _raise_problems(check_fleet(fleet), lines, display)
    return fleet, lines


FLEET_FIX = "pass the fleet YAML file (hosts: and seats:, docs/fleet.md); `seatplan adopt` writes one from what runs"


def _refuse_other_files(data: dict[Any, Any], display: str) -> None:
    """The files a newcomer passes for a fleet file: a document seatplan wrote, a compose file, a LiteLLM config.
    Each is named for what it is, with the command that takes it, rather than as a list of unknown keys."""
    kind = data.get("kind")
    if isinstance(kind, str) and kind in KIND_NAMES:
        fix = FLEET_FIX + ("; to plan from what this plan runs, add it as --current (seatplan plan FLEET --current PLAN)"
                           if kind == "seatplan.plan" else "")
        raise SeatplanError(f"this is {kind_said(kind)}, not a fleet file", where=display, fix=fix)
    if "hosts" in data or "seats" in data:
        return
    if "services" in data:
        raise SeatplanError("this is a compose file (services:), not a fleet file", where=display,
                            fix=f"write a fleet file from it: seatplan adopt --compose HOST={display} -o fleet.yaml (docs/adopt.md)")
    if "model_list" in data:
        raise SeatplanError("this is a LiteLLM config (model_list:), not a fleet file", where=display,
                            fix=f"write a fleet file from it: seatplan adopt --litellm-config {display} -o fleet.yaml (docs/adopt.md)")


def _raise_problems(problems: list[FleetProblem], lines: dict[PathKey, int], display: str) -> None:
    if not problems:
        return
    problems = sorted(problems, key=lambda problem: line_of(lines, problem.path))
    first = problems[0]
    message = f"{format_path(first.path)}: {first.message}"
    for other in problems[1:]:
        message += f"\n  {display}:{line_of(lines, other.path)}: {format_path(other.path)}: {other.message}"
    raise SeatplanError(message, where=f"{display}:{line_of(lines, first.path)}",
                        fix=first.fix or "correct the value at that line (`seatplan schema` prints every key and its type)")


MAX_FLEET_BYTES = 1 << 20  # a fleet of a hundred seats is tens of kilobytes


def load_fleet(path: str | Path) -> LoadedFleet:
    fleet_path = Path(path)
    check_input_file(fleet_path, "fleet file")
    try:
        with fleet_path.open("rb") as stream:
            raw = stream.read(MAX_FLEET_BYTES + 1)
    except OSError as problem:
        raise SeatplanError(f"cannot read the fleet file: {problem.strerror}", where=str(fleet_path), fix="give the path of a fleet YAML file") from None
    if len(raw) > MAX_FLEET_BYTES:
        raise SeatplanError(f"the fleet file is larger than {MAX_FLEET_BYTES:,} bytes", where=str(fleet_path),
                            fix="check that this is the fleet file; one describes hosts and seats in a few kilobytes")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as problem:
        line = raw.count(b"\n", 0, problem.start) + 1
        raise SeatplanError(f"the fleet file is not UTF-8 text ({problem.reason})", where=f"{fleet_path}:{line}",
                            fix="save it as UTF-8") from None
    fleet, lines = parse_fleet(text, str(fleet_path))
    return LoadedFleet(fleet=fleet, path=fleet_path, sha256=hashlib.sha256(raw).hexdigest(), lines=lines)
