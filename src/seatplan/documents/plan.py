"""The plan document: what ``seatplan plan -o plan.json`` writes and render, verify and report read.

It is versioned (``kind``/``version``): a saved plan can be diffed, re-rendered and verified later, and
a document of another kind is refused on read.
"""

from __future__ import annotations

from collections.abc import Iterable
from enum import StrEnum
from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field, model_validator

from seatplan.documents.fleet import Device, RestartKind, StartedBy
from seatplan.documents.launch import FixedLaunch, Pinned, SeatLaunch, Utilisation, VllmLaunch, model_and_revision

Basis = Literal["exact", "estimate", "observed", "declared", "policy"]
# the plan document's version this seatplan writes (documents.io.KIND_VERSIONS reads it)
PLAN_VERSION = 4


class ExplanationLine(BaseModel):
    """One decision: which rule, on which numbers, with what result."""

    rule: str
    inputs: dict[str, int | float | str | bool | None] = Field(default_factory=dict)
    result: str
    note: str = ""


class PartKind(StrEnum):
    """What a footprint part is, and when the engine holds it: before vLLM's start-up memory snapshot (its CUDA
    context and NCCL buffers: vLLM 0.32 ``vllm/v1/worker/gpu_worker.py`` lines 505-536 take the snapshot after the
    distributed environment exists), inside the ``--gpu-memory-utilization`` request (what it allocates after the
    snapshot), or beside both (the creep that grows at plateau; a declared or observed whole)."""

    CUDA_CONTEXT = "cuda_context"
    NCCL_ALLREDUCE = "nccl_allreduce"
    WEIGHTS = "weights"
    ACTIVATION_PEAK = "activation_peak"
    CUDA_GRAPHS = "cuda_graphs"
    KV_CACHE = "kv_cache"
    CREEP_ALLOWANCE = "creep_allowance"
    DECLARED_CAP = "declared_cap"  # a fixed seat's memory_cap_bytes
    OBSERVED_PLATEAU = "observed_plateau"  # diagnose's plateau, whole
    OBSERVED_NON_KV = "observed_non_kv"  # diagnose's plateau less its KV cache

    @property
    def before_snapshot(self) -> bool:
        """Held before vLLM's snapshot, so already gone from the free memory its start-up check sees."""
        return self in (PartKind.CUDA_CONTEXT, PartKind.NCCL_ALLREDUCE)

    @property
    def inside_request(self) -> bool:
        """Allocated after the snapshot, out of what ``--gpu-memory-utilization`` requests."""
        return not self.before_snapshot and self is not PartKind.CREEP_ALLOWANCE


class FootprintPart(BaseModel):
    name: PartKind
    bytes: int
    basis: Basis
    inputs: dict[str, int | float | str | bool | None] = Field(default_factory=dict)
    note: str = ""


def before_snapshot_bytes(parts: Iterable[FootprintPart]) -> int:
    """What an engine holds before vLLM's snapshot (its own context): gone from the free memory the check sees."""
    return sum(part.bytes for part in parts if part.name.before_snapshot)


def inside_request_bytes(parts: Iterable[FootprintPart]) -> int:
    """What an engine allocates after vLLM's snapshot: what its ``--gpu-memory-utilization`` request must cover."""
    return sum(part.bytes for part in parts if part.name.inside_request)


class Lever(BaseModel):
    """A fleet-file change and what it would take off the seat's footprint per GPU (a labelled estimate)."""

    change: str
    freed_bytes: int
    operator_value: bool = Field(False, description="undoes an operator's value (a KV pin above the rule): exact, and named first")


