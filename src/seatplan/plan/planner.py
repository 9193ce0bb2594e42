"""Fleet (+ usage, + observations) → plan: size every seat, place them, then boot order, utilisation and command lines.

The order matters: sizing fixes each seat's plateau footprint; placement needs only footprints;
the boot order and each engine's ``--gpu-memory-utilization`` depend on who shares its GPUs.
"""

from __future__ import annotations

from functools import partial

import seatplan
from seatplan.documents.fleet import Fleet, SeatSpec
from seatplan.documents.fleet_file import LoadedFleet, require_ports
from seatplan.documents.observed import ObservedFootprints
from seatplan.documents.plan import (
    FLEET_CURRENT_LAYOUT,
    Plan,
    PlanInputs,
    PlannedVllmSeat,
    seat_launch,
)
from seatplan.documents.usage import UsageReport, usage_of_seat
from seatplan.engine.change import seat_change
from seatplan.engine.flag_memory import refused_flags
from seatplan.errors import SeatplanError
from seatplan.plan import footprint as fp
from seatplan.plan import observed_check
from seatplan.plan.assemble import assemble_plan, gpu_slots, seat_demand
from seatplan.plan.contexts import lower_raised_contexts
from seatplan.plan.current import CurrentLayout, not_as_asked
from seatplan.plan.placement import place
from seatplan.plan.rollout import plan_rollout
from seatplan.plan.size_seat import FactsLoader, SizedSeat, default_facts_loader, gpu_table, size_seat
from seatplan.secrets import looks_secret
from seatplan.units import human_bytes


def build_plan(
    loaded: LoadedFleet,
    *,
    usage: UsageReport | None = None,
    usage_path: str | None = None,
    observed: ObservedFootprints | None = None,
    observed_path: str | None = None,
    facts_loader: FactsLoader = default_facts_loader,
    time_limit_s: float = 30.0,
    max_moves: int | None = None,
    current: CurrentLayout | None = None,
) -> Plan:
    require_ports(loaded)
    require_modelled_flags(loaded)
    require_cuda_sizes(loaded)
    fleet, corrected = with_gpu_corrections(with_current(loaded.fleet, current), observed)
    gpus = gpu_table(fleet)

    def size(position: int, spec: SeatSpec) -> SizedSeat:
        try:
            return size_seat(fleet, gpus, spec, loaded.base_dir, usage, observed, facts_loader)
        except SeatplanError as problem:
            raise SeatplanError(f"seats[{position}] ({spec.name}): {problem.message}", where=loaded.where(("seats", position)), fix=problem.fix) from None

    sized = [size(position, spec) for position, spec in enumerate(fleet.seats)]
    # issue 12: a move budget (--max-moves) or a price per move (policy) picks a point of the spare-versus-moves frontier
    place_seats = partial(
        place, gpu_slots(fleet), time_limit_s=time_limit_s, max_moves=max_moves, move_cost_bytes=fleet.policy.move_cost_bytes
    )
    result = place_seats([seat_demand(fleet, seat) for seat in sized])
    if result.infeasible is not None:
        sized, result = lower_raised_contexts(fleet, sized, size, result, place_seats)
    inputs = PlanInputs(
        fleet_path=str(loaded.path),
        fleet_sha256=loaded.sha256,
        model_facts_sha256=model_facts_sha256(sized),
        usage_path=usage_path,
        observed_path=observed_path,
        seatplan_version=seatplan.__version__,
        vllm_version=fleet.policy.vllm_version,
        current_from=current.source if current else (FLEET_CURRENT_LAYOUT if fleet.current_layout else None),
        max_moves=max_moves,
        move_cost_bytes=fleet.policy.move_cost_bytes,
    )
    plan = assemble_plan(fleet, gpus, sized, result, inputs)
    if current is not None:
        plan.restarts = restarted_seats(plan, current)
    if max_moves is not None and plan.moves is not None and plan.moves > max_moves:
        plan.infeasible = not_as_asked(plan, fleet, max_moves)
    plan.rollout = plan_rollout(plan, fleet, current)  # issue 29: the order of the steps from what runs, every start checked
    plan.warnings += corrected + profile_class_warnings(plan, fleet.policy.vllm_version) + secret_value_warnings(loaded)
    if observed is not None:
        # issue 46: the estimates held against what was seen, seat by seat and GPU by GPU (today's layout, before corrections)
        today = with_current(loaded.fleet, current)
        plan.warnings += observed_check.seat_warnings(sized, observed, observed_path) + observed_check.gpu_warnings(today, sized, observed, observed_path)
        declared = {seat.name for seat in fleet.seats}
        plan.warnings += [f"observations for {name}, which the fleet does not declare, were not used" for name in sorted(set(observed.seats) - declared)]
    if usage is not None:
        plan.warnings += unused_usage_warnings(fleet, usage)
    if result.best is None and result.infeasible is None:
        plan.warnings.append(f"no layout found within the {time_limit_s:g} s time limit (the fleet is not proven infeasible); raise --time-limit")
    return plan


