"""The plan document from the sized seats and their placement: boot order, each engine's utilisation, the GPUs,
runner-ups, the frontier and, when nothing fits, why."""

from __future__ import annotations

import json
from dataclasses import fields
from typing import Any

from seatplan import versions
from seatplan.documents.fleet import Fleet, GpuSpec, HostSpec, SeatSpec
from seatplan.documents.fleet_file import gpu_refs, resolve_gpu_ref
from seatplan.documents.launch import ByUtilisation, KvSizing, Pinned, Utilisation, VllmLaunch, model_and_revision
from seatplan.documents.plan import (
    ExplanationLine,
    GpuVerdict,
    Plan,
    PlanInfeasibility,
    PlanInputs,
    PlannedFixedSeat,
    PlannedFrontierPoint,
    PlannedGpu,
    PlannedHost,
    PlannedSeat,
    PlannedSeatBase,
    PlannedVllmSeat,
    RunnerUp,
    ShortSeat,
    before_snapshot_bytes,
    inside_request_bytes,
)
from seatplan.engine.command import engine_command, unsupported_flags
from seatplan.facts.models import NO_DRAFT_METHODS, speculative_method
from seatplan.plan import utilisation
from seatplan.plan.placement import FrontierPoint, GpuSlot, Placement, PlacementResult, SeatDemand, gpu_label
from seatplan.plan.size_seat import GpuKey, SizedSeat
from seatplan.units import human_bytes


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


def boot_sequence(sized: list[SizedSeat]) -> list[SizedSeat]:
    """Fixed seats first (they are not vLLM and hold their cap from the start), then the largest engines."""
    return sorted(sized, key=lambda seat: (seat.spec.engine != "fixed", -seat.footprint.footprint_bytes, seat.spec.name))


def choose_utilisation(seat: SizedSeat, gpus_at_start: list[utilisation.GpuAtStart], margin_bytes: int) -> utilisation.UtilisationChoice:
    """``--gpu-memory-utilization``, from the seat and its GPUs' totals alone: where its KV cache is pinned (``kv_mode``)
    the smallest request covering what it allocates plus the boot margin, else (the value sizes the KV cache) the
    smallest covering what it allocates; both checked at a cold boot in boot order and a rolling restart (see
    :mod:`seatplan.plan.utilisation`)."""
    own_context, inside_budget = before_snapshot_bytes(seat.footprint.parts), inside_request_bytes(seat.footprint.parts)
    if seat.kv_mode == "utilisation":  # the request is the engine's budget: a margin would be KV the placement never counted
        return utilisation.choose(gpus_at_start, own_context_bytes=own_context, inside_budget_bytes=inside_budget)
    return utilisation.choose_pinned(gpus_at_start, own_context_bytes=own_context, inside_budget_bytes=inside_budget, margin_bytes=margin_bytes)


def vllm_launch(seat: SizedSeat, chosen: utilisation.UtilisationChoice) -> VllmLaunch:
    """How the seat's engine is started: its sized figures, its KV pinned or sized by the one utilisation chosen."""
    spec = seat.spec
    assert seat.limits is not None and seat.max_model_len is not None and seat.kv_cache_memory_bytes is not None
    model, revision = model_and_revision(spec.model_path_on_host or spec.model or "")
    kv: KvSizing = ByUtilisation(gpu_memory_utilization=chosen.value)
    if seat.kv_mode != "utilisation":
        kv = Pinned(kv_cache_memory_bytes=seat.kv_cache_memory_bytes, gpu_memory_utilization=chosen.value)
    return VllmLaunch(
        model=model, revision=revision, served_model_name=spec.served_model_name or spec.name, port=spec.port,
        tensor_parallel_size=spec.tensor_parallel_size, max_model_len=seat.max_model_len, kv=kv,
        max_num_seqs=seat.limits.max_num_seqs, max_num_batched_tokens=seat.limits.max_num_batched_tokens,
        dtype=spec.dtype, kv_cache_dtype=spec.kv_cache_dtype, enforce_eager=spec.enforce_eager, max_new_tokens=seat.max_new_tokens,
        hf_overrides=seat.hf_overrides, extra_args=lora_args(spec) + speculative_args(spec) + list(spec.extra_args),
    )


def lora_args(spec: SeatSpec) -> list[str]:
    """The seat's ``lora`` key as vLLM's flags."""
    lora = spec.lora
    if lora is None:
        return []
    args = ["--enable-lora", "--max-loras", str(lora.max_loras), "--max-lora-rank", str(lora.max_lora_rank)]
    if lora.max_cpu_loras is not None:
        args += ["--max-cpu-loras", str(lora.max_cpu_loras)]
    if lora.target_modules:
        args += ["--lora-target-modules", *lora.target_modules]
    if lora.lora_dtype != "auto":
        args += ["--lora-dtype", lora.lora_dtype]
    if lora.adapters:
        args += ["--lora-modules", *(f"{adapter.name}={adapter.path}" for adapter in lora.adapters)]
    return args