class KvReplayReading(BaseModel):
    """The usage stage's replay of the window's requests read at the seat's planned KV cache (``plan --usage``;
    ``plan/kv_replay.py``). ``exact`` false: the minutes and waits are read at the curve's level just below, an upper
    bound."""

    kv_cache_memory_bytes: int
    num_blocks: int
    usable_blocks: int = Field(description="num_blocks - 1: vLLM's block pool sets one null block aside")
    peak_blocks: int
    peak_at: str = Field(description="when the peak was reached, or - when the usage document does not say")
    minutes_above: float
    waited_requests: int
    exact: bool
    smallest_kv_bytes: int = Field(description="the smallest KV that held the window (the peak plus the null block, "
                                   "at least one max-length request)")
    smallest_kv_bytes_rounded: int = Field(description="the same rounded up as the KV rule rounds")
    rule_kv_bytes: int = Field(description="what the KV rule gives this seat, pinned or not")


class SeatObservation(BaseModel):
    """Where a seat's footprint came from when the plan had observations (``plan --observed``), beside the estimate it
    was checked against (issue 46): ``observed`` as seen, ``derived`` the observed non-KV part with a KV cache or context
    that differs from what ran, ``estimated`` no observation of this seat."""

    use: Literal["observed", "derived", "estimated"]
    estimated_bytes: int = Field(description="the estimate per GPU (the profile's parts), whichever figure the plan used")
    observed_bytes: int | None = Field(None, description="the observed figure per GPU, as it ran")
    observed_kv_bytes: int | None = Field(None, description="the KV cache it ran with, where the observation says")
    source: str | None = None
    observed_at: str | None = Field(None, description="when it was read (ISO 8601), where the observation says")
    at_plateau: bool | None = Field(None, description="false: one reading of a running engine (adopt), not a plateau")


class PlannedSeatBase(BaseModel):
    """What every planned seat has, whatever runs it."""

    name: str
    model: str | None
    served_model_name: str
    port: int | None
    gpus: list[str]
    tensor_parallel_size: int
    footprint_bytes: int
    footprint_basis: Basis
    footprint_parts: list[FootprintPart]
    env: dict[str, str]
    boot_order: int
    explanation: list[ExplanationLine]
    warnings: list[str]
    host: str | None = None
    address: str | None = Field(None, description="where the engine is reached (the host's address or name)")
    # the fleet's gateway_reaches: where the gateway reaches the engine, where not at address:port (None: there)
    gateway_address: str | None = Field(None, description="the host's or the seat's gateway_reaches: host.docker.internal, a compose service, localhost")
    gateway_port: int | None = Field(None, description="the container port the gateway reaches a compose service at (None: the seat's port)")
    device: Device = "cuda"
    # secrets by reference (docs/fleet.md, "Secrets"): names only, never values
    env_from_host: dict[str, str] = Field(default_factory=dict, description="the engine's variable → the host variable holding its value")
    env_files: list[str] = Field(default_factory=list, description="files on the host the engine reads its environment from")
    started_by: StartedBy | None = Field(None, description="how the engine was started before seatplan ran it (the cut-over)")
    levers: list[Lever] = Field(default_factory=list, description="what each fleet-file change would take off the footprint per GPU")
    observation: SeatObservation | None = Field(None, description="with plan --observed: observed, derived or estimated, and both figures")


