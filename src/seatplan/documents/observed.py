"""The observe stage's documents: what the engines logged, what the GPUs showed, what it means.

``DiagnoseReport`` is the one diagnose document (``seatplan diagnose --json`` prints it, ``-o`` writes it);
its ``observed`` part, an ``ObservedFootprints``, is what ``seatplan plan --observed`` reads
(``seats: {name: {footprint_bytes, source, samples}}``); a standalone observations file (kind
``seatplan.observed``, written by older seatplans) still reads.
"""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class BootError(_Model):
    """A start-up failure vLLM explained in its log."""

    kind: Literal[
        "not_enough_kv_cache",
        "no_kv_memory",
        "max_model_len_above_derived",
        "free_memory_below_utilization",
        "profiling_free_memory_changed",
        "engine_failed",
    ]
    message: str
    where: str
    max_model_len: int | None = None
    needed_kv_bytes: int | None = None
    available_kv_bytes: int | None = None
    estimated_max_model_len: int | None = None
    derived_max_model_len: int | None = None
    free_bytes: int | None = None
    total_bytes: int | None = None
    requested_bytes: int | None = None


class Boot(_Model):
    """One engine start as its log tells it. Sizes are bytes as printed (2-decimal GiB ⇒ ±5 MiB)."""

    seat: str
    source: str = Field(description="file:first_line-last_line")
    engine: str = Field("unidentified", description="what identifies the engine in the log (stream, served name, model, port, pids)")
    fragment: bool = Field(False, description="the log holds no start of this boot (no banner, arguments or engine config)")
    started_at: datetime | None = None
    ended_at: datetime | None = Field(None, description="the time of its last line read")
    pids: list[int] = []
    version: str | None = None
    model: str | None = None
    served_model_name: str | None = None
    port: int | None = None
    tensor_parallel_size: int | None = None
    gpu_memory_utilization: float | None = None
    kv_cache_memory_bytes_pinned: int | None = None
    max_model_len: int | None = None
    max_model_len_before_auto_fit: int | None = None
    weights_bytes: int | None = None
    consumed_bytes: int | None = Field(None, description="0.27+: free-memory drop over load and profile")
    non_torch_bytes: int | None = None
    activation_peak_bytes: int | None = None
    non_kv_bytes: int | None = None
    cuda_graph_estimate_bytes: int | None = None
    cuda_graph_bytes: int | None = None
    available_kv_bytes: int | None = None
    kv_cache_tokens: int | None = None
    kv_cache_device: str | None = None
    num_gpu_blocks: int | None = None
    max_concurrency: float | None = None
    concurrency_max_model_len: int | None = None
    suggested_kv_bytes_requested: int | None = None
    suggested_kv_bytes_full_gpu: int | None = None
    free_at_start_bytes: int | None = None
    total_gpu_bytes: int | None = None
    ready: bool = False
    errors: list[BootError] = []

    @property
    def sized_by(self) -> Literal["pinned", "utilization", "unknown"]:
        if self.kv_cache_memory_bytes_pinned is not None:
            return "pinned"
        if self.available_kv_bytes is not None or self.gpu_memory_utilization is not None:
            return "utilization"
        return "unknown"


class EngineStats(_Model):
    """One periodic engine stats line, or one ``/metrics`` scrape of the same figures."""

    seat: str
    at: datetime | None = None
    where: str
    running_requests: int | None = None
    waiting_requests: int | None = None
    kv_cache_usage_pct: float | None = None
    preemptions: int | None = Field(None, description="in the log line's interval")
    preemptions_total: int | None = Field(None, description="/metrics counter since the engine started")


class StatsSummary(_Model):
    samples: int
    peak_kv_cache_usage_pct: float | None
    peak_running_requests: int | None
    peak_waiting_requests: int | None
    preemptions: int


