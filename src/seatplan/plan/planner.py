"""Fleet (+ usage, + observations) → plan: size every seat, place them, then boot order, utilisation and command lines.

The order matters: sizing fixes each seat's plateau footprint; placement needs only footprints;
the boot order and each engine's ``--gpu-memory-utilization`` depend on who shares its GPUs.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

import seatplan
from seatplan.documents.fleet import Device, Fleet, GpuSpec, HostSpec, SeatSpec
from seatplan.documents.fleet_file import LoadedFleet, gpu_refs, resolve_gpu_ref, resolve_model
from seatplan.documents.observed import ObservedFootprints, ObservedSeat
from seatplan.documents.plan import (
    ExplanationLine,
    GpuVerdict,
    Plan,
    PlanInfeasibility,
    PlanInputs,
    PlannedFrontierPoint,
    PlannedGpu,
    PlannedSeat,
    RunnerUp,
    ShortSeat,
    VllmSettings,
)
from seatplan.documents.usage import ModelUsage, UsageReport
from seatplan.engine_command import engine_command, unsupported_flags
from seatplan.errors import SeatplanError
from seatplan.facts.api import model_files_sha256
from seatplan.facts.models import EngineSettings, ModelFacts
from seatplan.plan import footprint as fp
from seatplan.plan import sizing, utilisation
from seatplan.plan.kv_replay import replay_check
from seatplan.plan.placement import FrontierPoint, GpuSlot, Placement, PlacementResult, SeatDemand, gpu_label, place
from seatplan.units import human_bytes

GpuKey = tuple[str, int]
FactsLoader = Callable[[str, EngineSettings], ModelFacts]
# Parts the engine's own process holds before vLLM's start-up memory check runs.
PRE_CHECK_PARTS = ("cuda_context", "nccl_allreduce")


@dataclass
class SizedSeat:
    """A seat after sizing, before placement."""

    spec: SeatSpec
    allowed: list[GpuKey] | None
    footprint: fp.SeatFootprint
    max_model_len: int | None = None
    kv_cache_memory_bytes: int | None = None
    max_new_tokens: int | None = None
    kv_cache_tokens: int | None = None
    max_concurrency: float | None = None
    num_gpu_blocks: int | None = None
    block_size: int | None = None
    limits: fp.EngineLimits | None = None
    hf_overrides: dict[str, object] | None = None
    extra_env: dict[str, str] = field(default_factory=dict)
    model_files_sha256: dict[str, str] = field(default_factory=dict)
    lines: list[ExplanationLine] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


def default_facts_loader(model: str, settings: EngineSettings) -> ModelFacts:
    from seatplan.facts.api import load_model_facts

    return load_model_facts(model, settings)


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
) -> Plan:
    fleet, corrected = with_gpu_corrections(loaded.fleet, observed)
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
    )
    plan = assemble_plan(fleet, gpus, sized, result, inputs)
    plan.warnings += corrected
    if observed is not None:
        declared = {seat.name for seat in fleet.seats}
        plan.warnings += [f"observations for {name}, which the fleet does not declare, were not used" for name in sorted(set(observed.seats) - declared)]
    if result.best is None and result.infeasible is None:
        plan.warnings.append(f"no layout found within the {time_limit_s:g} s time limit (the fleet is not proven infeasible); raise --time-limit")
    return plan


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
                    notes.append(f"GPU {host.name}:{gpu.index}: {human_bytes(correction.extra_bytes)} more reserved, seen at plateau "
                                 f"beyond its seats' footprints ({', '.join(correction.seats)}; {correction.source})")
    return fleet, notes


# ----------------------------------------------------------------------------- contexts raised where they fit


def raised_seats(sized: list[SizedSeat]) -> list[int]:
    """Seats whose ``published`` raise costs KV beyond vLLM's default length, dearest first."""
    costs = {}
    for position, seat in enumerate(sized):
        line = next((line for line in seat.lines if line.rule == "published_raise"), None)
        if line is not None and int(line.inputs["request_kv_bytes"] or 0) > int(line.inputs["request_kv_bytes_default"] or 0):
            costs[position] = int(line.inputs["request_kv_bytes"] or 0) - int(line.inputs["request_kv_bytes_default"] or 0)
    return sorted(costs, key=lambda position: (-costs[position], position))


