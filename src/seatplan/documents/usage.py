"""The usage report: what LiteLLM's spend logs say the seats really carried.

``seatplan plan --usage usage.json`` reads this document. ``models`` is keyed by the name vLLM serves:
the fleet seat's ``served_model_name`` (or its name) with ``--fleet``, else LiteLLM's ``model`` column
(the backend name LiteLLM sends to vLLM), falling back to ``model_group``; the fields named in the issue
(``models.<name>.calls``, ``prompt_tokens_p99``, ``completion_tokens_p99``, ``peak_inflight_tokens``,
``peak_inflight_tokens_without_runaways``, ``peak_inflight_requests``, ``runaways``, ``rejected_rows``)
are the stable contract; the rest is detail for people.
"""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, Field

PERCENTILE_METHOD = "nearest-rank: the smallest value v with at least ceil(p*N) of the N calls at or below v"
INFLIGHT_CONVENTION = (
    "a request is in flight on [startTime, endTime); at equal timestamps ends are taken before starts, "
    "so a reply that ends as another starts never overlaps it and zero-length requests are never in flight; "
    "requests open at the window's edges count from the window start and until the window end"
)


class RunawayGroup(BaseModel):
    """Runaway replies from one sender (key alias, team, user) on one seat or over all seats."""

    key_alias: str
    team: str | None
    user: str | None
    count: int
    max_completion_tokens: int
    total_completion_tokens: int
    request_tags: list[str] = Field(description="request tags seen on these replies (User-Agent tags included)")
    example_request_ids: list[str] = Field(description="the largest replies first")


class TokenPercentiles(BaseModel):
    p50: int | None
    p90: int | None
    p99: int | None
    max: int | None


class TokenHistogram(BaseModel):
    """Calls counted by length in half-octave bins (``usage/timeline.py``): bin i holds
    [edges_tokens[i], edges_tokens[i+1]) tokens; the last bin holds edges_tokens[-1] and above."""

    edges_tokens: list[int]
    prompt_calls: list[int]
    completion_calls: list[int]


class InflightTimeline(BaseModel):
    """Tokens (prompt + completion) in flight per seat at evenly spaced instants of the window (at most 240).
    Each figure is the load at that instant; the exact peak between instants is ``peak_inflight_tokens``."""

    instants: list[datetime]
    tokens_by_seat: dict[str, list[int]]


REPLAY_METHOD = (
    "each request in flight (as for the peaks) holds its prompt from its start and its completion tokens arrive at an "
    "even rate until its end; each KV group that grows with tokens holds (tokens + block_size - 1) / block_size blocks "
    "(never less than vLLM's ceil), fixed groups their fixed blocks; no prefix-cache credit; the seat's load in whole "
    "blocks is the floor of the sum (+0.001): an upper bound on the blocks vLLM would have held for that timeline. "
    "minutes_above[i]: minutes the load was above levels_blocks[i]; waited_requests[i]: calls that started while the "
    "load, they included, was above it. A budget of N usable blocks (num_blocks - 1: vLLM's null block) held the "
    "window when N >= peak_blocks"
)


class KvReplay(BaseModel):
    """The window's requests replayed against the seat's KV blocks: a curve independent of the budget."""

    block_size_tokens: int
    token_groups: int = Field(description="KV cache groups that grow with tokens (attention layers)")
    fixed_blocks_per_request: int = Field(description="blocks every request holds whatever its length (Mamba state, "
                                          "a sliding window's extra block)")
    block_rule: str = Field(description="where the block size and groups come from: the model facts, or an assumption")
    requests: int = Field(description="requests replayed: in flight at some instant of the window")
    peak_blocks: int = Field(description="the most blocks in flight at once: the usable blocks that held the window")
    peak_at: datetime | None
    level_step_blocks: int
    levels_blocks: list[int] = Field(description="0, step, 2 x step, ... up to the first level at or above the peak")
    minutes_above: list[float]
    waited_requests: list[int]
    method: str = REPLAY_METHOD


