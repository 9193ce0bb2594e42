"""The plan stage's documents: the fleet file (input), usage and observation inputs, and the plan (output).

The fleet models forbid unknown keys so a typo (``max_model_length``) is an error naming its line,
not a silently ignored setting. The usage and observation models are the other way round: they read
other stages' documents and keep only what the plan uses, so those stages may add fields freely.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, WithJsonSchema, field_validator

from seatplan.units import GiB, MiB

SIZE_PATTERN = r"^\s*(\d+(\.\d+)?|\.\d+)\s*([KMGTkmgt](i?[Bb])?|[Bb])?\s*$"


def _size_to_bytes(value: Any) -> Any:
    """Sizes in the fleet file: ``96GiB``, ``0.5GiB``, ``22G`` or plain bytes (``units.parse_bytes``)."""
    from seatplan.errors import SeatplanError
    from seatplan.units import parse_bytes

    if value is None or (isinstance(value, int) and not isinstance(value, bool) and value < 0):
        return value  # let the type check / the ``ge=0`` bound word the error
    if isinstance(value, str) and value.strip().startswith("-"):
        raise ValueError(f"{value!r} is negative; sizes are 0 or more")
    try:
        return parse_bytes(value)
    except SeatplanError as problem:
        raise ValueError(problem.message.split(": ", 1)[-1]) from None


Bytes = Annotated[
    int,
    BeforeValidator(_size_to_bytes),
    Field(ge=0),
    WithJsonSchema(
        {
            "anyOf": [{"type": "integer", "minimum": 0}, {"type": "string", "pattern": SIZE_PATTERN}],
            "description": "bytes, or a size with a unit: 96GiB, 0.5GiB, 512MiB, 22G (2**30), 20GB (10**9)",
        }
    ),
]

GpuRef = Annotated[
    int | str,
    WithJsonSchema(
        {
            "anyOf": [{"type": "integer", "minimum": 0}, {"type": "string", "pattern": r"^[^:]+:\d+$"}],
            "description": "a GPU index on the only host, or HOST:INDEX",
        }
    ),
]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class GpuSpec(_Strict):
    """One GPU of a host."""

    index: int = Field(ge=0, description="CUDA device index (what CUDA_VISIBLE_DEVICES names)")
    name: str = Field("", description="model name as nvidia-smi prints it, for the tables")
    total_bytes: Bytes = Field(description="total memory as CUDA reports it (e.g. 95.59GiB on a 96 GB card)")
    reserved_bytes: Bytes = Field(0, description="memory used by processes seatplan does not manage")
    keep_clear: bool = Field(False, description="this GPU must stay empty (nothing is placed on it)")


class HostSpec(_Strict):
    name: str = Field(min_length=1)
    gpus: list[GpuSpec] = Field(min_length=1)


class SeatSpec(_Strict):
    """One engine ("seat"): a vLLM server, or a fixed non-vLLM process with a known memory cap."""

    name: str = Field(min_length=1, pattern=r"^[A-Za-z0-9._-]+$")
    engine: Literal["vllm", "fixed"] = "vllm"
    model: str | None = Field(None, description="model directory (relative to the fleet file) or Hugging Face id")
    model_path_on_host: str | None = Field(
        None, description="what --model says on the GPU host, when it differs from `model` (defaults to `model`)"
    )
    served_model_name: str | None = Field(None, description="the name clients and LiteLLM use (defaults to `name`)")
    port: int | None = Field(None, ge=1, le=65535)
    dtype: str = "auto"
    kv_cache_dtype: str = "auto"
    tensor_parallel_size: int = Field(1, ge=1)
    max_model_len: Annotated[
        int | Literal["published"] | None,
        WithJsonSchema(
            {
                "anyOf": [
                    {"type": "integer", "minimum": 1},
                    {"type": "string", "pattern": r"^\s*\d+(\.\d+)?\s*[kKmM]?\s*$"},
                    {"const": "published"},
                    {"type": "null"},
                ]
            }
        ),
    ] = Field(
        None,
        description="context length in tokens, or `published` to raise it to the model's published maximum; "
        "unset = the length vLLM derives from the config",
    )
    kv_factor: float | None = Field(
        None, gt=0, description="KV bytes = one max-length request × this factor (policy default 1.25)"
    )
    kv_cache_memory_bytes: Bytes | None = Field(None, description="operator-pinned KV size; wins over kv_factor")
    max_new_tokens: int | None = Field(None, ge=1, description="default output cap (and ceiling) for replies")
    max_num_seqs: int | None = Field(None, ge=1)
    max_num_batched_tokens: int | None = Field(None, ge=1)
    enforce_eager: bool = Field(False, description="no CUDA graphs (saves their memory, costs speed)")
    pin: GpuRef | list[GpuRef] | None = Field(None, description="GPU(s) this seat must run on")
    avoid: list[GpuRef] = Field(default_factory=list, description="GPUs this seat must not run on")
    allow_yarn: bool = Field(False, description="YaRN context extension may be enabled for this seat")
    memory_cap_bytes: Bytes | None = Field(None, description="a fixed seat's declared memory per GPU")
    extra_args: list[str] = Field(default_factory=list, description="extra vLLM arguments, appended as given")
    env: dict[str, str] = Field(default_factory=dict)

    @field_validator("max_model_len", mode="before")
    @classmethod
    def _tokens(cls, value: Any) -> Any:
        if isinstance(value, str) and value != "published":
            if not re.fullmatch(r"\s*\d+(\.\d+)?\s*[kKmM]?\s*", value):
                raise ValueError(f"{value!r} is neither a token count (131072, 128K) nor `published`")
            from seatplan.units import parse_tokens

            value = parse_tokens(value)
        if isinstance(value, int) and not isinstance(value, bool) and value < 1:
            raise ValueError(f"{value} tokens: vLLM needs a context of at least one token (leave it unset for the model's own)")
        return value


class Policy(_Strict):
    kv_factor: float = Field(1.25, gt=0, description="default KV factor over one max-length request")
    rounding_step_bytes: Bytes = Field(GiB // 2, description="KV bytes are rounded up to a multiple of this")
    headroom_bytes: Bytes = Field(0, description="memory each GPU must keep free at plateau")
    creep_allowance_bytes: Bytes = Field(
        512 * MiB, description="per seat and GPU: growth after boot (fragmentation, caches) seen at plateau"
    )
    boot_margin_bytes: Bytes = Field(
        512 * MiB, description="kept between the free memory an engine sees at boot and its utilisation budget"
    )
    vllm_version: str = Field("0.32", description="the vLLM version the engines run (0.8 to 0.32): keys the estimates and flags")
    output_cap_margin: float = Field(1.25, ge=1.0, description="a proposed cap is at least p99 completion × this")

    @field_validator("vllm_version")
    @classmethod
    def _known_version(cls, value: str) -> str:
        from seatplan.facts.models import parse_vllm_version

        parse_vllm_version(value)
        return value


class Fleet(_Strict):
    hosts: list[HostSpec] = Field(min_length=1)
    seats: list[SeatSpec] = Field(min_length=1)
    policy: Policy = Field(default_factory=Policy)
    current_layout: dict[str, GpuRef | list[GpuRef]] = Field(
        default_factory=dict, description="where each seat runs now (seat name → GPU or GPUs)"
    )


# ----------------------------------------------------------------------------- other stages' outputs


class _Tolerant(BaseModel):
    model_config = ConfigDict(extra="allow")


class Runaway(_Tolerant):
    key_alias: str | None = None
    team: str | None = None
    count: int = 0
    max_completion_tokens: int = 0


class ModelUsage(_Tolerant):
    calls: int = 0
    prompt_tokens_p99: float | None = None
    completion_tokens_p50: float | None = None
    completion_tokens_p90: float | None = None
    completion_tokens_p99: float | None = None
    runaway_threshold_tokens: int | None = None
    seat: str | None = Field(None, description="the fleet seat the usage stage mapped this name to")
    peak_inflight_tokens: int | None = None
    peak_inflight_tokens_without_runaways: int | None = None
    peak_inflight_requests: int | None = None
    runaways: list[Runaway] = Field(default_factory=list)


class UsageSummary(_Tolerant):
    """What the plan reads of the usage stage's document (``models.<served name>``)."""

    models: dict[str, ModelUsage] = Field(default_factory=dict)
    rejected_rows: int | list[Any] | None = None