class Finding(_Model):
    kind: Literal[
        "co_boot_race",
        "kv_drift",
        "context_cut",
        "no_kv_bytes_flag",
        "boot_failed",
        "plan_spare_missed",
        "seat_estimate_off",
    ]
    seat: str | None = None
    gpu: int | None = None
    message: str
    fix: str
    pin_kv_cache_memory_bytes: int | None = None
    evidence: list[str] = []


class Step(_Model):
    at: datetime
    delta_mib: float
    before_mib: float
    after_mib: float
    window_start: datetime | None = Field(None, description="averaged history: the restart lies in this span")
    window_end: datetime | None = None
    inferred: bool = Field(False, description="the time is fitted inside the span, not read from a boot line")
    evidence: str | None = None


class Creep(_Model):
    start: datetime
    plateau_at: datetime
    rise_mib: float = Field(description="plateau minus the first full post-boot level")
    hours_to_plateau: float
    hours_to_90pct: float | None = Field(None, description="from the restart to 90 % of the rise (None while still rising)")
    levelled_off: bool = True
    resolved: bool = Field(True, description="averaged history: enough records see the rise to size it")
    basis: str | None = None
    shape: Literal["linear", "exponential"] | None = Field(None, description="averaged history: the fitted creep's shape")
    time_constant_hours: float | None = Field(None, description="linear: the ramp's length; exponential: its time constant")
    rise_low_mib: float | None = Field(None, description="averaged history: the smallest rise of the fits the records cannot tell apart")
    rise_high_mib: float | None = Field(None, description="averaged history: the largest rise of those fits, at most the plateau (no level is below 0)")
    plateau_earliest: datetime | None = Field(None, description="averaged history: the earliest plateau time of those fits")
    plateau_latest: datetime | None = Field(None, description="averaged history: the latest plateau time of those fits")
    rise_determined: bool | None = Field(None, description="averaged history: those fits' rises lie within 10 % of rise_mib "
                                         "(false: the records cannot size the creep better than rise_low_mib … rise_high_mib)")
    plateau_at_determined: bool | None = Field(None, description="averaged history: those fits' plateau times lie within one record "
                                               "(of the finest type there) of plateau_at")


class Segment(_Model):
    """A stretch between two steps: one boot's life on that GPU."""

    start: datetime
    end: datetime
    level_after_boot_mib: float
    plateau_used_mib: float
    plateau_uncertainty_mib: float | None = Field(None, description="± MiB of the plateau (fit and jitter)")
    still_to_rise_mib: float | None = Field(None, description="what the fitted creep still adds after the history's end")
    creep: Creep | None = None


class PlanCheck(_Model):
    planned_used_mib: float
    planned_spare_mib: float
    observed_used_mib: float
    observed_spare_mib: float
    miss_mib: float = Field(description="observed minus planned use; > 0 means the plan under-estimated")
    spare_held: bool
    seats_to_correct: list[str] = []


class UsedSeries(_Model):
    """Used memory for pictures: evenly spaced bins (at most 400) with the lowest, median and highest reading."""

    bin_seconds: int
    starts: list[datetime]
    min_mib: list[float]
    median_mib: list[float]
    max_mib: list[float]


class GpuReport(_Model):
    host: str | None = None
    index: int
    samples: int
    start: datetime
    end: datetime
    gaps: int
    history: list[str] = Field([], description="averaged history: which record type covers which stretch")
    total_mib: float | None = None
    steps: list[Step] = []
    creep: Creep | None = None
    segments: list[Segment] = []
    plateau_used_mib: float
    plateau_uncertainty_mib: float | None = Field(None, description="± MiB of the plateau (fit and jitter)")
    still_to_rise_mib: float | None = Field(None, description="what the fitted creep still adds after the history's end")
    plateau_free_mib: float | None = None
    free_after_boot_mib: float | None = None
    free_drop_after_boot_mib: float | None = Field(None, description="free just after the last boot minus free at plateau")
    plan: PlanCheck | None = None
    series: UsedSeries | None = Field(None, description="used memory over time, reduced for pictures")


