"""The report's figures and the compact shapes the usage and diagnose documents carry for them, held to their
definitions on the walkthrough's week and on hand-made cases."""

from __future__ import annotations

from datetime import datetime, timedelta
from types import SimpleNamespace

import numpy as np
import pytest

from kits.documents import model_usage, plan_document, planned_gpu, planned_seat, usage_report
from kits.night import NightDocuments
from seatplan.documents.usage import usage_of_seat
from seatplan.observe.detect import GpuSeries
from seatplan.observe.series import SERIES_BINS, compact_series
from seatplan.report.figures import all_figures
from seatplan.report.figures.frontier import frontier_figure, frontier_points
from seatplan.report.figures.kv import kv_figure, replay_peak_tokens, seat_tokens
from seatplan.report.figures.memory import (
    OVERHEAD,
    memory_figure,
    runner_up_seats,
    seat_keys,
    stack_segments,
)
from seatplan.report.inputs import read_inputs
from seatplan.units import GiB
from seatplan.usage.loads import RequestRows
from seatplan.usage.timeline import TOKEN_BIN_EDGES, inflight_timeline, token_histograms


def rows_of(starts, ends, prompts, completions, seats=None, names=("a",)) -> RequestRows:
    count = len(starts)
    return RequestRows(
        seat_names=tuple(names), seat=np.asarray(seats if seats is not None else [0] * count, dtype=np.int32),
        start_us=np.asarray(starts, dtype=np.int64), end_us=np.asarray(ends, dtype=np.int64),
        prompt_tokens=np.asarray(prompts, dtype=np.int64), completion_tokens=np.asarray(completions, dtype=np.int64),
        starts_in_window=np.ones(count, dtype=bool), included=np.ones(count, dtype=bool))


def test_inflight_timeline_is_the_load_at_each_instant():
    rng = np.random.default_rng(3)
    starts = rng.integers(0, 10_000_000, 400)
    ends = starts + rng.integers(0, 2_000_000, 400)
    prompts, completions = rng.integers(1, 5000, 400), rng.integers(0, 3000, 400)
    seats = rng.integers(0, 3, 400)
    timeline = inflight_timeline(rows_of(starts, ends, prompts, completions, seats, ("a", "b", "c")), 0, 12_000_000, instants=50)
    origin = datetime(1970, 1, 1)
    for name, seat in (("a", 0), ("b", 1), ("c", 2)):
        for instant, load in zip(timeline.instants, timeline.tokens_by_seat[name]):
            at_us = (instant - origin) // timedelta(microseconds=1)
            mine = seats == seat
            live = mine & (starts <= at_us) & (at_us < ends)
            assert load == int((prompts[live] + completions[live]).sum())
    assert len(timeline.instants) <= 50


def test_token_histograms_count_every_call_in_half_octave_bins():
    rows = rows_of([0, 1, 2, 3], [5, 5, 5, 5], [0, 1, 1000, 3_000_000], [7, 8, 16, 262_000])
    histogram = token_histograms(rows)["a"]
    assert sum(histogram.prompt_calls) == 4 and sum(histogram.completion_calls) == 4
    edges = list(TOKEN_BIN_EDGES)
    assert histogram.prompt_calls[edges.index(0)] == 1 and histogram.prompt_calls[edges.index(1)] == 1
    assert histogram.prompt_calls[-1] == 1  # above the last edge: the open-ended bin
    assert histogram.completion_calls[edges.index(6)] == 1  # 7 is in [6, 8)
    assert histogram.completion_calls[edges.index(8)] == 1 and histogram.completion_calls[edges.index(16)] == 1


def test_compact_series_is_bounded_and_keeps_the_extremes():
    times = np.arange(0, 365 * 86400, 60, dtype=np.float64)  # a year of 1-minute samples
    used = np.full(len(times), 50_000.0)
    used[123_456] = 0.0  # a restart
    used[300_000] = 90_000.0  # a spike
    series = compact_series(GpuSeries(index=0, times_s=times, used_mib=used))
    assert len(series.starts) <= SERIES_BINS
    assert min(series.min_mib) == 0.0 and max(series.max_mib) == 90_000.0
    assert set(series.median_mib) == {50_000.0}