def speculative_args(spec: SeatSpec) -> list[str]:
    """The seat's ``speculative`` key as vLLM's ``--speculative-config`` (its method spelled out as seatplan read it)."""
    speculative = spec.speculative
    if speculative is None:
        return []
    model = speculative.model_path_on_host or speculative.model
    config: dict[str, object] = {"method": speculative_method(speculative.method, model)}
    if model and config["method"] not in NO_DRAFT_METHODS:
        config["model"] = model
    config["num_speculative_tokens"] = speculative.num_speculative_tokens
    if speculative.draft_tensor_parallel_size is not None:
        config["draft_tensor_parallel_size"] = speculative.draft_tensor_parallel_size
    return ["--speculative-config", json.dumps(config)]


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
        image=fleet.policy.image,
        gateway_config=fleet.gateway.config if fleet.gateway else None,
        hosts={host.name: PlannedHost(launcher=list(host.launcher), image=host.image, restart=host.restart) for host in fleet.hosts
               if host.launcher or host.image or host.restart},
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
    launch: VllmLaunch | None = None
    checked: Utilisation | None = None
    env = dict(spec.env_values)
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
        checked = Utilisation(cold_boot=chosen.cold_boot, rolling_restart=chosen.rolling_restart,
                              cold_boot_headroom_bytes=chosen.cold_boot_headroom_bytes, rolling_restart_headroom_bytes=chosen.rolling_restart_headroom_bytes)
        lines.append(ExplanationLine(rule="gpu_memory_utilization", inputs=chosen.inputs, result=chosen.result, note=chosen.note))
        warnings += [f"{spec.name}: {chosen.warning}"] if chosen.warning else []
        shared = [gpu.label for gpu in at_start if gpu.rolling_restart_free_bytes < gpu.total_bytes]  # reserved memory or other seats
        if seat.kv_mode == "utilisation" and shared and not versions.has("utilisation_budget_per_engine", versions.modelled(fleet.policy.vllm_version)):
            warnings.append(f"{spec.name}: vLLM {fleet.policy.vllm_version} takes every other process's memory on GPU {', '.join(shared)} off this "
                            "engine's KV cache (a per-engine budget arrived in 0.9.1, VLLM.md §3): it gets less KV than planned, or none; "
                            "run 0.9.1 or later (0.10.2 pins it), or give it a GPU of its own")
        launch = vllm_launch(seat, chosen)
        warnings += [f"{spec.name}: {missing}" for missing in unsupported_flags(engine_command(launch), fleet.policy.vllm_version)]
        env |= seat.extra_env
    elif not placed:
        warnings.append(f"{spec.name}: not placed")
    common: dict[str, Any] = dict(
        name=spec.name,
        model=spec.model,
        served_model_name=spec.served_model_name or spec.name,
        port=spec.port,
        gpus=[gpu_label(key) for key in keys],
        tensor_parallel_size=spec.tensor_parallel_size,
        footprint_bytes=seat.footprint.footprint_bytes,
        footprint_basis=seat.footprint.basis,
        footprint_parts=seat.footprint.parts,
        env=env,
        boot_order=boot_order,
        explanation=lines,
        warnings=warnings,
        host=host.name if host else None,
        address=host.reachable_at if host else None,
        gateway_address=spec.gateway_reaches.service if spec.gateway_reaches else (host.gateway_reaches if host else None),
        gateway_port=spec.gateway_reaches.port if spec.gateway_reaches else None,
        device=host.device if host else "cuda",
        env_from_host=spec.env_from_host,
        env_files=list(spec.env_files),
        started_by=spec.started_by,
        levers=seat.levers,
        observation=seat.observation,
    )
    if spec.engine == "fixed":
        return PlannedFixedSeat(**common, image=spec.image, command=list(spec.command), health_url=spec.health_url)
    return PlannedVllmSeat(**common, **sized_figures(seat), launch=launch, utilisation=checked)


# The sized figures a planned seat carries under the same name (its warnings are assembled with the plan's own).
SIZED_FIGURES = tuple(name for name in (item.name for item in fields(SizedSeat))
                      if name in PlannedVllmSeat.model_fields and name not in PlannedSeatBase.model_fields and name != "kv_mode")


def sized_figures(seat: SizedSeat) -> dict[str, Any]:
    """What sizing decided, as the planned vLLM seat carries it: every SizedSeat field PlannedVllmSeat has too, by name
    (kv_mode apart: typed as required there, Optional in SizedSeat for a fixed seat)."""
    return {name: getattr(seat, name) for name in SIZED_FIGURES}


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
        uuid=gpu.uuid,
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