def lower_raised_contexts(
    fleet: Fleet,
    sized: list[SizedSeat],
    size: Callable[[int, SeatSpec], SizedSeat],
    result: PlacementResult,
    place_seats: Callable[[list[SeatDemand]], PlacementResult],
) -> tuple[list[SizedSeat], PlacementResult]:
    """``published`` raises a context *where it fits*: when the fleet does not fit, seats go back to vLLM's
    default length, then each raise is restored (cheapest first) as long as the fleet still fits."""
    raised = raised_seats(sized)
    if not raised:
        return sized, result
    lowered = {position: size(position, sized[position].spec.model_copy(update={"max_model_len": None})) for position in raised}
    current = [lowered.get(position, seat) for position, seat in enumerate(sized)]
    attempt = place_seats([seat_demand(fleet, seat) for seat in current])
    if attempt.infeasible is not None:
        return sized, result
    result = attempt
    for position in reversed(raised):
        trial = list(current)
        trial[position] = sized[position]
        attempt = place_seats([seat_demand(fleet, seat) for seat in trial])
        if attempt.infeasible is None and attempt.best is not None:
            current, result = trial, attempt
    for position in raised:
        if current[position] is lowered[position]:
            note_lowered(current[position], sized[position])
    return current, result


def note_lowered(seat: SizedSeat, raised: SizedSeat) -> None:
    wanted = raised.max_model_len or 0
    got = seat.max_model_len or 0
    seat.lines.insert(
        0,
        ExplanationLine(
            rule="published_not_fitting",
            inputs={"published_max_model_len": wanted, "max_model_len": got, "footprint_bytes_raised": raised.footprint.footprint_bytes},
            result=f"max_model_len {got:,} (vLLM's default)",
            note=f"the published {wanted:,} tokens ({human_bytes(raised.footprint.footprint_bytes)} per GPU) do not fit beside the other seats",
        ),
    )
    seat.warnings.append(f"{seat.spec.name}: published context {wanted:,} does not fit; planned at vLLM's default {got:,}")


# ----------------------------------------------------------------------------- sizing each seat


def gpu_table(fleet: Fleet) -> dict[GpuKey, GpuSpec]:
    return {(host.name, gpu.index): gpu for host in fleet.hosts for gpu in host.gpus}


def allowed_gpus(fleet: Fleet, gpus: dict[GpuKey, GpuSpec], seat: SeatSpec) -> list[GpuKey] | None:
    """Pins and avoids resolved to the GPU set the seat may use; None when unconstrained."""
    pins = [resolve_gpu_ref(fleet, ref) for ref in gpu_refs(seat.pin)]
    if pins:
        return [key for key in pins if key is not None]
    avoided = {resolve_gpu_ref(fleet, ref) for ref in seat.avoid}
    if not avoided:
        return None
    return [key for key, gpu in gpus.items() if key not in avoided and not gpu.keep_clear]


def seat_device(fleet: Fleet, usable: list[GpuKey], seat: SeatSpec) -> Device:
    """The device the seat's engine runs on; the KV block size follows it, so it must be one."""
    devices = {host.device for host in fleet.hosts if any(key[0] == host.name for key in usable)}
    if len(devices) > 1:
        raise SeatplanError(
            "the seat may land on CPU and CUDA hosts, whose KV block sizes differ",
            fix="pin it (`pin:`) or `avoid:` the GPUs of one kind of host",
        )
    return devices.pop() if devices else "cuda"


def usage_for(usage: UsageReport | None, served_model_name: str, seat_name: str) -> ModelUsage | None:
    """A seat's usage: keyed by the name it serves, or mapped to it by the usage stage."""
    if usage is None:
        return None
    if served_model_name in usage.models:
        return usage.models[served_model_name]
    return next((entry for entry in usage.models.values() if entry.seat == seat_name), None)


