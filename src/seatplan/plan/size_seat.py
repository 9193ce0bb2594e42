"""Sizing one seat: its context, KV bytes, output cap and plateau footprint, from its model facts and the policy."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from seatplan import versions
from seatplan.documents.fleet import Device, Fleet, GpuSpec, KvPin, SeatSpec
from seatplan.documents.fleet_file import allowed_gpus, resolve_model
from seatplan.documents.observed import ObservedFootprints, ObservedSeat
from seatplan.documents.plan import ExplanationLine, KvReplayReading, Lever, SeatObservation
from seatplan.documents.usage import UsageReport, usage_of_seat
from seatplan.engine.settings import EngineHost, EngineLimits, batch_limits, engine_settings, usable_gpus, with_draft_located
from seatplan.errors import SeatplanError
from seatplan.facts.api import load_model_facts, model_files_sha256
from seatplan.facts.models import EngineSettings, ModelFacts
from seatplan.plan import footprint as fp
from seatplan.plan import sizing
from seatplan.plan.kv_replay import replay_check
from seatplan.units import GiB, human_bytes

GpuKey = tuple[str, int]
# How a vLLM seat's KV cache is sized: pinned (--kv-cache-memory-bytes) by the KV rule or by the operator, or left to
# --gpu-memory-utilization (vLLM before 0.10.2, which has no pin); the launch carries the outcome (documents.launch.KvSizing).
KvMode = Literal["rule", "operator", "utilisation"]
FactsLoader = Callable[[str, EngineSettings], ModelFacts]


def choose_kv_mode(kv_source: Literal["rule", "operator"], vllm_version: str) -> KvMode:
    """How the seat's KV cache is sized: pinned in bytes (the rule's or the operator's) where the release has
    ``--kv-cache-memory-bytes`` (the version table's ``kv_bytes_flag``, 0.10.2), else by ``--gpu-memory-utilization``.
    The launch's ``kv`` (``Pinned`` or ``ByUtilisation``) is built from this and nothing else."""
    return kv_source if versions.has("kv_bytes_flag", versions.modelled(vllm_version)) else "utilisation"


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
    limits: EngineLimits | None = None
    hf_overrides: dict[str, object] | None = None
    extra_env: dict[str, str] = field(default_factory=dict)
    model_files_sha256: dict[str, str] = field(default_factory=dict)
    lines: list[ExplanationLine] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    # the figures other steps read, typed (the lines above are for people)
    derived_max_model_len: int | None = None
    yarn_max_model_len: int | None = None
    raise_kv_bytes: int = 0  # ``published``: the KV one request costs beyond vLLM's default length (plan/contexts.py)
    kv_replay: KvReplayReading | None = None
    levers: list[Lever] = field(default_factory=list)
    kv_mode: KvMode | None = None  # None: a fixed seat
    estimate: fp.SeatFootprint | None = None  # a vLLM seat's estimate, also where an observation replaced it (checked against it)
    observation: SeatObservation | None = None  # with plan --observed: which figure was used, and both


def default_facts_loader(model: str, settings: EngineSettings) -> ModelFacts:
    return load_model_facts(model, settings)


def gpu_table(fleet: Fleet) -> dict[GpuKey, GpuSpec]:
    return {(host.name, gpu.index): gpu for host in fleet.hosts for gpu in host.gpus}


def seat_device(fleet: Fleet, usable: list[GpuKey], seat: SeatSpec) -> Device:
    """The device the seat's engine runs on; the KV block size follows it, so it must be one."""
    devices = {host.device for host in fleet.hosts if any(key[0] == host.name for key in usable)}
    if len(devices) > 1:
        raise SeatplanError(
            "the seat may land on CPU and CUDA hosts, whose KV block sizes differ",
            fix="pin it (`pin:`) or `avoid:` the GPUs of one kind of host",
        )
    return devices.pop() if devices else "cuda"


def size_seat(
    fleet: Fleet,
    gpus: dict[GpuKey, GpuSpec],
    seat: SeatSpec,
    base_dir: Path,
    usage: UsageReport | None,
    observed: ObservedFootprints | None,
    facts_loader: FactsLoader,
) -> SizedSeat:
    allowed = allowed_gpus(fleet, seat)
    seen = observed.seats.get(seat.name) if observed else None
    if seat.engine == "fixed":
        return size_fixed_seat(seat, allowed, seen)
    usable = usable_gpus(fleet, seat)
    seat_device(fleet, usable, seat)  # refuses a seat that could land on both kinds of host
    host = EngineHost.of(fleet, usable)
    limits = batch_limits(seat.max_num_seqs, seat.max_num_batched_tokens, host.gpu_total_bytes)
    settings = with_draft_located(engine_settings(seat, host, fleet.policy.vllm_version), base_dir)
    assert seat.model is not None  # fleet checks guarantee it
    facts = facts_loader(resolve_model(seat.model, base_dir), settings)

    context = sizing.choose_context(seat, facts)
    kv = sizing.choose_kv_bytes(seat, facts, context.max_model_len, fleet.policy)
    model_usage = usage_of_seat(usage, seat.name, seat.served_model_name or seat.name)
    cap = sizing.choose_output_cap(seat, context.max_model_len, model_usage, fleet.policy)
    inflight_lines, inflight_warnings = sizing.inflight_check(seat.name, kv.capacity, model_usage)
    replay = replay_check(seat.name, model_usage.kv_replay if model_usage else None, facts, kv.capacity, kv.rule_bytes, fleet.policy)
    footprint, footprint_line, estimate = seat_footprint(fleet, seat, facts, kv.kv_cache_memory_bytes, limits, seen, context.max_model_len)

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
        derived_max_model_len=facts.max_context_derived,
        yarn_max_model_len=facts.yarn.extended_max_model_len if facts.yarn is not None else None,
        raise_kv_bytes=context.raise_kv_bytes,
        kv_replay=replay.reading,
        levers=fp.levers(footprint, context.max_model_len, seat.tensor_parallel_size, kv_lever_terms(seat, facts, context.max_model_len, kv.pin)),
        kv_mode=choose_kv_mode(kv.source, fleet.policy.vllm_version),
        estimate=estimate,
        observation=(seat_observation(estimate, seen, derived_because(seen, kv.kv_cache_memory_bytes, context.max_model_len) if seen else "")
                     if observed is not None else None),
    )
    if context.yarn is not None:
        sized.hf_overrides = sizing.yarn_overrides(context.yarn, fleet.policy.vllm_version)
        if context.yarn.needs_long_max_model_len_env:
            sized.extra_env["VLLM_ALLOW_LONG_MAX_MODEL_LEN"] = "1"
    sized.lines += feature_lines(facts) + context.lines + kv.lines + cap.lines + inflight_lines + replay.lines + [footprint_line, batch_limits_line(limits)]
    sized.warnings += context.warnings + kv.warnings + cap.warnings + inflight_warnings + replay.warnings
    return sized