def with_current(fleet: Fleet, current: CurrentLayout | None) -> Fleet:
    """The fleet with what runs now as its current_layout (``--current`` wins over the fleet file's, seat by seat)."""
    if current is None:
        return fleet
    declared = {seat.name for seat in fleet.seats}
    running: dict[str, str | int | list[str | int]] = {name: list(refs) for name, refs in current.gpus.items() if name in declared}
    return fleet.model_copy(update={"current_layout": {**fleet.current_layout, **running}})


def restarted_seats(plan: Plan, current: CurrentLayout) -> list[str]:
    """The engines this plan would (re)start: new, moved, or changed in a way that needs a restart (``engine.change``;
    a fixed seat is not started by seatplan)."""
    return [
        seat.name for seat in plan.seats
        if isinstance(seat, PlannedVllmSeat) and seat.gpus and seat.launch is not None
        and (current.gpus.get(seat.name) != seat.gpus or seat_change(current.launches.get(seat.name), seat_launch(seat)).restart)
    ]


def secret_value_warnings(loaded: LoadedFleet) -> list[str]:
    """A credential written into the fleet file by value lands in every env file, compose file and plan: name its line
    and the reference that keeps it on the host. The value is never quoted."""
    warnings = []
    for position, seat in enumerate(loaded.fleet.seats):
        for key, value in seat.env_values.items():
            if looks_secret(key, value):
                warnings.append(f"{loaded.where(('seats', position, 'env', key))}: seats[{position}] ({seat.name}): env {key} looks like a secret "
                                f"given by value; give it by reference, `{key}: {{from_host_env: {key}}}` (set on the GPU host), or in a root-only "
                                "file listed in the seat's env_files (docs/fleet.md, \"Secrets\")")
    return warnings


def require_modelled_flags(loaded: LoadedFleet) -> None:
    """Refuse a vLLM seat whose extra_args hold a flag that changes the memory and that seatplan does not model
    (``engine.flag_memory``, issue 47): a plan would carry a figure known to be wrong. Every such flag is named at
    its line, the first with its fix."""
    found = [(position, seat, refused) for position, seat in enumerate(loaded.fleet.seats) if seat.engine == "vllm"
             for refused in refused_flags(seat.extra_args)]
    if not found:
        return

    def where(position: int, position_in_args: int | None) -> str:
        return loaded.where(("seats", position, "extra_args") + ((position_in_args,) if position_in_args is not None else ()))

    position, seat, first = found[0]
    others = "".join(f"\n  {where(other_position, other.position)}: seats[{other_position}] ({other_seat.name}): {other.message} "
                     f"(fix: {other.fix})" for other_position, other_seat, other in found[1:])
    raise SeatplanError(f"seats[{position}] ({seat.name}): {first.message}{others}", where=where(position, first.position), fix=first.fix)


def require_cuda_sizes(loaded: LoadedFleet) -> None:
    """A GPU size written in decimal gigabytes is the box's label, not what CUDA reports: a card sold as "96 GB"
    reports 97,887 MiB = 95.59 GiB through CUDA (examples/night/nvidia-smi.csv, memory.total), and 96GB = 89.41 GiB
    would plan 6 GiB of it away, or call a fleet that fits too big. An error, not a warning (issue 32): the plan
    made from it would be wrong on every GPU, and the fix is one figure that docs/adopt.md says how to read."""
    labelled = [(host_position, gpu_position, host.name, gpu) for host_position, host in enumerate(loaded.fleet.hosts)
                for gpu_position, gpu in enumerate(host.gpus) if gpu.total_bytes % 10**9 == 0 and gpu.total_bytes % 2**20 != 0]
    if not labelled:
        return
    host_position, gpu_position, host_name, gpu = labelled[0]
    others = f" (and {', '.join(f'{name}:{item.index}' for _, _, name, item in labelled[1:])})" if labelled[1:] else ""
    raise SeatplanError(
        f"{host_name}:{gpu.index}{others}: total_bytes {gpu.total_bytes // 10**9}GB is {human_bytes(gpu.total_bytes)}, the box's label in decimal "
        f"gigabytes, not what CUDA reports (a card sold as 96 GB reports 95.59 GiB): the plan would give the difference away",
        where=loaded.where(("hosts", host_position, "gpus", gpu_position, "total_bytes")),
        fix="write CUDA's total, memory.total − memory.reserved from `nvidia-smi --query-gpu=index,memory.total,memory.reserved --format=csv`, "
            "in MiB (e.g. total_bytes: 97887MiB), or let `seatplan adopt --nvidia-smi CSV` write it (docs/adopt.md)")