class PlannedVllmSeat(PlannedSeatBase):
    """A vLLM engine: its sizing (every figure another stage reads, typed) and its launch, how render starts it.

    The figures are None only where sizing has none: a seat whose model facts could not be read has no KV figures; a
    seat not placed has no launch (nothing to start) and no utilisation."""

    engine: Literal["vllm"] = "vllm"
    kv_cache_memory_bytes: int | None = Field(description="the KV bytes sizing gave it (the operator's pin or the rule): pinned "
                                              "where the launch pins them, else the KV part of the footprint estimate")
    max_model_len: int | None
    max_new_tokens: int | None
    kv_cache_tokens: int | None
    max_concurrency: float | None
    num_gpu_blocks: int | None = Field(None, description="vLLM's num_gpu_blocks for the pinned KV bytes (exact)")
    block_size: int | None = None
    launch: VllmLaunch | None = Field(None, description="how the engine is started (decided once by the plan); None for a seat not placed")
    utilisation: Utilisation | None = Field(None, description="what the launch's --gpu-memory-utilization was checked against")
    derived_max_model_len: int | None = Field(None, description="the longest context vLLM derives from the model's config")
    yarn_max_model_len: int | None = Field(None, description="the longest context with the model's YaRN option on; None without one")
    kv_replay: KvReplayReading | None = Field(None, description="the usage's replay read at this KV (plan --usage, when comparable)")

    @model_validator(mode="after")
    def _launch_agrees(self) -> PlannedVllmSeat:
        """The launch repeats a few of the seat's figures (what vLLM is told of them); a plan edited by hand in one place
        and not the other is refused rather than started with one and verified against the other."""
        launch = self.launch
        if launch is None:
            return self
        pinned = launch.kv.kv_cache_memory_bytes if isinstance(launch.kv, Pinned) else self.kv_cache_memory_bytes
        for name, told, sized in (("served_model_name", launch.served_model_name, self.served_model_name), ("port", launch.port, self.port),
                                  ("tensor_parallel_size", launch.tensor_parallel_size, self.tensor_parallel_size),
                                  ("max_model_len", launch.max_model_len, self.max_model_len),
                                  ("max_new_tokens", launch.max_new_tokens, self.max_new_tokens), ("kv_cache_memory_bytes", pinned, self.kv_cache_memory_bytes)):
            if told != sized:
                raise ValueError(f"the launch's {name} {told!r} is not the seat's {sized!r}; re-plan rather than edit the plan")
        return self

    @property
    def gpu_memory_utilization(self) -> float | None:
        """The --gpu-memory-utilization every command of the seat carries; None for a seat not placed."""
        return self.launch.gpu_memory_utilization if self.launch is not None else None


class PlannedFixedSeat(PlannedSeatBase):
    """A fixed engine (issue 18): compose runs ``image`` with ``command``; the engines after it wait on ``health_url``.
    Its footprint is declared; it has no KV cache and no vLLM settings."""

    engine: Literal["fixed"] = "fixed"
    image: str | None = None
    command: list[str] = Field(default_factory=list)
    health_url: str | None = None


PlannedSeat = Annotated[PlannedVllmSeat | PlannedFixedSeat, Field(discriminator="engine")]


def seat_launch(seat: PlannedVllmSeat | PlannedFixedSeat) -> SeatLaunch:
    """What the plan starts the seat's engine with, as the change model compares it (``engine.change``)."""
    launch: VllmLaunch | FixedLaunch | None
    if isinstance(seat, PlannedVllmSeat):
        launch = seat.launch
    else:
        launch = FixedLaunch(image=seat.image, command=list(seat.command), port=seat.port, health_url=seat.health_url)
    return SeatLaunch(launch=launch, env=dict(seat.env), env_from_host=dict(seat.env_from_host), env_files=list(seat.env_files))


# The shape of version 3, kept to read it: what only its vLLM seats had (a version 1 or 2 plan wrote them on every seat,
# None on a fixed one), and what only its fixed seats had.
V3_VLLM_ONLY_FIELDS = (
    "kv_mode", "kv_cache_memory_bytes", "max_model_len", "max_new_tokens", "kv_cache_tokens", "max_concurrency", "num_gpu_blocks",
    "block_size", "vllm_args", "gpu_memory_utilization", "gpu_memory_utilization_cold_boot", "gpu_memory_utilization_rolling_restart",
    "cold_boot_headroom_bytes", "rolling_restart_headroom_bytes", "vllm", "derived_max_model_len", "yarn_max_model_len", "kv_replay",
)
V3_FIXED_ONLY_FIELDS = ("image", "command", "health_url")
# What version 4 replaced with the seat's launch and utilisation.
V3_LAUNCH_FIELDS = ("kv_mode", "vllm_args", "gpu_memory_utilization", "gpu_memory_utilization_cold_boot", "gpu_memory_utilization_rolling_restart",
                    "cold_boot_headroom_bytes", "rolling_restart_headroom_bytes", "vllm")


