"""A seat's footprint per GPU at its plateau (after boot, CUDA graphs captured, after creep), not at boot.

Parts: CUDA context, NCCL / custom all-reduce buffers (TP ≥ 2), weights, activation peak of the profile
run, CUDA graphs, the pinned KV cache and a creep allowance. Weights come from the model facts, KV is the
pinned byte count (exact), the rest is the fitted estimate of ``overhead_model.json`` (94 public engine
starts, keyed on the vLLM version), each part labelled with its basis and inputs. Observed plateaus
replace the estimated parts; a ``fixed`` seat costs its declared cap.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from functools import lru_cache
from importlib import resources

from pydantic import BaseModel

from seatplan import versions
from seatplan.documents.fleet import KvPin, Policy
from seatplan.documents.observed import ObservedSeat
from seatplan.documents.plan import Basis, FootprintPart, Lever, PartKind
from seatplan.engine.settings import EngineLimits
from seatplan.facts.models import ModelShape
from seatplan.units import GiB, human_bytes


class OverheadProfile(BaseModel):
    name: str
    from_version: str
    cuda_context_gib: float
    tensor_parallel_extra_gib: dict[str, float]
    sampler_bytes_per_row_vocab: float
    forward_bytes_per_token_intermediate: float
    moe_activation_extra_gib: float
    cuda_graph_base_gib: float
    cuda_graph_per_layer_gib: float
    non_kv_mae_gib: float
    measured_on: list[str] = []  # GPU classes the constants were fitted on (as nvidia-smi names them); [] = unknown


class OverheadModel(BaseModel):
    description: str
    provenance: dict[str, str]
    profiles: list[OverheadProfile]

    def profile_for(self, vllm_version: str) -> OverheadProfile:
        """The profile measured on the newest version not newer than ``vllm_version`` (else the oldest)."""
        wanted = version_key(vllm_version)
        eligible = [profile for profile in self.profiles if version_key(profile.from_version) <= wanted]
        pool = eligible or self.profiles
        pick = max if eligible else min
        return pick(pool, key=lambda profile: version_key(profile.from_version))


def version_key(version: str) -> tuple[int, ...]:
    """``0.10.2`` → (0, 10, 2); ``v0.32.0`` and ``0.29.1rc1.dev339`` compare by their release numbers."""
    return versions.release(version)


@lru_cache(maxsize=1)
def load_overhead_model() -> OverheadModel:
    text = resources.files("seatplan.plan").joinpath("overhead_model.json").read_text(encoding="utf-8")
    return OverheadModel.model_validate(json.loads(text))


@dataclass(frozen=True)
class Weights:
    bytes_per_gpu: int
    exact: bool
    source: str
    inputs: dict[str, int | float | str | bool | None] = field(default_factory=dict)  # its parts (a draft, LoRA slots …)
    draft_bytes: int = 0  # of which a speculative draft's weights
    lora_bytes: int = 0  # of which LoRA's slots


@dataclass(frozen=True)
class SeatFootprint:
    parts: list[FootprintPart]
    activation_lever: Lever | None = None  # the estimate's: what fewer sequences would take off the activation peak

    @property
    def footprint_bytes(self) -> int:
        return sum(part.bytes for part in self.parts)

    @property
    def basis(self) -> Basis:
        bases = {part.basis for part in self.parts}
        for basis in ("observed", "declared", "estimate"):
            if basis in bases:
                return basis
        return "exact"


def _gib(value: float) -> int:
    return int(round(value * GiB))


def is_moe(shape: ModelShape) -> bool:
    return shape.num_experts > 1


def intermediate_per_token(shape: ModelShape) -> int:
    """The MLP width one token passes through: the routed experts' for MoE (OVERHEAD.md §5)."""
    if is_moe(shape) and shape.moe_intermediate_size:
        return max(1, shape.experts_per_token) * shape.moe_intermediate_size
    return shape.intermediate_size or 4 * shape.hidden_size


def sampler_peak_bytes(bytes_per_row_vocab: float, vocab_size: int, max_num_seqs: int, max_num_batched_tokens: int) -> float:
    """Full-vocab logits for each row the sampler takes at once: one per sequence, at most one per batched token."""
    return bytes_per_row_vocab * min(max_num_seqs, max_num_batched_tokens) * vocab_size