class ObservedSeat(_Tolerant):
    footprint_bytes: int = Field(ge=0, description="observed plateau footprint per GPU")
    source: str = "observed"
    samples: int = 0
    kv_cache_memory_bytes: int | None = Field(None, description="the KV pin the seat ran with, when known")


class ObservedFootprints(_Tolerant):
    seats: dict[str, ObservedSeat] = Field(default_factory=dict)


# ----------------------------------------------------------------------------- the plan document

Basis = Literal["exact", "estimate", "observed", "declared", "policy"]


class ExplanationLine(BaseModel):
    """One decision: which rule, on which numbers, with what result."""

    rule: str
    inputs: dict[str, int | float | str | bool | None] = Field(default_factory=dict)
    result: str
    note: str = ""


class FootprintPart(BaseModel):
    name: str
    bytes: int
    basis: Basis
    inputs: dict[str, int | float | str | bool | None] = Field(default_factory=dict)
    note: str = ""


class PlannedSeat(BaseModel):
    name: str
    engine: Literal["vllm", "fixed"]
    model: str | None
    served_model_name: str
    port: int | None
    gpus: list[str]
    tensor_parallel_size: int
    kv_cache_memory_bytes: int | None
    max_model_len: int | None
    max_new_tokens: int | None
    kv_cache_tokens: int | None
    max_concurrency: float | None
    footprint_bytes: int
    footprint_basis: Basis
    footprint_parts: list[FootprintPart]
    vllm_args: list[str]
    env: dict[str, str]
    gpu_memory_utilization: float | None
    boot_order: int
    explanation: list[ExplanationLine]
    warnings: list[str]


