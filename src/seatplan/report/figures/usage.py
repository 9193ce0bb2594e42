"""The week's usage: prompt and completion lengths, tokens in flight, runaway replies by key."""

from __future__ import annotations

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from seatplan.documents.usage import ModelUsage, UsageReport
from seatplan.report.figures.common import Figure, Table, apply_layout, whole

SEAT_TOKEN_COLOURS = ("#4c78a8", "#f58518", "#54a24b", "#e45756", "#72b7b2", "#b279a2", "#ff9da6", "#9d755d", "#eeca3b", "#bab0ac")
VISIBLE_SEAT_LINES = 8  # in-flight lines shown at first; the rest are one legend click away


def _bin_labels(edges: list[int]) -> list[str]:
    labels = []
    for position, low in enumerate(edges):
        high = edges[position + 1] - 1 if position + 1 < len(edges) else None
        labels.append(f"{_short(low)}+" if high is None else _short(low) if high == low else f"{_short(low)}–{_short(high)}")
    return labels


def _short(tokens: int) -> str:
    for size, suffix in ((1 << 20, "M"), (1 << 10, "k")):
        if tokens >= size:
            return f"{tokens / size:.3g}{suffix}"
    return str(tokens)


def _seat_name(name: str, figures: ModelUsage) -> str:
    return figures.seat or name


def lengths_figure(usage: UsageReport | None) -> Figure | None:
    if usage is None:
        return None
    seats = [(name, figures) for name, figures in usage.models.items() if figures.length_histogram is not None]
    histograms = [figures.length_histogram for _, figures in seats if figures.length_histogram is not None]
    if not histograms:
        return None
    edges = histograms[0].edges_tokens
    used_bins = [position for position in range(len(edges))
                 if any(histogram.prompt_calls[position] or histogram.completion_calls[position] for histogram in histograms)]
    low, high = min(used_bins), max(used_bins)
    labels = _bin_labels(edges)[low:high + 1]
    names = [_seat_name(name, figures) for name, figures in seats]
    figure = make_subplots(rows=1, cols=2, shared_yaxes=True, horizontal_spacing=0.04,
                           subplot_titles=["prompt tokens", "completion tokens"])
    for column, attribute in ((1, "prompt_calls"), (2, "completion_calls")):
        counts = [getattr(histogram, attribute)[low:high + 1] for histogram in histograms]
        shares = [[100 * count / max(sum(track), 1) for count in track] for track in counts]
        figure.add_trace(go.Heatmap(z=shares, x=labels, y=names, colorscale="Blues", zmin=0, showscale=column == 2,
                                    colorbar=dict(title=dict(text="% of calls", side="right")), customdata=counts, xgap=1, ygap=1,
                                    hovertemplate="<b>%{y}</b>, %{x} tokens: %{customdata:,} calls (%{z:.1f} %)<extra></extra>"),
                         row=1, col=column)
    figure.update_yaxes(autorange="reversed", type="category")
    figure.update_xaxes(type="category", tickangle=-90)  # upright labels never reach into their neighbours' boxes
    apply_layout(figure, 170 + 30 * len(seats))
    table = Table("Token percentiles per seat (nearest rank)",
                  ["seat", "calls", "prompt p50", "p90", "p99", "max", "completion p50", "p90", "p99", "max", "runaways"],
                  [[name, whole(figures.calls), whole(figures.prompt_tokens_p50), whole(figures.prompt_tokens_p90),
                    whole(figures.prompt_tokens_p99), whole(figures.prompt_tokens_max), whole(figures.completion_tokens_p50),
                    whole(figures.completion_tokens_p90), whole(figures.completion_tokens_p99),
                    whole(figures.completion_tokens_max), whole(figures.runaway_count)]
                   for name, (_, figures) in zip(names, seats)])
    caption = ("Where each seat's calls fall by length (half-octave bins; colour = share of that seat's calls, hover for the "
               "count). A lone cell far right in completions is runaway replies.")
    return Figure("lengths", "Prompt and completion lengths", caption, figure, [table])


def inflight_figure(usage: UsageReport | None) -> Figure | None:
    if usage is None or usage.inflight_timeline is None or not usage.inflight_timeline.tokens_by_seat:
        return None
    timeline = usage.inflight_timeline
    seat_of = {name: _seat_name(name, figures) for name, figures in usage.models.items()}
    tracks = sorted(timeline.tokens_by_seat.items(), key=lambda item: -max(item[1]))
    figure = go.Figure()
    for rank, (name, tokens) in enumerate(tracks):
        seat = seat_of.get(name, name)
        peak = usage.models[name].peak_inflight_tokens if name in usage.models else None
        figure.add_trace(go.Scatter(name=seat, x=timeline.instants, y=tokens, mode="lines",
                                    line=dict(width=1.5, color=SEAT_TOKEN_COLOURS[rank % len(SEAT_TOKEN_COLOURS)]),
                                    visible=True if rank < VISIBLE_SEAT_LINES else "legendonly",
                                    hovertemplate=f"<b>{seat}</b> %{{x}}<br>%{{y:,}} tokens in flight"
                                                  f"{'' if peak is None else f' (exact peak {peak:,})'}<extra></extra>"))
    figure.update_yaxes(title_text="tokens in flight", rangemode="tozero")
    apply_layout(figure, 380)
    caption = (f"Tokens (prompt + completion) in flight per seat at {len(timeline.instants)} evenly spaced instants of the "
               "window; the exact peak between instants is in the KV table. "
               + (f"Seats beyond the {VISIBLE_SEAT_LINES} busiest are hidden: click them in the legend." if len(tracks) > VISIBLE_SEAT_LINES else ""))
    return Figure("inflight", "Tokens in flight over the window", caption, figure, [])


def runaway_figure(usage: UsageReport | None) -> Figure | None:
    if usage is None:
        return None
    groups = usage.runaways_by_key
    rows = [[group.key_alias, group.team or "-", group.user or "-", whole(group.count), whole(group.max_completion_tokens),
             whole(group.total_completion_tokens), ", ".join(group.request_tags) or "-", ", ".join(group.example_request_ids[:3])]
            for group in groups]
    table = Table("Runaway replies by key", ["key alias", "team", "user", "replies", "largest reply", "tokens in all",
                                             "request tags", "example request ids"], rows)
    figure = None
    if groups:
        figure = go.Figure(go.Bar(orientation="h", y=[group.key_alias for group in groups], x=[group.count for group in groups],
                                  marker=dict(color="#e45756"),
                                  customdata=[[group.team or "-", f"{group.max_completion_tokens:,}"] for group in groups],
                                  hovertemplate="<b>%{y}</b> (team %{customdata[0]}): %{x} runaway replies, the largest "
                                                "%{customdata[1]} tokens<extra></extra>"))
        figure.update_yaxes(autorange="reversed", type="category")
        figure.update_xaxes(title_text="runaway replies in the window")
        apply_layout(figure, max(220, 120 + 30 * len(groups)), showlegend=False)
    threshold = usage.runaway_rule.description
    caption = f"Replies at or above each seat's runaway threshold, grouped by the key that asked. Rule: {threshold}"
    if not groups:
        caption = "No runaway replies in the window. Rule: " + threshold
    return Figure("runaways", "Runaway replies by key", caption, figure, [table])