def forward_peak_bytes(bytes_per_token_intermediate: float, max_num_batched_tokens: int, intermediate_per_rank: int) -> float:
    """The forward pass's MLP activations for a full batch of tokens on one rank."""
    return bytes_per_token_intermediate * max_num_batched_tokens * intermediate_per_rank


def activation_part(shape: ModelShape, limits: EngineLimits, tensor_parallel_size: int, profile: OverheadProfile) -> FootprintPart:
    """The profile run's peak: full-vocab sampler logits on every rank, or the forward pass, whichever is larger."""
    sampler_bytes = sampler_peak_bytes(profile.sampler_bytes_per_row_vocab, shape.vocab_size, limits.max_num_seqs,
                                       limits.max_num_batched_tokens)
    intermediate_per_rank = intermediate_per_token(shape) // tensor_parallel_size
    forward_bytes = forward_peak_bytes(profile.forward_bytes_per_token_intermediate, limits.max_num_batched_tokens, intermediate_per_rank)
    moe_bytes = profile.moe_activation_extra_gib * GiB if is_moe(shape) else 0.0
    driver = "sampler (max_num_seqs × vocab)" if sampler_bytes >= forward_bytes else "forward (max_num_batched_tokens × intermediate)"
    return FootprintPart(
        name=PartKind.ACTIVATION_PEAK,
        bytes=int(round(max(sampler_bytes, forward_bytes) + moe_bytes)),
        basis="estimate",
        inputs={
            "vocab_size": shape.vocab_size,
            "max_num_seqs": limits.max_num_seqs,
            "max_num_batched_tokens": limits.max_num_batched_tokens,
            "intermediate_per_rank": intermediate_per_rank,
            "sampler_bytes_per_row_vocab": profile.sampler_bytes_per_row_vocab,
            "forward_bytes_per_token_intermediate": profile.forward_bytes_per_token_intermediate,
            "moe": is_moe(shape),
        },
        note=f"driven by the {driver}; {limits.source}; profile {profile.name}",
    )


LEVER_SEQS = 256  # vLLM's max_num_seqs default before 0.11's larger server defaults; a common setting