def size_seat(
    fleet: Fleet,
    gpus: dict[GpuKey, GpuSpec],
    seat: SeatSpec,
    base_dir: Path,
    usage: UsageReport | None,
    observed: ObservedFootprints | None,
    facts_loader: FactsLoader,
) -> SizedSeat:
    allowed = allowed_gpus(fleet, gpus, seat)
    seen = observed.seats.get(seat.name) if observed else None
    if seat.engine == "fixed":
        return size_fixed_seat(seat, allowed, seen)
    overhead = fp.load_overhead_model()
    usable = allowed or [key for key, gpu in gpus.items() if not gpu.keep_clear] or list(gpus)
    limits = fp.engine_limits(seat.max_num_seqs, seat.max_num_batched_tokens, overhead.defaults_for(min(gpus[key].total_bytes for key in usable)))
    settings = EngineSettings(
        tensor_parallel_size=seat.tensor_parallel_size,
        dtype=seat.dtype,
        kv_cache_dtype=seat.kv_cache_dtype,
        vllm_version=fleet.policy.vllm_version,
        max_num_batched_tokens=limits.max_num_batched_tokens,
        device=seat_device(fleet, usable, seat),
    )
    assert seat.model is not None  # fleet checks guarantee it
    facts = facts_loader(resolve_model(seat.model, base_dir), settings)

    context = sizing.choose_context(seat, facts)
    kv = sizing.choose_kv_bytes(seat, facts, context.max_model_len, fleet.policy)
    model_usage = usage_for(usage, seat.served_model_name or seat.name, seat.name)
    cap = sizing.choose_output_cap(seat, context.max_model_len, model_usage, fleet.policy)
    inflight_lines, inflight_warnings = sizing.inflight_check(seat.name, kv.capacity, model_usage)
    replay_lines, replay_warnings = replay_check(seat.name, model_usage.kv_replay if model_usage else None, facts, kv.capacity, kv.rule_bytes,
                                                 fleet.policy)
    footprint, footprint_line = seat_footprint(fleet, seat, facts, kv.kv_cache_memory_bytes, limits, seen)

    sized = SizedSeat(
        seat,
        allowed,
        footprint,
        max_model_len=context.max_model_len,
        kv_cache_memory_bytes=kv.kv_cache_memory_bytes,
        max_new_tokens=cap.max_new_tokens,
        kv_cache_tokens=kv.capacity.kv_cache_tokens,
        max_concurrency=kv.capacity.max_concurrency,
        num_gpu_blocks=kv.capacity.num_blocks,
        block_size=facts.block_size,
        limits=limits,
        model_files_sha256=model_files_sha256(facts.model_dir),
    )
    if context.yarn is not None:
        sized.hf_overrides = sizing.yarn_overrides(context.yarn, fleet.policy.vllm_version)
        if context.yarn.needs_long_max_model_len_env:
            sized.extra_env["VLLM_ALLOW_LONG_MAX_MODEL_LEN"] = "1"
    sized.lines += context.lines + kv.lines + cap.lines + inflight_lines + replay_lines + [footprint_line, batch_limits_line(limits)]
    sized.warnings += context.warnings + kv.warnings + cap.warnings + inflight_warnings + replay_warnings
    return sized


def size_fixed_seat(seat: SeatSpec, allowed: list[GpuKey] | None, seen: ObservedSeat | None) -> SizedSeat:
    assert seat.memory_cap_bytes is not None  # fleet checks guarantee it
    sized = SizedSeat(seat, allowed, fp.fixed_footprint(seat.memory_cap_bytes))
    sized.lines.append(
        ExplanationLine(rule="fixed_seat", inputs={"memory_cap_bytes": seat.memory_cap_bytes}, result=f"footprint {human_bytes(seat.memory_cap_bytes)} per GPU",
            note="not a vLLM engine: it costs its declared cap")
    )
    if seen is not None:
        sized.warnings.append(f"{seat.name}: observed {human_bytes(seen.footprint_bytes)} against a declared cap of {human_bytes(seat.memory_cap_bytes)};"
                              " the plan uses the declared cap")
    return sized


