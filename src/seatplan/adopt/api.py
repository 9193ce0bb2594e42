"""adopt end to end: read every source given, assemble, print, and check the text with the fleet loader."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from seatplan.adopt.assemble import Adopted, Noted, Tree, adopt
from seatplan.adopt.engines import checked_base_url, probe_engines
from seatplan.adopt.evidence import EngineSeen, Route
from seatplan.adopt.observed import observe
from seatplan.adopt.readers import read_launches
from seatplan.adopt.readers.compose_gateway import read_gateway_container
from seatplan.adopt.readers.litellm import read_litellm_config
from seatplan.adopt.readers.nvidia_smi import read_apps_file, run_compute_apps, smi_readings
from seatplan.adopt.readers.processes import ProcessTable, read_proc, read_ps_file
from seatplan.adopt.readers.text import host_and_path
from seatplan.adopt.writer import fleet_text
from seatplan.documents.fleet import HOST_PATH_PATTERN, Fleet, HostSpec, SeatSpec
from seatplan.documents.fleet_file import TODO, control_problems, format_path, parse_fleet, todo_problems
from seatplan.documents.observed import ObservedFootprints
from seatplan.errors import SeatplanError
from seatplan.output import printable


@dataclass
class Sources:
    litellm_config: Path | None = None
    engines: list[str] = field(default_factory=list)
    composes: list[str] = field(default_factory=list)  # [HOST=]FILE
    env_dirs: list[str] = field(default_factory=list)  # [HOST=]DIR
    systemd_dirs: list[str] = field(default_factory=list)  # [HOST=]DIR of .service units
    nvidia_smi: list[str] = field(default_factory=list)
    gpus_from_host: bool = False
    compute_apps: list[Path] = field(default_factory=list)  # nvidia-smi --query-compute-apps CSVs: what fixed seats hold
    timeout_s: float = 10.0
    processes: list[str] = field(default_factory=list)  # [HOST=]FILE of `ps -ww -eo pid,ppid,args`: ties compute-apps PIDs to seats
    processes_from_host: bool = False  # /proc here: the same, with the ports each process listens on


@dataclass
class Result:
    text: str
    adopted: Adopted
    todo: list[str]  # the paths still TODO, as the loader words them
    observed: ObservedFootprints | None = None  # what the box shows each seat and GPU holding (adopt --observed)


def _engines(sources: Sources, routes: list[Route]) -> list[EngineSeen]:
    wanted: dict[str, str] = {}
    for url in sources.engines:
        wanted.setdefault(checked_base_url(url, "--engine"), "--engine")
    for route in routes:
        if route.base_url is not None:
            try:
                wanted.setdefault(checked_base_url(route.base_url, route.source), route.source)
            except SeatplanError:
                continue  # the route's warning names it (assemble: no engine at that URL was read)
    return probe_engines(wanted, sources.timeout_s)


def adopt_sources(sources: Sources, display: str) -> Result:
    if not (sources.litellm_config or sources.engines or sources.composes or sources.env_dirs or sources.systemd_dirs):
        raise SeatplanError("nothing to adopt", where="adopt",
                            fix="give --litellm-config, --engine URL, --compose FILE, --env-dir DIR or --systemd DIR")
    routes = read_litellm_config(sources.litellm_config) if sources.litellm_config else []
    launches, read_warnings = read_launches(sources.env_dirs, sources.composes, sources.systemd_dirs)
    readings = smi_readings(sources.nvidia_smi, sources.gpus_from_host, sources.timeout_s)
    apps = [app for path in sources.compute_apps for app in read_apps_file(path)] if sources.compute_apps else None
    if apps is None and sources.gpus_from_host and sources.processes_from_host:
        apps = run_compute_apps(sources.timeout_s)  # on the GPU host: its processes, to tie to the seats through /proc
    containers = [found for spec in sources.composes if (found := read_gateway_container(host_and_path(spec)[1])) is not None]
    adopted = adopt(readings, launches, _engines(sources, routes), routes, apps, containers[0] if containers else None)
    adopted.warnings[:0] = read_warnings
    config = str(sources.litellm_config.resolve()) if sources.litellm_config is not None else None
    if config is not None and re.fullmatch(HOST_PATH_PATTERN, config):
        # render keeps all of it but the seats' routes (docs/render.md); the path as adopt was given it, made absolute
        adopted.tree["gateway"] = {"config": Noted(config, "--litellm-config: the gateway's config (right where adopt runs on the gateway "
                                                   "host, else correct it)")}
    elif config is not None:
        adopted.warnings.append(f"--litellm-config: its path {config[:120]!r} is no path a fleet file holds (letters, digits, ._/@+-): "
                                "gateway.config is left out; give render --gateway-config PATH")
    check_names(adopted.tree)
    mark_refused(adopted)
    text = fleet_text(adopted.tree)
    tables: list[ProcessTable] = [read_ps_file(spec) for spec in sources.processes] + ([read_proc()] if sources.processes_from_host else [])
    observed, observed_warnings = observe(adopted, apps, tables, reading_time, datetime.now(UTC))
    adopted.warnings += observed_warnings
    return Result(text=text, adopted=adopted, todo=check_text(text, display), observed=observed)


def reading_time(source: str) -> datetime:
    """When a figure was read: its file's modification time (``FILE:LINE``; the nvidia-smi output saved then), or now
    for what adopt read itself (nvidia-smi on this host)."""
    path = Path(source.rsplit(":", 1)[0]) if ":" in source else Path(source)
    try:
        return datetime.fromtimestamp(path.stat().st_mtime, UTC)
    except OSError:
        return datetime.now(UTC)


def check_names(tree: Tree) -> None:
    """Host and seat names went through the fleet's own models: a hostile name stops adopt, naming where it was read."""
    for host in tree["hosts"]:
        _validated(HostSpec, {"name": host["name"].value, "gpus": [{"index": 0, "total_bytes": 1}]}, host["name"])
    for seat in tree["seats"]:
        _validated(SeatSpec, {"name": seat["name"].value}, seat["name"])


