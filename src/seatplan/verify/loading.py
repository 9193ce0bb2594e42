"""Read what verify and upgrade-check need: the plan, its fleet file (host addresses and devices) and
the gateway key (from the environment or a file)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import httpx2

from seatplan.documents.fleet_file import load_fleet
from seatplan.documents.io import read_plan
from seatplan.documents.plan import Plan
from seatplan.errors import SeatplanError
from seatplan.facts.api import load_model_facts
from seatplan.output import clipped, printable
from seatplan.secrets import check_environment_name, read_secret
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
    missing = sorted({gpu.host for gpu in plan.gpus if gpu.seats} - set(hosts))
    if missing:
        # another fleet's file: verify would ask the plan's host names for addresses the fleet does not give
        raise SeatplanError(f"the fleet file names no host {', '.join(missing)}, where the plan runs its seats", where=str(loaded.path),
                            fix=f"pass --fleet the fleet file this plan was made from ({plan.inputs.fleet_path})")
    return VerifyContext(plan=plan, hosts=hosts, fleet_dir=loaded.base_dir, facts_loader=load_model_facts)


def gateway_key(variable: str, key_file: Path | None = None) -> str | None:
    """The gateway key from the environment variable ``variable``, else from ``key_file`` ('' and no file = the
    gateway needs none). Never from a flag's value: that lands in shell history and ``ps``."""
    if not variable and key_file is None:
        return None
    if variable:
        check_environment_name(variable, "--key-env")
    key = read_secret(variable, key_file)
    if not key:
        source = f"the environment variable {variable}" + (f" and the file {key_file}" if key_file else "")
        raise SeatplanError(f"{source} hold no gateway key", where="--key-file" if key_file and not variable else "--key-env",
                            fix=f"export {variable or 'LITELLM_MASTER_KEY'}=... or pass --key-file FILE (chmod 600); --key-env '' for a gateway without keys")
    return key


def gateway_url(text: str) -> str:
    """``--gateway`` as an http(s) URL with a host, checked before anything is asked (httpx raises on a URL it
    cannot parse, and the URL's text is not quoted back beyond a short, escaped excerpt)."""
    fix = "pass the gateway's base URL, e.g. --gateway http://127.0.0.1:4000"
    shown = printable(clipped(text, 80))
    try:
        url = httpx2.URL(text)
    except (httpx2.InvalidURL, TypeError, ValueError) as problem:
        raise SeatplanError(f"cannot read '{shown}' as a URL ({printable(clipped(str(problem), 120))})", where="--gateway", fix=fix) from None
    if url.scheme not in ("http", "https") or not url.host:
        raise SeatplanError(f"'{shown}' is no http:// or https:// URL with a host", where="--gateway", fix=fix)
    if url.username or url.password:
        raise SeatplanError("the URL carries a user or password, which verify would send and might print", where="--gateway",
                            fix="give the URL without user:password@ and the key in --key-env or --key-file")
    return text