def seat_footprint(
    fleet: Fleet, seat: SeatSpec, facts: ModelFacts, kv_cache_memory_bytes: int, limits: fp.EngineLimits, seen: ObservedSeat | None
) -> tuple[fp.SeatFootprint, ExplanationLine]:
    """The observed plateau when there is one, else the labelled estimate."""
    if seen is not None:
        footprint = fp.observed_footprint(seen, kv_cache_memory_bytes, seen.kv_cache_memory_bytes)
        return footprint, ExplanationLine(
            rule="footprint",
            inputs={"observed_footprint_bytes": seen.footprint_bytes, "source": seen.source, "samples": seen.samples},
            result=f"{human_bytes(footprint.footprint_bytes)} per GPU (observed)",
            note="observed plateau replaces the estimate; the KV part follows this plan's pin",
        )
    version = fleet.policy.vllm_version
    profile = fp.load_overhead_model().profile_for(version)
    footprint = fp.vllm_footprint(
        shape=facts.shape,
        weights=fp.Weights(facts.weights_bytes, facts.weights_exact, facts.weights_source),
        tensor_parallel_size=seat.tensor_parallel_size,
        kv_cache_memory_bytes=kv_cache_memory_bytes,
        limits=limits,
        enforce_eager=seat.enforce_eager,
        creep_allowance_bytes=fleet.policy.creep_allowance_bytes,
        profile=profile,
        vllm_version=version,
    )
    return footprint, ExplanationLine(
        rule="footprint",
        inputs={part.name: part.bytes for part in footprint.parts} | {"profile": profile.name},
        result=f"{human_bytes(footprint.footprint_bytes)} per GPU (estimate)",
        note=f"plateau estimate keyed on vLLM {version} (profile {profile.name}, non-KV MAE {profile.non_kv_mae_gib} GiB); pass --observed to replace it",
    )


def batch_limits_line(limits: fp.EngineLimits) -> ExplanationLine:
    return ExplanationLine(
        rule="batch_limits",
        inputs={"max_num_seqs": limits.max_num_seqs, "max_num_batched_tokens": limits.max_num_batched_tokens},
        result=f"--max-num-seqs {limits.max_num_seqs} --max-num-batched-tokens {limits.max_num_batched_tokens}",
        note=f"{limits.source}; passed explicitly because the activation estimate assumes them",
    )


# ----------------------------------------------------------------------------- placement glue


def gpu_slots(fleet: Fleet) -> list[GpuSlot]:
    return [
        GpuSlot(host=host.name, index=gpu.index, capacity_bytes=gpu.total_bytes - gpu.reserved_bytes, headroom_bytes=fleet.policy.headroom_bytes, keep_clear=gpu.keep_clear)
        for host in fleet.hosts
        for gpu in host.gpus
    ]


def seat_demand(fleet: Fleet, seat: SizedSeat) -> SeatDemand:
    current = [key for key in (resolve_gpu_ref(fleet, ref) for ref in gpu_refs(fleet.current_layout.get(seat.spec.name))) if key is not None]
    return SeatDemand(
        name=seat.spec.name,
        footprint_bytes=seat.footprint.footprint_bytes,
        gpu_count=seat.spec.tensor_parallel_size,
        allowed=seat.allowed,
        current=current,
    )


# ----------------------------------------------------------------------------- boot order and utilisation


def boot_sequence(sized: list[SizedSeat]) -> list[SizedSeat]:
    """Fixed seats first (they are not vLLM and hold their cap from the start), then the largest engines."""
    return sorted(sized, key=lambda seat: (seat.spec.engine != "fixed", -seat.footprint.footprint_bytes, seat.spec.name))


def choose_utilisation(seat: SizedSeat, gpus_at_start: list[utilisation.GpuAtStart], margin_bytes: int) -> utilisation.Utilisation:
    """``--gpu-memory-utilization`` for a cold boot in boot order and a rolling restart (see :mod:`seatplan.plan.utilisation`)."""
    own_context = sum(part.bytes for part in seat.footprint.parts if part.name in PRE_CHECK_PARTS)
    inside_budget = sum(part.bytes for part in seat.footprint.parts if part.name not in PRE_CHECK_PARTS and part.name != "creep_allowance")
    return utilisation.choose(gpus_at_start, own_context_bytes=own_context, inside_budget_bytes=inside_budget, margin_bytes=margin_bytes)


# ----------------------------------------------------------------------------- what render needs


def vllm_settings(seat: SizedSeat) -> VllmSettings:
    spec = seat.spec
    assert seat.limits is not None
    return VllmSettings(
        model=spec.model_path_on_host or spec.model or "",
        max_num_seqs=seat.limits.max_num_seqs,
        max_num_batched_tokens=seat.limits.max_num_batched_tokens,
        dtype=spec.dtype,
        kv_cache_dtype=spec.kv_cache_dtype,
        enforce_eager=spec.enforce_eager,
        hf_overrides=seat.hf_overrides,
        extra_args=list(spec.extra_args),
    )