def older_kv_pinned(seat: dict[str, Any]) -> bool:
    """Whether a vLLM seat of a plan saved before version 4 had its KV cache pinned: its ``kv_mode`` says (version 3,
    and version 2 plans from when it was added); before that, a pinned seat is the one with a rolling-restart headroom,
    the figure only a pinned KV cache has."""
    if "kv_mode" in seat:
        return seat["kv_mode"] != "utilisation"
    return seat.get("rolling_restart_headroom_bytes") is not None


def older_launch(seat: dict[str, Any]) -> object:
    """A placed vLLM seat's launch from the figures and settings a version 1 to 3 plan gave it (what its command line
    said: the one utilisation the plan chose); None for a seat not placed."""
    settings, util = seat.get("vllm"), seat.get("gpu_memory_utilization")
    if settings is None or util is None:
        return None
    if not isinstance(settings, dict):
        return settings  # validation names it
    model, revision = settings.get("model"), None
    if isinstance(model, str):
        model, revision = model_and_revision(model)
    kv: dict[str, Any] = {"mode": "pinned", "kv_cache_memory_bytes": seat.get("kv_cache_memory_bytes"), "gpu_memory_utilization": util}
    if not older_kv_pinned(seat):
        kv = {"mode": "utilisation", "gpu_memory_utilization": util}
    return {
        "model": model, "revision": revision, "served_model_name": seat.get("served_model_name"), "port": seat.get("port"),
        "tensor_parallel_size": seat.get("tensor_parallel_size"), "max_model_len": seat.get("max_model_len"), "kv": kv,
        "max_new_tokens": seat.get("max_new_tokens"),
        **{key: settings[key] for key in ("max_num_seqs", "max_num_batched_tokens", "dtype", "kv_cache_dtype", "enforce_eager", "hf_overrides",
                                           "extra_args") if key in settings},
    }


def older_utilisation(seat: dict[str, Any]) -> dict[str, Any] | None:
    """The situations a version 2 or 3 plan checked its utilisation in (a version 1 plan has none)."""
    cold, rolling = seat.get("gpu_memory_utilization_cold_boot"), seat.get("gpu_memory_utilization_rolling_restart")
    if cold is None or rolling is None:
        return None
    return {"cold_boot": cold, "rolling_restart": rolling, "cold_boot_headroom_bytes": seat.get("cold_boot_headroom_bytes"),
            "rolling_restart_headroom_bytes": seat.get("rolling_restart_headroom_bytes")}


def upgraded_seat(seat: object) -> object:
    """One seat of a version 1 to 3 plan as version 4 has it: only its engine's fields; a vLLM seat's command settings,
    utilisation and KV mode become its ``launch`` and ``utilisation``."""
    if not isinstance(seat, dict):
        return seat  # validation names it
    if seat.get("engine") == "fixed":
        return {key: value for key, value in seat.items() if key not in V3_VLLM_ONLY_FIELDS}
    kept = {key: value for key, value in seat.items() if key not in V3_FIXED_ONLY_FIELDS and key not in V3_LAUNCH_FIELDS}
    return kept | {"launch": older_launch(seat), "utilisation": older_utilisation(seat)}


def upgraded_plan(data: dict[str, Any]) -> dict[str, Any]:
    """A version 1 to 3 plan as version 4 reads it (:func:`upgraded_seat`, each seat); a version 4 plan as it is."""
    if data.get("version") not in (1, 2, 3) or not isinstance(data.get("seats"), list):
        return data
    return data | {"seats": [upgraded_seat(seat) for seat in data["seats"]], "version": PLAN_VERSION}


