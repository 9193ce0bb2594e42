"""KV budget per seat: the tokens each seat's KV cache holds against the token figures beside it."""

from __future__ import annotations

from dataclasses import dataclass

import plotly.graph_objects as go

from seatplan.documents.plan import Plan
from seatplan.documents.usage import ModelUsage, UsageReport, usage_of_seat
from seatplan.report.figures.common import Figure, Table, apply_layout, gib, whole


def replay_peak_tokens(figures: ModelUsage | None) -> int | None:
    """The week replayed against KV blocks (usage documents that carry ``kv_replay``): the most blocks in flight at
    once, in tokens (blocks × block size, per KV group). Absent from older usage documents."""
    replay = getattr(figures, "kv_replay", None)
    if replay is None:
        return None
    blocks, block_size, groups = (getattr(replay, name, None) for name in ("peak_blocks", "block_size_tokens", "token_groups"))
    if not isinstance(blocks, int) or not isinstance(block_size, int):
        return None
    return blocks * block_size // max(groups if isinstance(groups, int) else 1, 1)


@dataclass(frozen=True)
class SeatTokens:
    seat: str
    kv_budget_tokens: int
    one_request_tokens: int | None
    peak_inflight_tokens: int | None
    peak_without_runaways_tokens: int | None
    replay_peak_tokens: int | None
    model_max_tokens: int | None
    yarn_max_tokens: int | None
    output_cap_tokens: int | None


def seat_tokens(plan: Plan, usage: UsageReport | None) -> list[SeatTokens]:
    rows = []
    for seat in plan.vllm_seats():
        if seat.kv_cache_tokens is None:
            continue
        # The plan's own choice of usage entry (documents.usage.usage_of_seat), so the report draws the traffic
        # the plan sized from.
        figures = usage_of_seat(usage, seat.name, seat.served_model_name)
        rows.append(SeatTokens(
            seat=seat.name, kv_budget_tokens=seat.kv_cache_tokens, one_request_tokens=seat.max_model_len,
            peak_inflight_tokens=figures.peak_inflight_tokens if figures else None,
            peak_without_runaways_tokens=figures.peak_inflight_tokens_without_runaways if figures else None,
            replay_peak_tokens=replay_peak_tokens(figures),
            model_max_tokens=seat.derived_max_model_len, yarn_max_tokens=seat.yarn_max_model_len,
            output_cap_tokens=seat.max_new_tokens))
    return rows


TOKEN_MARKS = (  # (field, legend name, symbol, colour, what it is)
    ("one_request_tokens", "one max-length request (max_model_len)", "line-ns", "#222222", "KV one request at max_model_len needs"),
    ("peak_inflight_tokens", "observed peak in flight", "diamond", "#e45756", "the week's peak tokens in flight (usage)"),
    ("peak_without_runaways_tokens", "peak without runaways", "diamond-open", "#e45756", "the same peak without runaway replies"),
    ("replay_peak_tokens", "replayed peak", "x", "#b279a2", "the week replayed against KV blocks: most blocks in flight × block size"),
    ("model_max_tokens", "model's context (config)", "triangle-up-open", "#4c78a8", "the longest context vLLM derives from the config"),
    ("yarn_max_tokens", "with YaRN", "triangle-up", "#72b7b2", "the longest context with YaRN switched on"),
    ("output_cap_tokens", "output cap", "square-open", "#54a24b", "default output cap (max_new_tokens)"),
)


def kv_figure(plan: Plan, usage: UsageReport | None) -> Figure | None:
    rows = seat_tokens(plan, usage)
    if not rows:
        return None
    seats = [row.seat for row in rows]
    figure = go.Figure()
    figure.add_trace(go.Bar(name="KV budget (tokens it holds)", orientation="h", y=seats, x=[row.kv_budget_tokens for row in rows],
                            marker=dict(color="rgba(245, 133, 24, 0.55)", line=dict(color="#f58518", width=1)),
                            customdata=[[gib(seat.kv_cache_memory_bytes), f"{seat.kv_cache_memory_bytes or 0:,}",
                                         f"{seat.max_concurrency or 0:.2f}"] for seat in plan.vllm_seats() if seat.kv_cache_tokens is not None],
                            hovertemplate="<b>%{y}</b>: KV cache holds %{x:,} tokens<br>%{customdata[0]} GiB "
                                          "(%{customdata[1]} B), %{customdata[2]}× one max-length request<extra></extra>"))
    for field_name, legend, symbol, colour, meaning in TOKEN_MARKS:
        marked = [(row.seat, getattr(row, field_name)) for row in rows if getattr(row, field_name)]
        if not marked:
            continue
        figure.add_trace(go.Scatter(name=legend, mode="markers", y=[seat for seat, _ in marked], x=[value for _, value in marked],
                                    marker=dict(symbol=symbol, size=13 if symbol != "line-ns" else 20, color=colour,
                                                line=dict(width=2, color=colour)),
                                    hovertemplate=f"<b>%{{y}}</b>: %{{x:,}} tokens<br>{meaning}<extra></extra>"))
    # One labelled tick per power of ten (1k, 10k, 100k, 1M): plotly's default log ticks label 2 and 5 in between
    # and crowd the axis with digits.
    figure.update_xaxes(type="log", title_text="tokens (log scale)", dtick=1, tickformat="~s", minor=dict(ticks="outside", showgrid=True))
    figure.update_yaxes(autorange="reversed", type="category")
    apply_layout(figure, 140 + 30 * len(rows), barmode="overlay")
    table = Table("KV budget and the token figures beside it",
                  ["seat", "KV tokens", "max_model_len", "peak in flight", "peak w/o runaways", "replayed peak",
                   "model's context", "YaRN context", "output cap"],
                  [[row.seat, whole(row.kv_budget_tokens), whole(row.one_request_tokens), whole(row.peak_inflight_tokens),
                    whole(row.peak_without_runaways_tokens), whole(row.replay_peak_tokens), whole(row.model_max_tokens),
                    whole(row.yarn_max_tokens), whole(row.output_cap_tokens)] for row in rows])
    caption = ("Per seat, the tokens its KV cache holds (exact: vLLM's block arithmetic on the pinned bytes) against one "
               "max-length request, the week's observed peak in flight (with and without runaway replies), the model's "
               "own context and YaRN's, and the output cap. A peak right of the bar means requests waited or were preempted.")
    if usage is None:
        caption += " No usage report was given: the observed peaks are missing."
    return Figure("kv", "KV budget per seat", caption, figure, [table])