def activation_lever(shape: ModelShape, limits: EngineLimits, tensor_parallel_size: int, profile: OverheadProfile) -> Lever | None:
    """What ``max_num_seqs: LEVER_SEQS`` would take off the activation peak of :func:`activation_part`."""
    if limits.max_num_seqs <= LEVER_SEQS:
        return None
    batched, seqs, vocab = limits.max_num_batched_tokens, limits.max_num_seqs, shape.vocab_size
    forward = forward_peak_bytes(profile.forward_bytes_per_token_intermediate, batched, intermediate_per_token(shape) // tensor_parallel_size)
    per_row = profile.sampler_bytes_per_row_vocab
    before = max(sampler_peak_bytes(per_row, vocab, seqs, batched), forward)
    after = max(sampler_peak_bytes(per_row, vocab, LEVER_SEQS, batched), forward)
    if before <= after:
        return None
    return Lever(change=f"max_num_seqs: {LEVER_SEQS} (from {seqs:,}): less activation", freed_bytes=int(before - after))


@dataclass(frozen=True)
class KvLeverTerms:
    """What the KV levers need of a seat's sizing: the KV decision (rule or operator pin, with the rule's figures),
    its KV dtype, and whether every KV layer attends to the whole context (half the context, half the request)."""

    pin: KvPin
    kv_cache_dtype: str
    full_attention_only: bool


def operator_lever(pin: KvPin) -> Lever | None:
    """An operator's pin above what the rule gives: going back to the rule frees pin − rule exactly (both are byte
    counts the plan carries), so it is named first (issue 32: two seats pinned 60 GiB far above the rule were never
    named while a third seat was told to shrink)."""
    if pin.source != "operator" or pin.kv_cache_memory_bytes <= pin.rule_bytes:
        return None
    return Lever(change=f"kv_cache_memory_bytes: drop the pin {human_bytes(pin.kv_cache_memory_bytes)} (the rule gives {human_bytes(pin.rule_bytes)})",
                 freed_bytes=pin.kv_cache_memory_bytes - pin.rule_bytes, operator_value=True)


def _rule_at_half(pin: KvPin) -> int:
    """The KV rule (``Policy.rule_kv_bytes``, its one home) at half the request, with the seat's factor and step."""
    policy = Policy(rounding_step_bytes=pin.rounding_step_bytes)
    return policy.rule_kv_bytes(pin.request_kv_bytes // 2, pin.min_kv_cache_bytes // 2, pin.factor)


def levers(footprint: SeatFootprint, max_model_len: int | None, tensor_parallel_size: int, kv: KvLeverTerms | None = None) -> list[Lever]:
    """What each fleet-file change would take off this seat's footprint per GPU, given its pins: an operator's KV pin
    above the rule (exact); the activation peak at fewer sequences; the KV rule again at half the bytes per element
    (fp8) or half the context (full-attention layers: half the request); weights over two GPUs. A lever that frees
    nothing is not offered: a pinned KV cache keeps its size whatever its dtype or context, and an fp8 KV cache is
    not halved again."""
    parts = {part.name: part for part in footprint.parts}
    found = [footprint.activation_lever] if footprint.activation_lever is not None else []
    kv_part = parts.get(PartKind.KV_CACHE)
    if kv is not None and (pinned := operator_lever(kv.pin)) is not None:
        found.insert(0, pinned)
    if kv is not None and kv_part is not None and kv_part.bytes > 0 and kv.pin.source == "rule":
        halved = kv_part.bytes - _rule_at_half(kv.pin)
        if kv.kv_cache_dtype == "auto":
            found.append(Lever(change="kv_cache_dtype: fp8 (a 16-bit KV cache)", freed_bytes=halved))
        if max_model_len and max_model_len >= 2 and kv.full_attention_only:
            found.append(Lever(change=f"max_model_len: {max_model_len // 2} (half the context; full-attention layers)", freed_bytes=halved))
    weights = parts.get(PartKind.WEIGHTS)
    if weights is not None and tensor_parallel_size == 1:
        found.append(Lever(change="tensor_parallel_size: 2 (weights split over two GPUs; adds NCCL buffers)", freed_bytes=weights.bytes // 2))
    return [lever for lever in found if lever.freed_bytes > 0]


def vllm_footprint(
    *,
    shape: ModelShape,
    weights: Weights,
    tensor_parallel_size: int,
    kv_cache_memory_bytes: int,
    limits: EngineLimits,
    enforce_eager: bool,
    creep_allowance_bytes: int,
    profile: OverheadProfile,
    vllm_version: str,
) -> SeatFootprint:
    """The estimated plateau footprint of a vLLM seat on each of its GPUs."""
    keyed = {"vllm_version": vllm_version, "profile": profile.name}
    parts = [
        FootprintPart(
            name=PartKind.CUDA_CONTEXT,
            bytes=_gib(profile.cuda_context_gib),
            basis="estimate",
            inputs=keyed | {"gib": profile.cuda_context_gib},
            note="CUDA context, cuBLAS workspaces and vLLM's non-torch memory of a single-GPU engine",
        )
    ]
    if tensor_parallel_size >= 2:
        topology = "moe" if is_moe(shape) else "dense"
        extra_gib = profile.tensor_parallel_extra_gib[topology]
        parts.append(
            FootprintPart(
                name=PartKind.NCCL_ALLREDUCE,
                bytes=_gib(extra_gib),
                basis="estimate",
                inputs=keyed | {"tensor_parallel_size": tensor_parallel_size, "topology": topology, "gib": extra_gib},
                note="NCCL communicators and custom all-reduce buffers (single-node NVLink measurements)",
            )
        )
    parts.append(
        FootprintPart(
            name=PartKind.WEIGHTS,
            bytes=weights.bytes_per_gpu,
            basis="exact" if weights.exact else "estimate",
            inputs={"tensor_parallel_size": tensor_parallel_size, "source": weights.source} | weights.inputs,
            note="per GPU, " + weights.source + "".join(
                f"; with {what} ({human_bytes(size)})" for size, what in
                ((weights.draft_bytes, "the speculative draft's weights"), (weights.lora_bytes, "the LoRA slots")) if size),
        )
    )
    parts.append(activation_part(shape, limits, tensor_parallel_size, profile))
    graph_gib = 0.0 if enforce_eager else profile.cuda_graph_base_gib + profile.cuda_graph_per_layer_gib * shape.num_layers
    parts.append(
        FootprintPart(
            name=PartKind.CUDA_GRAPHS,
            bytes=_gib(graph_gib),
            basis="exact" if enforce_eager else "estimate",
            inputs={"num_layers": shape.num_layers, "enforce_eager": enforce_eager, "base_gib": profile.cuda_graph_base_gib, "per_layer_gib": profile.cuda_graph_per_layer_gib},
            note="none: --enforce-eager" if enforce_eager else "captured after the KV cache is allocated",
        )
    )
    parts.append(kv_part(kv_cache_memory_bytes))
    parts.append(creep_part(creep_allowance_bytes))
    return SeatFootprint(parts, activation_lever(shape, limits, tensor_parallel_size, profile))


def kv_part(kv_cache_memory_bytes: int) -> FootprintPart:
    return FootprintPart(
        name=PartKind.KV_CACHE,
        bytes=kv_cache_memory_bytes,
        basis="exact",
        inputs={"kv_cache_memory_bytes": kv_cache_memory_bytes},
        note="pinned with --kv-cache-memory-bytes; vLLM allocates at most this",
    )


def creep_part(creep_allowance_bytes: int) -> FootprintPart:
    return FootprintPart(
        name=PartKind.CREEP_ALLOWANCE,
        bytes=creep_allowance_bytes,
        basis="policy",
        inputs={"creep_allowance_bytes": creep_allowance_bytes},
        note="growth after boot (allocator fragmentation, caches): policy.creep_allowance_bytes",
    )


def fixed_footprint(memory_cap_bytes: int) -> SeatFootprint:
    return SeatFootprint(
        [
            FootprintPart(
                name=PartKind.DECLARED_CAP,
                bytes=memory_cap_bytes,
                basis="declared",
                inputs={"memory_cap_bytes": memory_cap_bytes},
                note="a fixed (non-vLLM) seat costs its declared memory cap",
            )
        ]
    )


def observed_footprint(observed: ObservedSeat, kv_cache_memory_bytes: int | None, observed_kv_bytes: int | None,
                       derived: str = "") -> SeatFootprint:
    """Replace the estimated parts by what the seat was seen to use; the KV pin stays exact.

    The observed plateau includes the KV cache the seat ran with: ``observed_kv_bytes`` when the
    observations say so, otherwise the pin this plan gives it (the usual plan → apply → observe loop).
    ``derived`` says what changed since the observation (a new KV pin, a longer context): the non-KV part is still
    the one observed, the KV part the new one, and the footprint is labelled derived (issue 46).
    """
    if kv_cache_memory_bytes is None:
        return SeatFootprint(
            [FootprintPart(name=PartKind.OBSERVED_PLATEAU, bytes=observed.footprint_bytes, basis="observed", inputs=_observed_inputs(observed), note="observed plateau per GPU")]
        )
    ran_with = observed_kv_bytes if observed_kv_bytes is not None else kv_cache_memory_bytes
    non_kv_bytes = max(0, observed.footprint_bytes - ran_with)
    as_seen = "observed plateau" if observed.at_plateau else "observed reading (not a plateau)"
    note = f"{as_seen} minus the KV cache it ran with: context, NCCL, weights, activations, graphs and creep as seen"
    if derived:
        note = f"derived: {derived}; the {note}, with this plan's KV cache beside it"
    return SeatFootprint(
        [
            FootprintPart(
                name=PartKind.OBSERVED_NON_KV,
                bytes=non_kv_bytes,
                basis="observed",
                inputs=_observed_inputs(observed) | {"kv_cache_memory_bytes_observed_with": ran_with} | ({"derived": True} if derived else {}),
                note=note,
            ),
            kv_part(kv_cache_memory_bytes),
        ]
    )


def _observed_inputs(observed: ObservedSeat) -> dict[str, int | float | str | bool | None]:
    return {"observed_footprint_bytes": observed.footprint_bytes, "source": observed.source, "samples": observed.samples}
