"""Whole, valid stage documents for tests that care about a few fields.

The documents are validated on read (every field the producing stage writes is required), so a test
that feeds the plan a usage report, or diagnose a plan, builds one here and names only the figures it is about.
"""

from __future__ import annotations

from typing import Any

from seatplan.documents.launch import Pinned
from seatplan.documents.plan import Plan, PlannedGpu, PlannedSeat, PlannedVllmSeat
from seatplan.documents.usage import ModelUsage, RunawayRule, UsageReport, UsageWindow
from seatplan.engine.command import engine_command


def model_usage(**fields: Any) -> ModelUsage:
    base: dict[str, Any] = {
        "seat": None, "max_model_len": None, "model_names": [], "calls": 0, "errors": None, "cache_hits": None,
        "prompt_tokens_p50": None, "prompt_tokens_p90": None, "prompt_tokens_p99": None, "prompt_tokens_max": None,
        "completion_tokens_p50": None, "completion_tokens_p90": None, "completion_tokens_p99": None,
        "completion_tokens_max": None, "peak_inflight_tokens": 0, "peak_inflight_tokens_without_runaways": 0,
        "peak_inflight_requests": 0, "peak_inflight_requests_without_runaways": 0, "runaway_threshold_tokens": None,
        "runaway_count": 0, "runaways": [], "rejected_rows": 0,
    }
    return ModelUsage.model_validate(base | fields)


def runaway(key_alias: str, count: int, max_completion_tokens: int, team: str | None = None) -> dict[str, Any]:
    return {"key_alias": key_alias, "team": team, "user": None, "count": count,
            "max_completion_tokens": max_completion_tokens, "total_completion_tokens": count * max_completion_tokens,
            "request_tags": [], "example_request_ids": []}


def usage_report(models: dict[str, ModelUsage], **fields: Any) -> UsageReport:
    rule = RunawayRule(operator_threshold_tokens=None, floor_tokens=0, tail_multiple=0.0, cap_fraction=0.0, description="")
    base: dict[str, Any] = {
        "source": "test", "source_format": "csv", "window": UsageWindow(since=None, until=None), "runaway_rule": rule,
        "models": models, "overall": model_usage(), "runaways_by_key": [], "keys": [], "shared_keys": [],
        "unmapped_models": [], "rejected_rows": 0, "rejected_by_reason": {}, "rejected_example_request_ids": {},
    }
    return UsageReport.model_validate(base | fields)


def planned_seat(name: str, gpus: list[str], footprint_bytes: int, **fields: Any) -> PlannedVllmSeat:
    """A vLLM seat of a plan, placed on ``gpus`` ("host:index"), with nothing but its footprint sized."""
    base: dict[str, Any] = {
        "name": name, "engine": "vllm", "model": name, "served_model_name": name, "port": 8000, "gpus": gpus,
        "tensor_parallel_size": len(gpus), "kv_cache_memory_bytes": None, "max_model_len": None, "max_new_tokens": None,
        "kv_cache_tokens": None, "max_concurrency": None, "footprint_bytes": footprint_bytes, "footprint_basis": "estimate",
        "footprint_parts": [], "env": {}, "boot_order": 0,
        "explanation": [], "warnings": [], "host": gpus[0].rsplit(":", 1)[0] if gpus else None,
    }
    return PlannedVllmSeat.model_validate(base | fields)


def planned_gpu(host: str, index: int, used_bytes: int, spare_bytes: int, seats: list[str], **fields: Any) -> PlannedGpu:
    base: dict[str, Any] = {
        "host": host, "index": index, "name": "H200", "total_bytes": used_bytes + spare_bytes, "reserved_bytes": 0,
        "keep_clear": False, "seats": seats, "used_bytes": used_bytes, "spare_bytes": spare_bytes, "headroom_bytes": 0,
    }
    return PlannedGpu.model_validate(base | fields)


def plan_document(seats: list[PlannedSeat], gpus: list[PlannedGpu], **fields: Any) -> Plan:
    """A whole plan of these seats and GPUs; its worst-case spare is the GPUs' smallest."""
    worst = min(gpus, key=lambda gpu: gpu.spare_bytes, default=None)
    base: dict[str, Any] = {
        "seats": seats, "gpus": gpus, "worst_case_spare_bytes": worst.spare_bytes if worst else None,
        "worst_case_gpu": f"{worst.host}:{worst.index}" if worst else None, "optimal": True, "method": "test",
        "bound_bytes": None, "solve_seconds": 0.0, "moves": None, "runner_ups": [], "infeasible": None, "warnings": [],
        "inputs": {"fleet_path": "fleet.yaml", "fleet_sha256": "0" * 64, "seatplan_version": "test", "vllm_version": "0.32"},
    }
    return Plan.model_validate(base | fields)


def command_of(seat: PlannedSeat) -> list[str]:
    """The command the plan shows for a seat (``engine.command`` of its launch, default launcher); none for a fixed seat
    or one not placed."""
    return engine_command(seat.launch) if isinstance(seat, PlannedVllmSeat) and seat.launch is not None else []


# the seat's figures its launch repeats (documents.plan.PlannedVllmSeat refuses the two apart)
LAUNCH_MIRRORS = ("served_model_name", "port", "tensor_parallel_size", "max_model_len", "max_new_tokens")


def edited_seat(seat: PlannedSeat, **fields: Any) -> PlannedSeat:
    """A planned seat with ``fields`` changed behind the planner's back, as an operator's edit of plan.json would, in
    the seat and in its launch alike (a KV figure or the utilisation in the launch's KV sizing too)."""
    if not isinstance(seat, PlannedVllmSeat) or seat.launch is None:
        return seat.model_copy(update=fields)
    launch_fields = {key: value for key, value in fields.items() if key in LAUNCH_MIRRORS or key in type(seat.launch).model_fields}
    kv: dict[str, Any] = {key: fields[key] for key in ("gpu_memory_utilization", "kv_cache_memory_bytes") if key in fields}
    if not isinstance(seat.launch.kv, Pinned):
        kv.pop("kv_cache_memory_bytes", None)
    if kv:
        launch_fields["kv"] = seat.launch.kv.model_copy(update=kv)
    seat_fields = {key: value for key, value in fields.items() if key in type(seat).model_fields and key != "launch"}
    return seat.model_copy(update=seat_fields | {"launch": seat.launch.model_copy(update=launch_fields)})