def kv_lever_terms(seat: SeatSpec, facts: ModelFacts, max_model_len: int, pin: KvPin | None) -> fp.KvLeverTerms | None:
    """What the KV levers read of the seat: its pin, its KV dtype, and whether one request takes a block per
    ``block_size`` tokens of the whole context on every KV layer (no sliding window, no Mamba state)."""
    if pin is None:
        return None
    whole_context = pin.request_kv_bytes == -(-max_model_len // facts.block_size) * facts.bytes_per_block
    return fp.KvLeverTerms(pin=pin, kv_cache_dtype=seat.kv_cache_dtype, full_attention_only=whole_context)


def size_fixed_seat(seat: SeatSpec, allowed: list[GpuKey] | None, seen: ObservedSeat | None) -> SizedSeat:
    assert seat.memory_cap_bytes is not None  # fleet checks guarantee it
    footprint = fp.fixed_footprint(seat.memory_cap_bytes)
    sized = SizedSeat(seat, allowed, footprint, levers=fp.levers(footprint, None, seat.tensor_parallel_size))
    sized.lines.append(
        ExplanationLine(rule="fixed_seat", inputs={"memory_cap_bytes": seat.memory_cap_bytes}, result=f"footprint {human_bytes(seat.memory_cap_bytes)} per GPU",
            note="not a vLLM engine: it costs its declared cap")
    )
    if seen is not None:
        sized.warnings.append(f"{seat.name}: observed {human_bytes(seen.footprint_bytes)} against a declared cap of {human_bytes(seat.memory_cap_bytes)};"
                              " the plan uses the declared cap")
    return sized


def seat_footprint(
    fleet: Fleet, seat: SeatSpec, facts: ModelFacts, kv_cache_memory_bytes: int, limits: EngineLimits, seen: ObservedSeat | None,
    max_model_len: int | None = None,
) -> tuple[fp.SeatFootprint, ExplanationLine, fp.SeatFootprint]:
    """The observed footprint when there is one, else the labelled estimate; and the estimate either way (the plan
    checks one against the other, issue 46). An observation made with another KV cache or context than this plan
    gives is kept for its non-KV part and labelled derived."""
    version = fleet.policy.vllm_version
    profile = fp.load_overhead_model().profile_for(version)
    estimate = fp.vllm_footprint(
        shape=facts.shape,
        weights=fp.Weights(facts.weights_bytes, facts.weights_exact, facts.weights_source, weights_inputs(facts),
                           draft_bytes=facts.speculative.weights_bytes if facts.speculative else 0,
                           lora_bytes=facts.lora.slot_bytes if facts.lora else 0),
        tensor_parallel_size=seat.tensor_parallel_size,
        kv_cache_memory_bytes=kv_cache_memory_bytes,
        limits=limits,
        enforce_eager=seat.enforce_eager,
        creep_allowance_bytes=fleet.policy.creep_allowance_bytes,
        profile=profile,
        vllm_version=version,
    )
    if seen is not None:
        derived = derived_because(seen, kv_cache_memory_bytes, max_model_len)
        footprint = fp.observed_footprint(seen, kv_cache_memory_bytes, seen.kv_cache_memory_bytes, derived)
        label = "derived from the observation" if derived else "observed"
        return footprint, ExplanationLine(
            rule="footprint",
            inputs={"observed_footprint_bytes": seen.footprint_bytes, "source": seen.source, "samples": seen.samples,
                    "observed_at": seen.observed_at.isoformat() if seen.observed_at else None, "estimate_bytes": estimate.footprint_bytes},
            result=f"{human_bytes(footprint.footprint_bytes)} per GPU ({label})",
            note=(f"derived: {derived}; the observed non-KV part with this plan's KV" if derived
                  else "observed " + ("plateau" if seen.at_plateau else "reading of the running engine (not a plateau)")
                  + " replaces the estimate; the KV part follows this plan's pin")
                 + f" (the estimate: {human_bytes(estimate.footprint_bytes)})",
        ), estimate
    return estimate, ExplanationLine(
        rule="footprint",
        inputs={part.name: part.bytes for part in estimate.parts} | {"profile": profile.name, "non_kv_mae_bytes": round(profile.non_kv_mae_gib * GiB)},
        result=f"{human_bytes(estimate.footprint_bytes)} per GPU (estimate)",
        note=f"plateau estimate keyed on vLLM {version} (profile {profile.name}, non-KV MAE {profile.non_kv_mae_gib:.2f} GiB); pass --observed to replace it",
    ), estimate


def derived_because(seen: ObservedSeat, kv_cache_memory_bytes: int, max_model_len: int | None) -> str:
    """What this plan changes of the launch the observation was made with ("" : nothing it knows of)."""
    changes = []
    if seen.kv_cache_memory_bytes is not None and seen.kv_cache_memory_bytes != kv_cache_memory_bytes:
        changes.append(f"KV cache {human_bytes(seen.kv_cache_memory_bytes)} as observed, {human_bytes(kv_cache_memory_bytes)} in this plan")
    if seen.max_model_len is not None and max_model_len is not None and seen.max_model_len != max_model_len:
        changes.append(f"context {seen.max_model_len:,} tokens as observed, {max_model_len:,} in this plan")
    return "; ".join(changes)


def seat_observation(estimate: fp.SeatFootprint, seen: ObservedSeat | None, derived: str) -> SeatObservation:
    """The label a planned seat carries once observations were given: observed, derived (``derived`` says what
    changed since), or estimated."""
    if seen is None:
        return SeatObservation(use="estimated", estimated_bytes=estimate.footprint_bytes)
    return SeatObservation(use="derived" if derived else "observed", estimated_bytes=estimate.footprint_bytes, observed_bytes=seen.footprint_bytes,
                           observed_kv_bytes=seen.kv_cache_memory_bytes, source=seen.source,
                           observed_at=seen.observed_at.isoformat() if seen.observed_at else None, at_plateau=seen.at_plateau)


def weights_inputs(facts: ModelFacts) -> dict[str, int | float | str | bool | None]:
    """The parts of the weights on each GPU beside the model's own (issue 47): a speculative draft's, the LoRA slots."""
    inputs: dict[str, int | float | str | bool | None] = {}
    draft, lora = facts.speculative, facts.lora
    extra = (draft.weights_bytes if draft is not None else 0) + (lora.slot_bytes if lora is not None else 0)
    if extra:
        inputs["model_weights_bytes"] = facts.weights_bytes - extra
    if draft is not None and draft.weights_bytes:
        inputs |= {"draft_model": draft.model, "draft_weights_bytes": draft.weights_bytes, "draft_tensor_parallel_size": draft.tensor_parallel_size}
    if lora is not None:
        inputs |= {"lora_slot_bytes": lora.slot_bytes, "max_loras": lora.max_loras, "max_lora_rank": lora.max_lora_rank}
    return inputs


def feature_lines(facts: ModelFacts) -> list[ExplanationLine]:
    """What the seat's vLLM features add to its memory, with their inputs (issue 47)."""
    lines = []
    draft = facts.speculative
    if draft is not None:
        share = f"{draft.kv_bytes_per_token:,} of {facts.kv_bytes_per_token:,} B of KV per token" if draft.num_layers else "no KV layers"
        lines.append(ExplanationLine(
            rule="speculative decoding",
            inputs={"method": draft.method, "draft_model": draft.model, "num_speculative_tokens": draft.num_speculative_tokens,
                    "draft_layers": draft.num_layers, "draft_kv_bytes_per_token": draft.kv_bytes_per_token,
                    "draft_weights_bytes": draft.weights_bytes, "draft_tensor_parallel_size": draft.tensor_parallel_size},
            result=f"{draft.method}: {draft.num_layers} draft layer(s) join the KV cache groups ({share}); "
                   f"{human_bytes(draft.weights_bytes)} of draft weights per GPU",
            note="vLLM groups the draft's attention layers with the target's in one KV budget (facts.speculative)",
        ))
    lora = facts.lora
    if lora is not None:
        lines.append(ExplanationLine(
            rule="LoRA slots",
            inputs={"max_loras": lora.max_loras, "max_lora_rank": lora.max_lora_rank, "lora_dtype": lora.lora_dtype,
                    "modules": ", ".join(lora.modules)} | {f"{name}_bytes": size for name, size in lora.per_module_bytes.items()},
            result=f"{human_bytes(lora.slot_bytes)} per GPU of LoRA A/B stacks ({lora.max_loras} × rank {lora.max_lora_rank}), in the weights part",
            note="vLLM allocates them at load for every module it wraps, whatever adapters are loaded (facts.lora)",
        ))
    return lines


def batch_limits_line(limits: EngineLimits) -> ExplanationLine:
    return ExplanationLine(
        rule="batch_limits",
        inputs={"max_num_seqs": limits.max_num_seqs, "max_num_batched_tokens": limits.max_num_batched_tokens},
        result=f"--max-num-seqs {limits.max_num_seqs} --max-num-batched-tokens {limits.max_num_batched_tokens}",
        note=f"{limits.source}; passed explicitly because the activation estimate assumes them",
    )