class ModelUsage(BaseModel):
    """Figures for one seat (or one LiteLLM model name no fleet seat serves)."""

    seat: str | None = Field(description="fleet seat name; null when no fleet was given or no seat serves the name")
    max_model_len: int | None = Field(description="the seat's context length from the fleet file, when set there")
    model_names: list[str] = Field(description="LiteLLM model / model_group names counted here")
    calls: int
    errors: int | None = Field(description="status = failure; null when the logs carry no status")
    cache_hits: int | None = Field(description="cache_hit = True; null when the logs carry no cache flag")
    prompt_tokens_p50: int | None
    prompt_tokens_p90: int | None
    prompt_tokens_p99: int | None
    prompt_tokens_max: int | None
    completion_tokens_p50: int | None
    completion_tokens_p90: int | None
    completion_tokens_p99: int | None
    completion_tokens_max: int | None
    peak_inflight_tokens: int
    peak_inflight_tokens_without_runaways: int
    peak_inflight_requests: int
    peak_inflight_requests_without_runaways: int
    runaway_threshold_tokens: int | None = Field(description="completion_tokens at or above this count as a runaway")
    runaway_count: int
    runaways: list[RunawayGroup]
    rejected_rows: int
    kv_replay: KvReplay | None = Field(None, description="the requests replayed against KV blocks (per seat; "
                                       "not over all seats, whose blocks are not one pool)")
    length_histogram: TokenHistogram | None = Field(None, description="prompt and completion lengths, for pictures")


class KeyClients(BaseModel):
    """The distinct clients seen behind one key alias."""

    key_alias: str
    team: str | None
    calls: int
    seats: list[str]
    user_agents: list[str]
    client_ips: list[str]
    request_tag_sets: list[list[str]] = Field(description="distinct request tag sets, User-Agent tags left out")
    distinct_user_agents: int
    distinct_client_ips: int
    distinct_request_tag_sets: int
    shared: bool = Field(description="more than one user agent, source address or tag set uses this key")
    runaway_count: int


class RunawayRule(BaseModel):
    operator_threshold_tokens: int | None
    floor_tokens: int
    tail_multiple: float
    cap_fraction: float
    description: str


class UsageWindow(BaseModel):
    since: datetime | None
    until: datetime | None
    first_request_at: datetime | None = Field(None, description="the earliest start of a request counted (UTC)")
    last_request_at: datetime | None = Field(None, description="the latest start of a request counted (UTC)")
    days_counted_back_from: str | None = Field(None, description="with --days: what the days count back from "
                                               "(--until, the export's last request, or now for a database)")


class UsageReport(BaseModel):
    kind: Literal["seatplan.usage"] = "seatplan.usage"
    version: int = 1
    source: str = Field(description="the file read, or the DSN with its password hidden")
    source_format: Literal["postgresql", "csv", "jsonl", "litellm-api"]
    reader: str = Field("", description="what read the source: PostgreSQL, seatplan's compiled CSV reader, or DuckDB "
                        "(with why the compiled reader did not take the file, where it stopped); the figures are the same")
    window: UsageWindow
    percentile_method: str = PERCENTILE_METHOD
    inflight_convention: str = INFLIGHT_CONVENTION
    runaway_rule: RunawayRule
    models: dict[str, ModelUsage]
    overall: ModelUsage
    runaways_by_key: list[RunawayGroup]
    keys: list[KeyClients]
    shared_keys: list[str]
    unmapped_models: list[str] = Field(description="names no fleet seat serves (empty without --fleet)")
    rejected_rows: int = Field(description="rows with impossible values, counted here and left out of every figure")
    rejected_by_reason: dict[str, int]
    rejected_example_request_ids: dict[str, list[str | None]]
    inflight_timeline: InflightTimeline | None = Field(None, description="in-flight tokens over the window, for pictures")


def usage_of_seat(usage: UsageReport | None, seat_name: str, served_model_name: str) -> ModelUsage | None:
    """The one usage entry of a seat, for every stage (plan sizes from it, the report draws it): the entry keyed by
    the name the seat serves now, else the one the usage stage mapped to the seat (``seat``), else none.

    The served name comes first: the gateway routes a request by the name the engine serves, so that name's traffic
    is what the seat carries; ``seat`` records the fleet given to ``seatplan usage``, in which another seat may have
    served that name (two seats that swapped their served names since). A name equal to the seat's own name is not
    looked up: with ``--fleet`` that name is counted under the served name, and without it a key is a served name,
    perhaps another seat's."""
    if usage is None:
        return None
    if served_model_name in usage.models:
        return usage.models[served_model_name]
    return next((entry for entry in usage.models.values() if entry.seat == seat_name), None)
