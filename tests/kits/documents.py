"""Whole, valid stage documents for tests that care about a few fields.

The documents are validated on read (every field the producing stage writes is required), so a test
that feeds the plan a usage report builds one here and names only the figures it is about.
"""

from __future__ import annotations

from typing import Any

from seatplan.documents.usage import ModelUsage, RunawayRule, UsageReport, UsageWindow


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