class PlannedGpu(BaseModel):
    host: str
    index: int
    name: str
    total_bytes: int
    reserved_bytes: int
    keep_clear: bool
    seats: list[str]
    used_bytes: int
    spare_bytes: int
    headroom_bytes: int


class RunnerUp(BaseModel):
    assignment: dict[str, list[str]]
    worst_case_spare_bytes: int
    moves: int
    why_lost: str


class ShortSeat(BaseModel):
    name: str
    footprint_bytes: int
    best_gpu: str | None
    short_by_bytes: int | None
    reason: str


class PlanInfeasibility(BaseModel):
    summary: str
    seats: list[ShortSeat]


class PlanInputs(BaseModel):
    fleet_path: str
    fleet_sha256: str
    usage_path: str | None = None
    observed_path: str | None = None
    seatplan_version: str
    vllm_version: str


class Plan(BaseModel):
    kind: Literal["seatplan.plan"] = "seatplan.plan"
    version: int = 1
    seats: list[PlannedSeat]
    gpus: list[PlannedGpu]
    worst_case_spare_bytes: int | None
    worst_case_gpu: str | None
    optimal: bool
    method: str
    bound_bytes: int | None
    solve_seconds: float
    moves: int | None
    runner_ups: list[RunnerUp]
    infeasible: PlanInfeasibility | None
    warnings: list[str]
    inputs: PlanInputs

    def seat(self, name: str) -> PlannedSeat | None:
        return next((seat for seat in self.seats if seat.name == name), None)


class FitReport(BaseModel):
    """``seatplan fit``: the longest context and the concurrency one GPU budget holds beside the weights."""

    model: str
    gpu_memory_bytes: int
    tensor_parallel_size: int
    headroom_bytes: int
    non_kv_bytes: int
    kv_budget_bytes: int
    footprint_parts: list[FootprintPart]
    max_context_derived: int
    max_context_published: int | None
    largest_max_model_len: int
    largest_max_model_len_with_factor: int
    kv_factor: float
    published_context: int
    published_kv_cache_tokens: int
    published_max_concurrency: float
    published_fits_one_request: bool
    explanation: list[ExplanationLine]
