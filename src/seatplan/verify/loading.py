"""Read what verify and upgrade-check need: the plan, its fleet file (host addresses and devices) and
the gateway key (from the environment only)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from seatplan.documents.fleet_file import load_fleet
from seatplan.documents.io import read_plan
from seatplan.documents.plan import Plan
from seatplan.errors import SeatplanError
from seatplan.facts.api import load_model_facts
from seatplan.verify.expect import FactsLoader, HostInfo


@dataclass(frozen=True)
class VerifyContext:
    plan: Plan
    hosts: dict[str, HostInfo]
    fleet_dir: Path
    facts_loader: FactsLoader


def fleet_path_of(plan: Plan, plan_path: Path, fleet: Path | None) -> Path:
    """``--fleet``, else the plan's fleet file as recorded (relative to here, then to the plan's folder)."""
    if fleet is not None:
        return fleet
    recorded = Path(plan.inputs.fleet_path)
    for candidate in (recorded, plan_path.parent / recorded):
        if candidate.is_file():
            return candidate
    raise SeatplanError(f"the plan's fleet file {recorded} is not here (verify reads host addresses and models from it)",
                        where=f"{plan_path}: inputs.fleet_path", fix="pass --fleet FILE")


def load_context(plan_path: Path, fleet: Path | None) -> VerifyContext:
    plan = read_plan(plan_path)
    loaded = load_fleet(fleet_path_of(plan, plan_path, fleet))
    hosts = {host.name: HostInfo(address=host.reachable_at, device=host.device) for host in loaded.fleet.hosts}
    return VerifyContext(plan=plan, hosts=hosts, fleet_dir=loaded.base_dir, facts_loader=load_model_facts)


def gateway_key(variable: str) -> str | None:
    """The gateway key from the environment variable ``variable`` ('' = the gateway needs none)."""
    if not variable:
        return None
    key = os.environ.get(variable)
    if not key:
        raise SeatplanError(f"the environment variable {variable} holding the gateway key is not set",
                            where="--key-env", fix=f"export {variable}=... (or pass --key-env '' for a gateway without keys)")
    return key