class ObservedSeat(_Model):
    footprint_bytes: int = Field(description="per GPU, at plateau (diagnose) or as read at one moment (adopt: see at_plateau)")
    source: str
    samples: int
    kv_cache_memory_bytes: int | None = Field(None, description="the KV the seat ran with (its latest ready boot)")
    observed_at: datetime | None = Field(None, description="when the figure was read (adopt: the reading's time, or its file's)")
    at_plateau: bool = Field(True, description="false: one reading of a running engine (adopt), not a plateau a history showed")
    max_model_len: int | None = Field(None, description="the context it ran with, where known (adopt: the engine's or its command line's)")


class ObservedGpu(_Model):
    """What one GPU held in all, where it was read (adopt: nvidia-smi's memory.used; plan compares its estimate with it)."""

    host: str | None = Field(description="None: the fleet's only host")
    index: int
    used_bytes: int
    source: str
    observed_at: datetime | None = None


class SeatReport(_Model):
    name: str
    boots: list[Boot] = []
    stats: StatsSummary | None = None
    observed: ObservedSeat | None = None
    planned_footprint_bytes: int | None = None
    findings: list[Finding] = []


class RejectedInput(_Model):
    """Lines or rows of an input left out because they could not be read; the rest of the input still counts."""

    where: str = Field(description="the file and the first rejected line or row")
    reason: str
    count: int


class GpuVerdict(_Model):
    """The plateau check's last word on one GPU of the plan."""

    host: str | None
    index: int
    status: Literal["pass", "fail", "unchecked"]
    planned_spare_mib: float | None = None
    observed_spare_mib: float | None = None
    plateau_uncertainty_mib: float | None = Field(None, description="± MiB of the observed plateau (so of its spare)")
    straddles: bool = Field(False, description="the observed spare's ± band crosses the verdict's line: it could go either way")
    reason: str


class GpuCorrection(_Model):
    """Memory a GPU held at plateau beyond its seats' footprints, kept at GPU level (no evidence for one seat)."""

    host: str | None
    index: int
    extra_bytes: int = Field(description="observed plateau − reserved − Σ seat footprints (observed where attributed, else planned)")
    seats: list[str]
    source: str


class ObservedFootprints(_Model):
    """The observations file for ``seatplan plan --observed``."""

    kind: Literal["seatplan.observed"] = "seatplan.observed"
    version: int = 1
    generated_at: datetime
    seats: dict[str, ObservedSeat] = {}
    gpus: list[dict[str, float | int | str | None]] = []
    gpu_corrections: list[GpuCorrection] = Field([], description="plan --observed adds extra_bytes > 0 to that GPU's reserved memory")
    engines: dict[str, StatsSummary] = Field({}, description="each seat's own record of how full its KV cache got")
    gpus_used: list[ObservedGpu] = Field([], description="each GPU's memory in use when it was read (adopt: nvidia-smi memory.used); "
                                         "plan warns where its estimate for today's layout differs")
    source: Literal["diagnose", "adopt"] = Field("diagnose", description="the command that wrote it")


class DiagnoseReport(_Model):
    """The one diagnose document: ``--json`` prints it, ``-o`` writes it; ``plan --observed`` reads its ``observed``
    part, ``report --diagnose`` all of it."""

    kind: Literal["seatplan.diagnose"] = "seatplan.diagnose"
    version: int = 1
    gpus: list[GpuReport] = []
    verdicts: list[GpuVerdict] = Field([], description="with --plan: pass/fail/unchecked per planned GPU")
    gpu_corrections: list[GpuCorrection] = []
    seats: list[SeatReport] = []
    findings: list[Finding] = []
    rejected_inputs: list[RejectedInput] = []
    observed: ObservedFootprints | None = Field(None, description="the observations plan --observed uses instead of estimates")


class ProcessSample(_Model):
    """One per-process reading (nvidia-smi --query-compute-apps)."""

    at: datetime | None = None
    pid: int
    process_name: str
    used_mib: float
    gpu_uuid: str | None = None
    gpu_index: int | None = None