# ----------------------------------------------------------------------------- the document


def assemble_plan(fleet: Fleet, gpus: dict[GpuKey, GpuSpec], sized: list[SizedSeat], result: PlacementResult, inputs: PlanInputs) -> Plan:
    best = result.best
    assignment = best.assignment if best else {}
    order = {seat.spec.name: position for position, seat in enumerate(boot_sequence(sized), start=1)}
    free_bytes = {key: gpu.total_bytes - gpu.reserved_bytes for key, gpu in gpus.items()}
    # --- utilisation (issue 12): what every seat leaves free at plateau, for the rolling-restart figure
    plateau_free_bytes = dict(free_bytes)
    for seat in sized:
        for key in assignment.get(seat.spec.name, []):
            plateau_free_bytes[key] -= seat.footprint.footprint_bytes
    # ---
    planned: dict[str, PlannedSeat] = {}
    for seat in boot_sequence(sized):
        keys = [(host, index) for host, index in assignment.get(seat.spec.name, [])]
        planned[seat.spec.name] = plan_seat(seat, keys, gpus, free_bytes, plateau_free_bytes, order[seat.spec.name], fleet, placed=best is not None)
        for key in keys:
            free_bytes[key] -= seat.footprint.footprint_bytes
    seats = [planned[seat.spec.name] for seat in sized]
    planned_gpus = [plan_gpu(key, gpu, seats, fleet.policy.headroom_bytes) for key, gpu in gpus.items()]
    open_gpus = [gpu for gpu in planned_gpus if not gpu.keep_clear]
    worst = min(open_gpus, key=lambda gpu: gpu.spare_bytes) if best and open_gpus else None
    warnings = [warning for seat in seats for warning in seat.warnings]
    if best is not None and not result.optimal:
        warnings.append(f"placement not proven optimal within the time limit ({result.method}); the proven bound is {human_bytes(result.bound_bytes or 0)}")
    return Plan(
        seats=seats,
        gpus=planned_gpus,
        worst_case_spare_bytes=best.worst_case_spare_bytes if best else None,
        worst_case_gpu=f"{worst.host}:{worst.index}" if worst else None,
        optimal=result.optimal and best is not None,
        method=result.method,
        bound_bytes=result.bound_bytes,
        solve_seconds=round(result.solve_seconds, 4),
        moves=best.moves if best else None,
        runner_ups=[runner_up(alternative.placement, alternative.why_lost) for alternative in result.runner_ups],
        frontier=[frontier_point(point) for point in result.frontier],
        chosen_because=result.chosen_because,
        infeasible=infeasibility(result),
        warnings=warnings,
        inputs=inputs,
    )