class PlannedHost(BaseModel):
    """How a host starts vLLM today, from the fleet file (``hosts[].launcher``, ``image``, ``restart``): render's
    defaults for that host, each overridden by its flag."""

    launcher: list[str] = Field(default_factory=list, description="the words before the model; empty: render's default")
    image: str | None = Field(None, description="the engine image compose runs there; None: policy.image or the version's")
    restart: RestartKind | None = Field(None, description="how its engines are restarted; None: render's default")


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
    # left out of plan.json when unknown, so plans of fleets without UUIDs stay byte for byte as they were
    uuid: str | None = Field(None, exclude_if=lambda value: value is None, description="the fleet's GPU UUID (the Kubernetes claims select by it)")


class RunnerUp(BaseModel):
    assignment: dict[str, list[str]]
    worst_case_spare_bytes: int
    moves: int
    moved: list[str] = Field(default_factory=list, description="the seats that would restart elsewhere")
    why_lost: str


class PlannedFrontierPoint(BaseModel):
    max_moves: int = Field(description="the budget: at most this many moves from current_layout")
    moves: int
    worst_case_spare_bytes: int
    proven: bool = Field(description="no layout within the budget has a larger worst-case spare")
    moved: list[str] = Field(default_factory=list)


class GpuVerdict(BaseModel):
    gpu: str
    filter: str = Field(description="keep_clear, pin_or_avoid, too_small, too_few_gpus or full")
    reason: str
    short_by_bytes: int | None = None



class ShortSeat(BaseModel):
    name: str
    footprint_bytes: int
    best_gpu: str | None
    short_by_bytes: int | None
    reason: str
    rejections: list[GpuVerdict] = Field(default_factory=list)


class PlanInfeasibility(BaseModel):
    summary: str
    seats: list[ShortSeat]


RolloutAction = Literal["stop", "start", "restart"]


class StartCheck(BaseModel):
    """One GPU of a start, as the engine finds it at that step: vLLM's start-up check and room for the engine.

    vLLM 0.32's ``request_memory`` (``vllm/v1/worker/utils.py`` lines 716-772) refuses the start when the free memory
    of its snapshot (taken after its own CUDA context and NCCL buffers) is below ``ceil(total × util)``.
    """

    gpu: str = Field(description="HOST:INDEX")
    total_bytes: int
    reserved_bytes: int
    running: list[str] = Field(default_factory=list, description="the seats on this GPU at that moment, at plateau")
    free_bytes: int = Field(description="total − reserved − the running seats' footprints, before the engine's own context")
    own_context_bytes: int = Field(description="what the engine holds before vLLM's snapshot (CUDA context, NCCL)")
    gpu_memory_utilization: float | None = Field(None, description="the seat's value; None for a fixed seat (no vLLM check)")
    requested_bytes: int | None = Field(None, description="ceil(total × util), what vLLM asks for")
    footprint_bytes: int = Field(description="the engine at plateau on this GPU")
    request_margin_bytes: int | None = Field(None, description="free at the snapshot (free − own context) less the request; < 0: vLLM refuses")
    fit_margin_bytes: int = Field(description="free less the engine's footprint; < 0: the engine does not fit")
    passes: bool


class RolloutStep(BaseModel):
    """One step apply runs: stop a seat, start it on its GPUs, or restart it in place."""

    action: RolloutAction
    seat: str
    gpus: list[str] = Field(description="HOST:INDEX: where it stops (stop) or starts (start, restart)")
    checks: list[StartCheck] = Field(default_factory=list, description="a start's or restart's check on each of its GPUs")


class DownSpan(BaseModel):
    """A seat kept stopped while other seats start (a trade of GPUs leaves no order without one)."""

    seat: str
    from_step: int = Field(description="the first step (1-based) during which the seat is down")
    to_step: int = Field(description="the last step during which it is down (its start)")