def profile_class_warnings(plan: Plan, vllm_version: str) -> list[str]:
    """An estimated footprint is fitted on some GPU class (the profile names it); on another class (a Blackwell
    card under an H100 profile) the CUDA context, activation and graph figures are extrapolated, so say so, naming
    the class; a GPU the fleet gives no name (``hosts[].gpus[].name`` is optional) is named by its reference and
    said to have none, rather than left a blank ("on  they are extrapolated", issue 46)."""
    profile = fp.load_overhead_model().profile_for(vllm_version)
    if not profile.measured_on:
        return []
    names = {f"{gpu.host}:{gpu.index}": gpu.name.strip() for gpu in plan.gpus}
    estimated = {ref for seat in plan.seats if seat.footprint_basis == "estimate" for ref in seat.gpus if ref in names}
    other = sorted({names[ref] for ref in estimated if names[ref] and not any(known.lower() in names[ref].lower() for known in profile.measured_on)})
    unnamed = sorted((ref for ref in estimated if not names[ref]), key=gpu_ref_key)
    measured = f"the footprint estimates come from profile {profile.name}, measured on {', '.join(profile.measured_on)}; "
    replace = "pass --observed with figures from these GPUs (`seatplan adopt --observed` of the running engines, or `seatplan diagnose`) to replace them"
    warnings = []
    if other:
        warnings.append(f"{measured}on {', '.join(other)} they are extrapolated: {replace}")
    if unnamed:
        warnings.append(f"{measured}the fleet gives no GPU model for {', '.join(unnamed)} (hosts[].gpus[].name), so whether they are "
                        f"extrapolated there is unknown: write nvidia-smi's name for each GPU, or {replace}")
    return warnings


def gpu_ref_key(ref: str) -> tuple[str, int]:
    """``host:index`` in host order, then by index as a number (GPU 10 after GPU 9)."""
    host, _, index = ref.rpartition(":")
    return host, int(index)


def model_facts_sha256(sized: list[SizedSeat]) -> dict[str, dict[str, str]]:
    """What each vLLM seat was sized from, for apply to see whether a model changed since the plan was made."""
    return {seat.spec.name: seat.model_files_sha256 for seat in sized if seat.spec.engine == "vllm"}


def with_gpu_corrections(fleet: Fleet, observed: ObservedFootprints | None) -> tuple[Fleet, list[str]]:
    """Memory ``diagnose`` saw on a GPU but could not pin on one seat is reserved on that GPU (never credited back)."""
    if observed is None or not observed.gpu_corrections:
        return fleet, []
    fleet = fleet.model_copy(deep=True)
    notes = []
    for correction in observed.gpu_corrections:
        for host in fleet.hosts:
            for gpu in host.gpus:
                if gpu.index == correction.index and correction.host in (None, host.name) and correction.extra_bytes > 0:
                    gpu.reserved_bytes += correction.extra_bytes
                    seen = "seen in use" if correction.source.startswith("adopt:") else "seen at plateau"
                    notes.append(f"GPU {host.name}:{gpu.index}: {human_bytes(correction.extra_bytes)} more reserved, {seen} "
                                 f"beyond its seats' footprints ({', '.join(correction.seats) or 'no seat runs here'}; {correction.source})")
    return fleet, notes


def unused_usage_warnings(fleet: Fleet, usage: UsageReport) -> list[str]:
    """The usage report's models with calls that no seat of this fleet takes (a usage report made for another fleet,
    or a seat renamed since): said, as the observations no seat takes are, rather than left out in silence."""
    taken = {id(entry) for seat in fleet.seats if (entry := usage_of_seat(usage, seat.name, seat.served_model_name or seat.name)) is not None}
    unused = sorted(name for name, entry in usage.models.items() if entry.calls and id(entry) not in taken)
    if not unused:
        return []
    return [f"usage for {', '.join(unused)}, which no seat of the fleet serves, was not used (a usage report made with "
            "another fleet's --fleet, or a served_model_name that changed?)"]