def _validated(model: type[HostSpec] | type[SeatSpec], data: dict, noted: Noted) -> None:
    if noted.value == TODO:
        return
    try:
        model.model_validate(data)
    except ValidationError as error:
        message = error.errors(include_url=False)[0]["msg"]
        raise SeatplanError(f"{model.__name__.removesuffix('Spec').lower()} name {str(noted.value)[:80]!r} read from {noted.note} "
                            f"is no name a fleet file takes: {message}", where=noted.note,
                            fix="rename it there (letters, digits, '.', '_', '-'), or adopt from the other sources") from None


def mark_refused(adopted: Adopted) -> None:
    """A value the fleet's own models refuse (a hostile address, a version that is no version, a model that is a
    flag, a control character in a GPU name) becomes TODO with the reason and a warning: adopt never writes a value
    plan would refuse, even in a file whose other TODOs keep plan from loading it yet."""
    for _ in range(8):  # each round marks what the models refuse; a marked value cannot be refused again
        data = yaml.safe_load(fleet_text(adopted.tree))
        refused = [(problem.path, problem.message) for problem in control_problems(data)]
        try:
            Fleet.model_validate(data)
        except ValidationError as error:
            refused += [(tuple(item["loc"]), str(item["msg"])) for item in error.errors(include_url=False)]
        todo = [problem.path for problem in todo_problems(data)]
        marked = False
        for path, message in refused:
            if any(path[: len(known)] == known for known in todo):
                continue  # the loader's "still TODO", not a value read
            holder, key = _leaf(adopted.tree, path)
            if holder is None:
                continue
            noted = holder[key]
            reason = printable(message)[:200]
            holder[key] = Noted(TODO, f"{noted.note}: not written, plan would refuse it ({reason})")
            adopted.warnings.append(f"{format_path(path)}: what {noted.note} says is refused by the fleet's rules ({reason}): "
                                    "written as TODO")
            marked = True
        if not marked:
            return


def _leaf(tree: Tree, path: tuple) -> tuple[Any, Any]:
    """The container and key of the written value at (or above) ``path``; (None, None) where none was read."""
    node: Any = tree
    for part in path:
        child = node[part] if isinstance(node, dict) and part in node else (
            node[part] if isinstance(node, list) and isinstance(part, int) and part < len(node) else None)
        if isinstance(child, Noted):
            return (node, part) if child.value not in (TODO, None) else (None, None)
        if child is None:
            return None, None
        node = child
    return None, None


def check_text(text: str, display: str) -> list[str]:
    """The loader's verdict: a file without TODO must load as is; one with TODOs lists them (plan refuses it)."""
    todo = todo_problems(yaml.safe_load(text))
    if not todo:
        try:
            parse_fleet(text, display)
        except SeatplanError as problem:
            raise SeatplanError(f"what adopt read does not make a fleet file, so nothing was written: {problem.message}"
                                f"{_source_of(text, problem.where)}", where=problem.where,
                                fix="correct the source that line came from (its comment names it), then adopt again") from None

    return [format_path(problem.path) for problem in todo]


def _source_of(text: str, where: str | None) -> str:
    """The would-be line the loader refused, whose comment names the file or engine it came from."""
    number = where.rsplit(":", 1)[-1] if where else ""
    lines = text.splitlines()
    if not number.isdigit() or not 0 < int(number) <= len(lines):
        return ""
    return f"\n  line {number} would read: {lines[int(number) - 1].strip()}"