class RolloutFailure(BaseModel):
    seat: str
    gpu: str
    short_by_bytes: int
    reason: str
    checks: list[StartCheck] = Field(default_factory=list)


class Rollout(BaseModel):
    """The order of the changes from the current layout to the planned one, each start checked to fit."""

    steps: list[RolloutStep] = Field(default_factory=list)
    down: list[DownSpan] = Field(default_factory=list)
    proven: bool = Field(True, description="no order keeps fewer seats down for fewer steps (False: the search ran out of its budget)")
    fails: RolloutFailure | None = Field(None, description="no order starts every seat: the start that comes closest, and its check")


# inputs.current_from of a plan whose seats' current GPUs are the fleet file's current_layout (no --current)
FLEET_CURRENT_LAYOUT = "the fleet file's current_layout"


class PlanInputs(BaseModel):
    fleet_path: str
    fleet_sha256: str
    # seat → {file: SHA-256} of the model files its facts were read from (facts.api.model_files_sha256); None in
    # plans made before it was recorded. apply refuses a plan whose fleet file or model files changed since.
    model_facts_sha256: dict[str, dict[str, str]] | None = None
    usage_path: str | None = None
    observed_path: str | None = None
    seatplan_version: str
    vllm_version: str
    # where the seats' current GPUs and commands came from (`plan --current PLAN|DIR`, or "the fleet file's
    # current_layout"); None: the plan knows nothing of what runs, so its moves are not counted against it
    current_from: str | None = None
    # what picked the layout from the spare-versus-moves frontier (the headline says it): `plan --max-moves` and
    # policy.move_cost_bytes; None in plans made before they were recorded
    max_moves: int | None = None
    move_cost_bytes: int | None = None


class Plan(BaseModel):
    kind: Literal["seatplan.plan"] = "seatplan.plan"
    # 2 added the spare-versus-moves frontier, both utilisation figures and each GPU's rejections; a version 1
    # plan reads as one without them. 3 made a seat a union on ``engine`` (PlannedVllmSeat | PlannedFixedSeat) with an
    # explicit kv_mode. 4 gave a vLLM seat its typed ``launch`` (and ``utilisation``) in place of its command line,
    # settings, utilisation figures and kv_mode; version 1 to 3 plans are read through ``upgraded_plan``.
    version: int = PLAN_VERSION
    seats: list[PlannedSeat]
    gpus: list[PlannedGpu]
    worst_case_spare_bytes: int | None
    worst_case_gpu: str | None
    optimal: bool
    method: str
    bound_bytes: int | None
    solve_seconds: float
    moves: int | None
    image: str | None = Field(None, description="the fleet's policy.image: the engine image render pins compose to")
    gateway_config: str | None = Field(None, description="the fleet's gateway.config: the gateway's config render keeps all of but the seats' routes")
    hosts: dict[str, PlannedHost] = Field(default_factory=dict, description="each host that says how it starts vLLM (launcher, image, restart)")
    # with `plan --current`: the seats whose engine this plan (re)starts (new, moved, or another command line)
    restarts: list[str] | None = None
    runner_ups: list[RunnerUp]
    frontier: list[PlannedFrontierPoint] = Field(default_factory=list, description="best worst-case spare per move budget")
    chosen_because: str | None = Field(None, description="why the layout is not the one with the largest spare (--max-moves, move_cost_bytes)")
    infeasible: PlanInfeasibility | None
    warnings: list[str]
    inputs: PlanInputs
    rollout: Rollout | None = Field(None, description="the steps from the current layout, in the order apply runs them")

    def seat(self, name: str) -> PlannedSeat | None:
        return next((seat for seat in self.seats if seat.name == name), None)

    def vllm_seats(self) -> list[PlannedVllmSeat]:
        """The vLLM seats, in plan order (the seats that have a KV cache and a vLLM command)."""
        return [seat for seat in self.seats if isinstance(seat, PlannedVllmSeat)]


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
