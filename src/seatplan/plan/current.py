"""What runs now, for ``seatplan plan FLEET --current PLAN|RENDER_DIR``: each seat's GPUs and engine command.

From a plan: its seats' GPUs and launches. From a directory ``seatplan render`` wrote: the plan its manifest names
(when that file is still the one rendered, by SHA-256), else the env files themselves, which are what the engines
were started with: ``CUDA_VISIBLE_DEVICES``, and each seat's launch read back through the engine codec
(``engine.launch.seat_launch_from_env``: its command as vLLM reads it, its environment and secret references).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path

from seatplan.documents.fleet import Fleet
from seatplan.documents.fleet_file import gpu_refs, resolve_gpu_ref
from seatplan.documents.io import read_bounded_json, read_plan
from seatplan.documents.launch import SeatLaunch
from seatplan.documents.plan import Plan, PlanInfeasibility, seat_launch
from seatplan.engine.launch import seat_launch_from_env
from seatplan.engine.parse import parse_env
from seatplan.errors import SeatplanError
from seatplan.fileio import check_input_file
from seatplan.units import MAX_GPU_INDEX, GiB, whole_number

# written by the render stage beside its files; read here as a document, not through render's code
RENDER_MANIFEST = "seatplan-render.json"


@dataclass(frozen=True)
class CurrentLayout:
    source: str  # what the plan records in inputs.current_from
    gpus: dict[str, list[str]]  # seat → GPU refs as current_layout takes them ("host:index")
    # seat → what its engine was started with (engine.change compares it with the plan's); a seat not here runs, but
    # not as seatplan started it (a fixed seat, or an engine without seatplan's env file)
    launches: dict[str, SeatLaunch] = field(default_factory=dict)
    footprints_bytes: dict[str, int] = field(default_factory=dict)  # seat → its footprint per GPU where a plan says (the rollout's figure)


def read_current(path: Path, fleet: Fleet) -> CurrentLayout:
    layout = _read_layout(path, fleet)
    seats = {seat.name for seat in fleet.seats}
    if layout.gpus and not seats & set(layout.gpus):
        # a seat added or removed since is normal; none in common is another fleet's plan or rollout
        raise SeatplanError(f"what runs there ({', '.join(sorted(layout.gpus))}) is none of this fleet's seats: another fleet's plan or rollout?",
                            where=f"--current {path}", fix="pass the plan or the rendered directory of this fleet, or leave --current out")
    return layout


def _read_layout(path: Path, fleet: Fleet) -> CurrentLayout:
    if path.is_file():
        return from_plan(path)
    if not path.is_dir():
        raise SeatplanError("no such plan or rendered directory", where=str(path), fix="pass the last plan (plan.json) or the directory `seatplan render` wrote")
    manifest_path = path / RENDER_MANIFEST
    if not manifest_path.is_file():
        raise SeatplanError(f"not a directory `seatplan render` wrote (no {RENDER_MANIFEST})", where=str(path),
                            fix="pass the rendered directory itself, or the plan it was rendered from")
    manifest = read_manifest(manifest_path)
    settings = manifest.get("settings")
    rendered_from = Path(str(settings.get("plan_path", ""))) if isinstance(settings, dict) else Path()
    if rendered_from.is_file() and hashlib.sha256(rendered_from.read_bytes()).hexdigest() == manifest.get("plan_sha256"):
        return from_plan(rendered_from, source=f"{path} (rendered from {rendered_from})")
    return from_env_files(path, fleet)


def read_manifest(path: Path) -> dict:
    document = read_bounded_json(path, "render manifest", "render the directory again")
    if not isinstance(document, dict):
        raise SeatplanError("the render manifest is not a JSON object", where=str(path), fix="render the directory again")
    return document


def from_plan(path: Path, source: str | None = None) -> CurrentLayout:
    plan = read_plan(path)
    placed = [seat for seat in plan.seats if seat.gpus]
    return CurrentLayout(source or str(path), {seat.name: list(seat.gpus) for seat in placed}, {seat.name: seat_launch(seat) for seat in placed},
                         {seat.name: seat.footprint_bytes for seat in placed})


def from_env_files(directory: Path, fleet: Fleet) -> CurrentLayout:
    """The env files as the engines read them; GPU indices name a host only on a one-host fleet."""
    gpus: dict[str, list[str]] = {}
    launches: dict[str, SeatLaunch] = {}
    for env_file in sorted((directory / "env").glob("*.env")):
        check_input_file(env_file, "env file")
        values = parse_env(env_file.read_text(encoding="utf-8", errors="replace"))
        seat = env_file.stem
        launches[seat] = launch_of(values, env_file)
        indices = [index.strip() for index in values.get("CUDA_VISIBLE_DEVICES", "").split(",") if index.strip()]
        if not indices:
            continue
        if len(fleet.hosts) != 1 or not all(whole_number(index, maximum=MAX_GPU_INDEX) is not None for index in indices):
            raise SeatplanError(f"{env_file.name}: CUDA_VISIBLE_DEVICES={values['CUDA_VISIBLE_DEVICES']} does not say which host",
                                where=str(env_file), fix="pass the plan the directory was rendered from: --current PLAN")
        gpus[seat] = [f"{fleet.hosts[0].name}:{index}" for index in indices]
    return CurrentLayout(f"{directory} (its env files)", gpus, launches)


def launch_of(values: dict[str, str], where: Path) -> SeatLaunch:
    try:
        return seat_launch_from_env(values)
    except SeatplanError as problem:
        raise SeatplanError(f"the engine it starts cannot be read: {problem.message}", where=str(where), fix=problem.fix or "render the directory again") from None


def running_gpus(fleet: Fleet) -> dict[str, list[str]]:
    """Each seat's GPUs in the fleet's current_layout (``--current`` already merged in), as ``host:index``."""
    found: dict[str, list[str]] = {}
    for seat, refs in fleet.current_layout.items():
        keys = [key for key in (resolve_gpu_ref(fleet, ref) for ref in gpu_refs(refs)) if key is not None]
        found[seat] = [f"{host}:{index}" for host, index in keys]
    return found


def not_as_asked(plan: Plan, fleet: Fleet, max_moves: int) -> PlanInfeasibility:
    """``--max-moves`` that no layout meets: each GPU that would be over if the seats stayed where they run, by how
    much, and the fewest moves that fit (issue 32: it exited 0 with a plan of more moves than asked)."""
    running = running_gpus(fleet)
    footprint = {seat.name: seat.footprint_bytes for seat in plan.seats}
    said = []
    for gpu in plan.gpus:
        label = f"{gpu.host}:{gpu.index}"
        here = [name for name, gpus in running.items() if label in gpus and name in footprint]
        usable_bytes = 0 if gpu.keep_clear else gpu.total_bytes - gpu.reserved_bytes - gpu.headroom_bytes
        used_bytes = sum(footprint[name] for name in here)
        if here and used_bytes > usable_bytes:
            said.append(f"GPU {label} would hold {used_bytes / GiB:.2f} GiB ({', '.join(here)}) where {usable_bytes / GiB:.2f} GiB is usable"
                        f"{' (kept clear)' if gpu.keep_clear else ' (total − reserved − headroom)'}: over by {(used_bytes - usable_bytes) / GiB:.2f} GiB")
    new = [seat.name for seat in plan.seats if seat.gpus and not running.get(seat.name)]
    moved = [seat.name for seat in plan.seats if running.get(seat.name) and sorted(running[seat.name]) != sorted(seat.gpus)]
    if not said:
        said.append(f"where the seats run they fit, but {', '.join(moved) or 'some'} cannot stay (a pin, avoid or filter)"
                    + (f" and {', '.join(new)} (not running yet) need room that only moves make" if new else ""))
    return PlanInfeasibility(
        summary=f"does not fit as asked: --max-moves {max_moves}, but the fewest moves that fit are {plan.moves} ({', '.join(moved)} "
                f"elsewhere). Kept where they run: " + "; ".join(said)
                + f". Fix: allow them (--max-moves {plan.moves}), or make room on those GPUs (the footprints below)",
        seats=[],
    )


def layout_disagreements(fleet: Fleet, running: CurrentLayout) -> list[str]:
    """Seats whose GPUs in the fleet file's current_layout are not where ``running`` says they run, as
    ``seat is on b, not a`` (a seat the fleet file does not place, or ``running`` does not know, is no
    disagreement: it is new, not started yet, or a fixed seat no env file names)."""
    written = running_gpus(fleet)
    return [f"{name} is on {', '.join(gpus)}, not {', '.join(written[name])}"
            for name, gpus in sorted(running.gpus.items()) if written.get(name) and sorted(written[name]) != sorted(gpus)]


def stale_layout_warning(fleet: Fleet, fleet_path: Path, running: CurrentLayout, *, passed: bool) -> str | None:
    """A warning, with the fix, when the fleet file's hand-written current_layout disagrees with what runs (issue 32:
    after a rollout, `plan` without --current counted 4 moves against the old current_layout while `diff` said
    nothing changes). ``passed``: ``running`` came with --current (so it won); else it is the last plan beside."""
    differing = layout_disagreements(fleet, running)
    if not differing:
        return None
    said = "; ".join(differing)
    if passed:
        return (f"the fleet file's current_layout disagrees with --current {running.source}: {said}. --current was used. Fix: update "
                f"current_layout in {fleet_path} (or remove it), so that a plan without --current counts moves from what runs")
    return (f"the fleet file's current_layout disagrees with the last plan {running.source}: {said}. The moves above are counted from "
            f"current_layout. Fix: if that plan was rolled out, plan with --current {running.source} (or the directory `seatplan render` "
            f"wrote), or update current_layout in {fleet_path}")
