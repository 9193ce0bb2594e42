"""What apply checks before it touches a host: the plan's inputs are unchanged, it still fits, and it is for these hosts.

Each check returns the problems it found, as sentences; apply refuses when there is any (``--force`` applies
anyway and says what it overrode).
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from seatplan.documents.fleet import Fleet
from seatplan.documents.fleet_file import LoadedFleet, load_fleet, resolve_model
from seatplan.documents.plan import Plan
from seatplan.errors import SeatplanError
from seatplan.facts.api import COMMIT_KEY, located_model_files_sha256
from seatplan.render.runner import ansible_playbook
from seatplan.units import human_bytes

INVENTORY_TIMEOUT_S = 60


def fleet_path_of(plan: Plan, plan_path: Path, fleet: Path | None) -> Path | None:
    """``--fleet``, else the plan's recorded fleet file (as given, then beside the plan); None when neither exists."""
    if fleet is not None:
        return fleet
    recorded = Path(plan.inputs.fleet_path)
    return next((candidate for candidate in (recorded, plan_path.parent / recorded) if candidate.is_file()), None)


def changed_inputs(plan: Plan, loaded: LoadedFleet) -> list[str]:
    """The fleet file's hash, then each seat's model files, against what the plan recorded."""
    problems = []
    if loaded.sha256 != plan.inputs.fleet_sha256:
        problems.append(f"the fleet file {loaded.path} changed since the plan was made (SHA-256 {loaded.sha256[:12]}…, the plan has {plan.inputs.fleet_sha256[:12]}…)")
    recorded = plan.inputs.model_facts_sha256
    if recorded is None:
        return problems + ["the plan records no hashes of its model files (it was made by an older seatplan), so a changed model cannot be ruled out"]
    specs = {seat.name: seat for seat in loaded.fleet.seats}
    for seat_name, then in sorted(recorded.items()):
        spec = specs.get(seat_name)
        if spec is None or spec.model is None:
            problems.append(f"seat {seat_name} is no longer in the fleet file")
            continue
        now = current_model_files(spec.model, loaded.base_dir)
        if isinstance(now, str):
            problems.append(f"seat {seat_name}: {now}")
            continue
        files = sorted(name for name in then.keys() | now.keys() if then.get(name) != now.get(name))
        if COMMIT_KEY in files:
            files.remove(COMMIT_KEY)
            problems.append(f"seat {seat_name}: {spec.model} is now commit {now.get(COMMIT_KEY) or '(none)'} on the Hub; the plan read "
                            f"commit {then.get(COMMIT_KEY) or '(none)'}")
        if files:
            problems.append(f"seat {seat_name}: the model's {', '.join(files)} changed since the plan was made")
    return problems


def current_model_files(model: str, base_dir: Path) -> dict[str, str] | str:
    """The model's file hashes now, or why they cannot be read."""
    try:
        return located_model_files_sha256(resolve_model(model, base_dir))
    except SeatplanError as problem:
        return f"its model cannot be read now ({problem.message})"


def misfits(plan: Plan, fleet: Fleet | None) -> list[str]:
    """GPUs whose planned use no longer fits: used ≤ total − reserved − headroom, with the fleet's current
    figures (the plan's own when the fleet file is gone)."""
    if plan.infeasible is not None:
        return [f"the plan found no layout: {plan.infeasible.summary}"]
    current = {(host.name, gpu.index): gpu for host in fleet.hosts for gpu in host.gpus} if fleet else {}
    headroom = fleet.policy.headroom_bytes if fleet else None
    problems = []
    for planned in plan.gpus:
        label = f"{planned.host}:{planned.index}"
        gpu = current.get((planned.host, planned.index)) if fleet else planned
        if gpu is None:
            problems.append(f"GPU {label} is in the plan but not in the fleet file")
            continue
        reserve = 0 if gpu.keep_clear else (planned.headroom_bytes if headroom is None else headroom)
        room = gpu.total_bytes - gpu.reserved_bytes - reserve
        if planned.used_bytes > room:
            problems.append(f"GPU {label}: the plan uses {human_bytes(planned.used_bytes)}, more than the {human_bytes(room)} it has "
                            f"({human_bytes(gpu.total_bytes)} total − {human_bytes(gpu.reserved_bytes)} reserved − {human_bytes(reserve)} headroom)")
    return problems


def inventory_hosts(inventory: Path) -> set[str]:
    """Every host the inventory names, as Ansible itself reads it (YAML, INI or a script)."""
    command = [str(Path(ansible_playbook()).with_name("ansible-inventory")), "-i", str(inventory), "--list"]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=INVENTORY_TIMEOUT_S, stdin=subprocess.DEVNULL)
        listing = json.loads(done.stdout) if done.returncode == 0 else None
    except (OSError, subprocess.TimeoutExpired, json.JSONDecodeError):
        listing = None
    if not isinstance(listing, dict):
        raise SeatplanError("ansible-inventory cannot read the inventory", where=str(inventory), fix="check it with: ansible-inventory -i INVENTORY --list")
    hosts = set(listing.get("_meta", {}).get("hostvars", {}))
    for group in listing.values():
        if isinstance(group, dict):
            hosts.update(group.get("hosts", []))
    return hosts


def other_hosts(plan: Plan, hosts: set[str]) -> list[str]:
    """The plan's engine hosts must all be in the inventory, and the inventory must hold no host the plan does not know."""
    engine_hosts = {seat.host for seat in plan.seats if seat.host and seat.gpus}
    known = engine_hosts | {gpu.host for gpu in plan.gpus}
    problems = []
    if missing := sorted(engine_hosts - hosts):
        problems.append(f"the inventory lacks the plan's host(s) {', '.join(missing)}")
    if extra := sorted(hosts - known):
        problems.append(f"the inventory holds host(s) {', '.join(extra)} that the plan does not know (a plan for another host set?)")
    return problems


def apply_problems(plan: Plan, plan_path: Path, fleet_override: Path | None, inventory: Path | None) -> list[str]:
    """Everything that makes applying ``plan`` unsafe now; empty when it may go ahead (``inventory`` None: a cluster,
    whose nodes kubectl reaches, so no host list to hold the plan's hosts to)."""
    fleet_path = fleet_path_of(plan, plan_path, fleet_override)
    loaded = None
    problems = []
    if fleet_path is None:
        problems.append(f"the plan's fleet file {plan.inputs.fleet_path} is not here, so its inputs cannot be checked")
    else:
        try:
            loaded = load_fleet(fleet_path)
        except SeatplanError as problem:
            problems.append(f"the fleet file cannot be read now ({problem.message})")
    if loaded is not None:
        problems += changed_inputs(plan, loaded)
    problems += misfits(plan, loaded.fleet if loaded else None)
    return problems + (other_hosts(plan, inventory_hosts(inventory)) if inventory is not None else [])
