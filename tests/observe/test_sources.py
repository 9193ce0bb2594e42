"""Readers on the faithful samples (tests/fixtures/formats) and on generated files with known steps and creep."""

from __future__ import annotations

import json
import sqlite3
from datetime import UTC, datetime

import pytest

from kits.paths import FORMAT_FIXTURES
from kits.series import DAY, MINUTE, T0, dcgm_text, seed_scenarios, write_beszel, write_nvidia_smi
from seatplan.errors import SeatplanError
from seatplan.exposition import parse_exposition
from seatplan.observe.detect import analyse
from seatplan.observe.diagnose import summarise_stats
from seatplan.observe.sources.beszel import read_beszel
from seatplan.observe.sources.nvidia_smi import read_nvidia_smi
from seatplan.observe.sources.prometheus import read_prometheus_text, series_from_query_range
from seatplan.observe.sources.vllm_metrics import vllm_stats


def utc(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


# ------------------------------------------------------------------ the faithful samples

def test_beszel_sample_units_restart_and_creep():
    series = {s.index: s for s in read_beszel(FORMAT_FIXTURES / "beszel_data.db")}
    assert set(series) == {0, 1} and series[0].host == "gpu-node-01"
    # stored × 1.024 = nvidia-smi MiB: 79647.46 → 81559
    assert series[0].total_mib == pytest.approx(81559, abs=0.1)
    gpu0 = analyse(series[0])
    assert len(gpu0.steps) == 1
    # The restart (10:05:40) shows first in the 20m record created at 10:20 that averages across it.
    assert utc("2026-11-27T10:00:00") <= gpu0.steps[0].at <= utc("2026-11-27T10:20:00")
    assert gpu0.steps[0].delta_mib == pytest.approx(77999 - 73921, abs=5)
    gpu1 = analyse(series[1])
    assert gpu1.steps == []
    creep = gpu1.segments[0].creep
    assert creep is not None and creep.rise_mib > 10_000
    assert gpu1.segments[0].plateau_used_mib == pytest.approx(29_873, abs=600)


def test_beszel_system_filter_and_errors(tmp_path):
    assert read_beszel(FORMAT_FIXTURES / "beszel_data.db", system="gpu-node-01")
    with pytest.raises(SeatplanError, match="no system named"):
        read_beszel(FORMAT_FIXTURES / "beszel_data.db", system="nope")
    other = tmp_path / "other.db"
    sqlite3.connect(other).execute("CREATE TABLE t (x)").connection.close()
    with pytest.raises(SeatplanError, match="not a Beszel hub database"):
        read_beszel(other)
    with pytest.raises(SeatplanError, match="no such file"):
        read_beszel(tmp_path / "missing.db")


def test_nvidia_smi_sample_restart():
    series, processes = read_nvidia_smi(FORMAT_FIXTURES / "nvidia_smi_query_gpu.csv")
    assert processes == [] and [s.index for s in series] == [0, 1]
    steps = analyse(series[0]).steps
    assert len(steps) == 1 and steps[0].at == utc("2026-11-27T10:05:45") and steps[0].delta_mib == 4078
    assert analyse(series[1]).steps == []


@pytest.mark.parametrize("name", ["nvidia_smi_compute_apps.csv", "nvidia_smi_compute_apps_with_uuid.csv"])
def test_compute_apps(name):
    series, processes = read_nvidia_smi(FORMAT_FIXTURES / name)
    assert series == []
    assert [(p.pid, p.process_name, p.used_mib) for p in processes] == [
        (3141592, "VLLM::EngineCore", 77476), (2718281, "text-embeddings-router", 29351)]


def test_nvidia_smi_without_header_is_refused(tmp_path):
    path = tmp_path / "noheader.csv"
    path.write_text("2026/11/27 10:05:45.268, 0, 0, 81559\n")
    with pytest.raises(SeatplanError, match="no CSV header") as problem:
        read_nvidia_smi(path)
    assert problem.value.where == f"{path}:1"


def test_dcgm_sample_totals():
    series, stats = read_prometheus_text(FORMAT_FIXTURES / "dcgm_exporter_metrics.prom")
    assert stats == []
    assert [(s.index, s.host, s.used_mib[0], s.total_mib, s.reserved_mib) for s in series] == [
        (0, "gpu-node-01", 77999, 81559, 551), (1, "gpu-node-01", 29873, 81559, 551)]


def test_vllm_metrics_sample():
    records = vllm_stats(parse_exposition((FORMAT_FIXTURES / "vllm_metrics.prom").read_text().splitlines()), source="m", default_time=0)
    assert len(records) == 1
    record = records[0]
    assert (record.seat, record.running_requests, record.waiting_requests, record.preemptions_total) == ("qwen3-30b-a3b", 1, 0, 0)
    assert record.kv_cache_usage_pct == pytest.approx(1.47)


# ------------------------------------------------------------------ generated files, known answers

@pytest.fixture(scope="module")
def seed_gpus():
    return {index: scenario.generate() for index, scenario in enumerate(seed_scenarios().values())}


def check_seed(series_by_index, *, time_tolerance_s):
    flat, creeping = analyse(series_by_index[0]), analyse(series_by_index[1])
    assert len(flat.steps) == 1 and abs(flat.steps[0].at.timestamp() - (T0 + 4 * DAY)) <= time_tolerance_s
    assert flat.segments[-1].plateau_used_mib == pytest.approx(91_082, abs=60)
    assert len(creeping.steps) == 1 and abs(creeping.steps[0].at.timestamp() - (T0 + 3 * DAY)) <= time_tolerance_s
    assert all(segment.creep and segment.creep.levelled_off for segment in creeping.segments)
    assert creeping.segments[-1].plateau_used_mib == pytest.approx(97_800, abs=60)


def test_generated_nvidia_smi_csv(tmp_path, seed_gpus):
    path = tmp_path / "smi.csv"
    write_nvidia_smi(path, seed_gpus)
    series, _ = read_nvidia_smi(path)
    check_seed({s.index: s for s in series}, time_tolerance_s=10 * MINUTE)
    assert series[0].total_mib == 97_871


def test_generated_beszel_db(tmp_path, seed_gpus):
    path = tmp_path / "data.db"
    ten_minute = {index: (times[::10], used[::10]) for index, (times, used) in seed_gpus.items()}
    write_beszel(path, ten_minute)
    series = read_beszel(path)
    assert {s.host for s in series} == {"gpu-node-02"}
    check_seed({s.index: s for s in series}, time_tolerance_s=20 * MINUTE)


@pytest.mark.parametrize("openmetrics", [False, True])
def test_generated_prometheus_text(tmp_path, seed_gpus, openmetrics):
    path = tmp_path / "dcgm.prom"
    path.write_text(dcgm_text(seed_gpus, openmetrics=openmetrics))
    series, _ = read_prometheus_text(path)
    assert {s.host for s in series} == {"node-1"}  # the pre-2026 "Hostname" label
    # No FB_RESERVED series exported: total is used + free, what the engines can have.
    assert series[0].total_mib == 97_871 - 551 and series[0].reserved_mib is None
    check_seed({s.index: s for s in series}, time_tolerance_s=10 * MINUTE)


def test_query_range_json():
    document = {"status": "success", "data": {"resultType": "matrix", "result": [
        {"metric": {"__name__": "DCGM_FI_DEV_FB_USED", "gpu": "0", "hostname": "h"}, "values": [[1.0, "5"], [61.0, "7"]]}]}}
    assert series_from_query_range(document, source="x") == [("DCGM_FI_DEV_FB_USED", {"gpu": "0", "hostname": "h"}, [(1.0, 5.0), (61.0, 7.0)])]
    with pytest.raises(SeatplanError, match="bad_data"):
        series_from_query_range({"status": "error", "error": "bad_data"}, source="x")


def test_metrics_counter_resets_are_summed():
    text = []
    for minute, (preempted, usage) in enumerate([(0, 0.2), (3, 0.9), (5, 0.5), (1, 0.1), (4, 0.3)]):  # restart after the 3rd
        stamp = (T0 + minute * 60) * 1000
        text += [f'vllm:num_preemptions_total{{engine="0",model_name="s"}} {preempted}.0 {stamp}',
                 f'vllm:kv_cache_usage_perc{{engine="0",model_name="s"}} {usage} {stamp}']
    summary = summarise_stats(vllm_stats(parse_exposition(text), source="scrapes"))
    assert summary.preemptions == 5 + 4 and summary.peak_kv_cache_usage_pct == pytest.approx(90.0)
    assert json.loads(summary.model_dump_json())["samples"] == 5


def test_nvidia_smi_host_time_offset_and_unreadable_values(tmp_path):
    shifted, _ = read_nvidia_smi(FORMAT_FIXTURES / "nvidia_smi_query_gpu.csv", utc_offset_s=-5 * 3600)
    assert analyse(shifted[0]).steps[0].at == utc("2026-11-27T15:05:45")
    path = tmp_path / "na.csv"
    path.write_text("timestamp, index, memory.used [MiB], memory.total [MiB]\n2026/11/27 10:05:45.268, 0, [N/A], [Not Supported]\n"
                    "2026/11/27 10:06:00.268, 0, 17 MiB, 81559 MiB\n")
    series, _ = read_nvidia_smi(path)
    assert list(series[0].used_mib[1:]) == [17.0] and series[0].total_mib == 81559
    assert str(series[0].used_mib[0]) == "nan"