def test_memory_bars_stack_every_part_of_every_seat_to_the_plans_use(night: NightDocuments):
    inputs = read_inputs(night.plan)
    plan = inputs.plan
    chosen = {f"{gpu.host}:{gpu.index}": gpu.seats for gpu in plan.gpus}
    segments = stack_segments(plan, chosen)
    for gpu in plan.gpus:
        label = f"{gpu.host}:{gpu.index}"
        assert sum(segment.bytes for segment in segments if segment.gpu == label) == gpu.used_bytes
    # Every part drawn once; the small ones summed into their seat's one overhead segment (issue 32: 1-2 px slivers).
    drawn = sorted((segment.gpu, segment.seat, part.name) for segment in segments for part in segment.parts)
    assert drawn == sorted((gpu, name, part.name) for gpu, seats in chosen.items() for name in seats
                           for part in plan.seat(name).footprint_parts)
    for segment in segments:
        assert segment.kind == OVERHEAD or [part.name for part in segment.parts] == [segment.kind]
    assert len({(segment.gpu, segment.seat, segment.kind) for segment in segments}) == len(segments)
    overhead = [segment for segment in segments if segment.kind == OVERHEAD]
    assert overhead and all(len(segment.parts) >= 2 for segment in overhead)
    figure = memory_figure(plan).figure
    spare = next(trace for trace in figure.data if trace.name == "spare at plateau" and trace.xaxis == "x")
    # issue 21: a keep-clear GPU without seats is drawn as kept clear, not as spare the plan could count on
    clear = [gpu for gpu in plan.gpus if gpu.keep_clear and not gpu.seats]
    assert clear, "the demo fleet keeps GPU 3 clear"
    assert [round(value * GiB) for value in spare.x] == pytest.approx([gpu.spare_bytes for gpu in plan.gpus if gpu not in clear], abs=2)
    assert list(spare.y) == [f"{gpu.host}:{gpu.index}" for gpu in plan.gpus if gpu not in clear]
    kept = next(trace for trace in figure.data if trace.name.startswith("kept clear") and trace.xaxis == "x")
    assert list(kept.y) == [f"{gpu.host}:{gpu.index}" for gpu in clear] and set(kept.text) == {"kept clear"}
    # Estimates are hatched, each kind with its own hatch (told apart without colour); exact parts solid.
    kv = next(trace for trace in figure.data if trace.name == "KV cache" and trace.xaxis == "x")
    assert set(kv.marker.pattern.shape) == {""}
    hatches = {}
    for trace in figure.data:
        if trace.type == "bar" and trace.xaxis == "x" and isinstance(trace.marker.pattern.shape, tuple) and not trace.name.startswith("kept clear"):
            shapes = set(trace.marker.pattern.shape) - {""}
            if shapes:
                hatches[trace.name] = shapes
    assert {"weights", "overhead (small parts summed)"} <= set(hatches)
    assert len({frozenset(shapes) for shapes in hatches.values()}) == len(hatches)  # no two estimated kinds share a hatch
    assert runner_up_seats(plan) is not None and len({trace.xaxis for trace in figure.data}) == 2


def test_memory_labels_the_objective_and_every_seat(night: NightDocuments):
    """Issue 32: the worst-case spare (what the plan maximises) is written on the worst GPU, every other GPU's spare
    beside its bar, and every seat on every GPU is outlined and named (or keyed, the key in the caption)."""
    plan = read_inputs(night.plan).plan
    built = memory_figure(plan)
    figure = built.figure
    rows = [f"{gpu.host}:{gpu.index}" for gpu in plan.gpus]
    chosen = [note for note in figure.layout.annotations if note.xref == "x" and note.yref == "y"]
    spares = {rows[note.y]: note.text for note in chosen if "spare" in note.text}
    assert spares[plan.worst_case_gpu] == f"<b>worst-case spare<br>{plan.worst_case_spare_bytes / GiB:.2f} GiB</b>"
    open_gpus = [gpu for gpu in plan.gpus if gpu.seats or not gpu.keep_clear]
    assert sorted(spares) == sorted(f"{gpu.host}:{gpu.index}" for gpu in open_gpus)
    for gpu in open_gpus:
        if f"{gpu.host}:{gpu.index}" != plan.worst_case_gpu:
            assert spares[f"{gpu.host}:{gpu.index}"] == f"spare {gpu.spare_bytes / GiB:.2f} GiB"
    keys = seat_keys(plan)
    named = {key: seat for seat, key in keys.items()}
    labels = [(rows[round(note.y + 0.5)], note.text) for note in chosen if "spare" not in note.text]
    expected = sorted((f"{gpu.host}:{gpu.index}", seat) for gpu in plan.gpus for seat in gpu.seats)
    assert sorted((gpu, text if text in keys else named[text]) for gpu, text in labels) == expected
    for _, text in labels:
        if text not in keys:  # a key: the caption says whose
            assert f"{text} = {named[text]}" in built.caption
    outlines = next(trace for trace in figure.data if trace.name.startswith("seat (") and trace.xaxis == "x")
    assert sorted(zip(outlines.y, (data[0] for data in outlines.customdata))) == expected
    assert outlines.marker.line.width >= 2


def test_frontier_drawn_when_the_plan_has_one_and_said_missing_otherwise(night: NightDocuments):
    inputs = read_inputs(night.plan)
    older = {key: value for key, value in inputs.plan_raw.items() if key != "frontier"}  # plans before the frontier
    without = frontier_figure(inputs.plan, older)
    assert "no spare-versus-moves frontier" in without.caption
    assert [trace.name for trace in without.figure.data] == ["runner-up layouts", "chosen plan"]
    raw = {**older, "frontier": [{"max_moves": 0, "moves": 0, "worst_case_spare_bytes": 3 * GiB},
                                 {"max_moves": 2, "moves": 1, "worst_case_spare_bytes": 5 * GiB}]}
    assert frontier_points(raw) == [(0, 3 * GiB), (2, 5 * GiB)]
    drawn = frontier_figure(inputs.plan, raw)
    assert drawn.figure.data[0].name.startswith("best spare") and list(drawn.figure.data[0].y) == [3.0, 5.0]
    # The plan's own frontier, as seatplan plan writes it.
    own = frontier_points(inputs.plan_raw)
    assert own and own == sorted((point["max_moves"], point["worst_case_spare_bytes"]) for point in inputs.plan_raw["frontier"])