def plan_seat(
    seat: SizedSeat, keys: list[GpuKey], gpus: dict[GpuKey, GpuSpec], free_bytes: dict[GpuKey, int], plateau_free_bytes: dict[GpuKey, int],
    boot_order: int, fleet: Fleet, *, placed: bool,
) -> PlannedSeat:
    spec = seat.spec
    lines, warnings = list(seat.lines), list(seat.warnings)
    util: float | None = None
    util_situations: tuple[float | None, float | None] = (None, None)
    settings: VllmSettings | None = None
    env = dict(spec.env)
    host: HostSpec | None = next((host for host in fleet.hosts if keys and host.name == keys[0][0]), None)
    if keys and (host is None or host.device == "cuda"):
        env["CUDA_VISIBLE_DEVICES"] = ",".join(str(index) for _, index in keys)
    if keys:
        lines.append(ExplanationLine(rule="placement", inputs={"gpus": ",".join(gpu_label(key) for key in keys), "boot_order": boot_order},
            result=f"on GPU {', '.join(gpu_label(key) for key in keys)}, boots {_ordinal(boot_order)}",
            note="the layout with the largest worst-case spare at plateau"))
    if spec.engine == "vllm" and keys:
        at_start = [
            utilisation.GpuAtStart(gpu_label(key), gpus[key].total_bytes, free_bytes[key], plateau_free_bytes[key] + seat.footprint.footprint_bytes)
            for key in keys
        ]
        chosen = choose_utilisation(seat, at_start, fleet.policy.boot_margin_bytes)
        util, util_situations = chosen.value, (chosen.cold_boot, chosen.rolling_restart)
        lines.append(ExplanationLine(rule="gpu_memory_utilization", inputs=chosen.inputs, result=chosen.result, note=chosen.note))
        warnings += [f"{spec.name}: {chosen.warning}"] if chosen.warning else []
        settings = vllm_settings(seat)
        env |= seat.extra_env
    elif not placed:
        warnings.append(f"{spec.name}: not placed")
    planned = PlannedSeat(
        name=spec.name,
        engine=spec.engine,
        model=spec.model,
        served_model_name=spec.served_model_name or spec.name,
        port=spec.port,
        gpus=[gpu_label(key) for key in keys],
        tensor_parallel_size=spec.tensor_parallel_size,
        kv_cache_memory_bytes=seat.kv_cache_memory_bytes,
        max_model_len=seat.max_model_len,
        max_new_tokens=seat.max_new_tokens,
        kv_cache_tokens=seat.kv_cache_tokens,
        max_concurrency=seat.max_concurrency,
        footprint_bytes=seat.footprint.footprint_bytes,
        footprint_basis=seat.footprint.basis,
        footprint_parts=seat.footprint.parts,
        vllm_args=[],
        env=env,
        gpu_memory_utilization=util,
        gpu_memory_utilization_cold_boot=util_situations[0],
        gpu_memory_utilization_rolling_restart=util_situations[1],
        boot_order=boot_order,
        explanation=lines,
        warnings=warnings,
        host=host.name if host else None,
        address=host.reachable_at if host else None,
        device=host.device if host else "cuda",
        vllm=settings,
        num_gpu_blocks=seat.num_gpu_blocks,
        block_size=seat.block_size,
    )
    if settings is not None:
        # The plan shows the command `seatplan render` writes with its default launcher.
        planned.vllm_args = engine_command(planned)
        planned.warnings += [f"{spec.name}: {missing}" for missing in unsupported_flags(planned.vllm_args, fleet.policy.vllm_version)]
    return planned


def _ordinal(number: int) -> str:
    suffix = "th" if 10 <= number % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(number % 10, "th")
    return f"{number}{suffix}"


def plan_gpu(key: GpuKey, gpu: GpuSpec, seats: list[PlannedSeat], headroom_bytes: int) -> PlannedGpu:
    label = gpu_label(key)
    on_it = [seat for seat in seats if label in seat.gpus]
    used = sum(seat.footprint_bytes for seat in on_it)
    return PlannedGpu(
        host=key[0],
        index=key[1],
        name=gpu.name,
        total_bytes=gpu.total_bytes,
        reserved_bytes=gpu.reserved_bytes,
        keep_clear=gpu.keep_clear,
        seats=[seat.name for seat in sorted(on_it, key=lambda seat: seat.boot_order)],
        used_bytes=used,
        spare_bytes=gpu.total_bytes - gpu.reserved_bytes - used,
        headroom_bytes=0 if gpu.keep_clear else headroom_bytes,
    )


def runner_up(placement: Placement, why_lost: str) -> RunnerUp:
    return RunnerUp(
        assignment={name: [gpu_label((host, index)) for host, index in keys] for name, keys in placement.assignment.items()},
        worst_case_spare_bytes=placement.worst_case_spare_bytes,
        moves=placement.moves,
        moved=placement.moved,
        why_lost=why_lost,
    )


def frontier_point(point: FrontierPoint) -> PlannedFrontierPoint:
    return PlannedFrontierPoint(
        max_moves=point.max_moves, moves=point.placement.moves, worst_case_spare_bytes=point.placement.worst_case_spare_bytes,
        proven=point.proven, moved=point.placement.moved,
    )


def infeasibility(result: PlacementResult) -> PlanInfeasibility | None:
    if result.infeasible is None:
        return None
    return PlanInfeasibility(
        summary=result.infeasible.summary,
        seats=[ShortSeat(
            name=item.name, footprint_bytes=item.footprint_bytes, best_gpu=item.best_gpu, short_by_bytes=item.short_by_bytes, reason=item.reason,
            rejections=[GpuVerdict(gpu=r.gpu, filter=r.filter, reason=r.reason, short_by_bytes=r.short_by_bytes) for r in item.rejections],
        ) for item in result.infeasible.seats],
    )