def test_every_figure_has_its_numbers_in_a_table_or_on_hover(night: NightDocuments):
    inputs = read_inputs(night.plan, night.usage, night.diagnose, night.observed)
    figures = all_figures(inputs.plan, inputs.plan_raw, inputs.usage, inputs.diagnose, inputs.observed)
    assert [figure.key for figure in figures] == ["memory", "frontier", "kv", "history", "lengths", "inflight", "runaways"]
    for figure in figures:
        if figure.figure is None:
            continue
        for trace in figure.figure.data:
            assert trace.hovertemplate or trace.hoverinfo == "skip", (figure.key, trace.name)
    kv_table = next(figure for figure in figures if figure.key == "kv").tables[0]
    by_seat = {row[0]: row for row in kv_table.rows}
    assert by_seat["qwen3-30b-a3b"][3] == f"{inputs.usage.models['Qwen/Qwen3-30B-A3B-Instruct-2507'].peak_inflight_tokens:,}"
    runaway_table = next(figure for figure in figures if figure.key == "runaways").tables[0]
    assert runaway_table.rows[0][0] == "ci-evals" and runaway_table.rows[0][3] == "9"


def test_replayed_peak_read_where_the_usage_document_has_one():
    assert replay_peak_tokens(SimpleNamespace()) is None  # usage documents without a replay
    replay = SimpleNamespace(peak_blocks=1_200, block_size_tokens=16, token_groups=1)
    assert replay_peak_tokens(SimpleNamespace(kv_replay=replay)) == 19_200


def test_rows_left_out_never_reach_the_shapes():
    """Rejected rows keep placeholders (the smallest int64) in the arrays; they are neither counted nor drawn."""
    low = np.iinfo(np.int64).min
    rows = rows_of([0, low], [10, low], [5, low], [3, low])
    rows = RequestRows(**{**rows.__dict__, "starts_in_window": np.array([True, False]), "included": np.array([True, False])})
    assert sum(token_histograms(rows)["a"].prompt_calls) == 1
    timeline = inflight_timeline(rows, None, None, instants=5)
    assert max(timeline.tokens_by_seat["a"]) == 8


def test_spare_versus_moves_starts_at_zero_and_kv_ticks_are_powers_of_ten(night: NightDocuments):
    """A 76 MiB step between frontier points must not look like a cliff (the axis starts at 0), and the KV axis
    labels each power of ten once (1k, 10k, 100k) instead of plotly's crowded 2 and 5 ticks."""
    inputs = read_inputs(night.plan, night.usage)
    frontier = frontier_figure(inputs.plan, inputs.plan_raw).figure
    assert frontier.layout.yaxis.rangemode == "tozero"
    kv = kv_figure(inputs.plan, inputs.usage).figure
    assert kv.layout.xaxis.type == "log" and kv.layout.xaxis.dtick == 1 and kv.layout.xaxis.tickformat == "~s"


def test_kv_figure_draws_the_traffic_the_plan_sized_from_and_the_planned_contexts():
    """Issue 31: the report matched a seat's usage entry by the usage stage's seat mapping first, the plan by the served
    name first; for two seats that swapped served names since ``usage --fleet`` ran, the KV figure drew one seat with
    the other's traffic. Both now ask documents.usage.usage_of_seat. The model's and YaRN's context come from the
    planned seat's typed fields, not from an explanation line's inputs."""
    seats = [planned_seat(name, [f"box:{index}"], GiB, served_model_name=served, kv_cache_tokens=1000 * (index + 1),
                          derived_max_model_len=32768 * (index + 1), yarn_max_model_len=131072 if index else None)
             for index, (name, served) in enumerate((("a", "m2"), ("b", "m1")))]
    plan = plan_document(seats, [planned_gpu("box", index, GiB, GiB, [seat.name]) for index, seat in enumerate(seats)])
    usage = usage_report({"m1": model_usage(seat="a", peak_inflight_tokens=111), "m2": model_usage(seat="b", peak_inflight_tokens=222)})
    rows = {row.seat: row for row in seat_tokens(plan, usage)}
    for seat in seats:
        assert rows[seat.name].peak_inflight_tokens == usage_of_seat(usage, seat.name, seat.served_model_name).peak_inflight_tokens
        assert rows[seat.name].model_max_tokens == seat.derived_max_model_len
        assert rows[seat.name].yarn_max_tokens == seat.yarn_max_model_len
    assert (rows["a"].peak_inflight_tokens, rows["b"].peak_inflight_tokens) == (222, 111)
    peaks = next(trace for trace in kv_figure(plan, usage).figure.data if trace.name == "observed peak in flight")
    assert dict(zip(peaks.y, peaks.x)) == {"a": 222, "b": 111}
