"""The vLLM log parser on every excerpt of tests/fixtures/vllm-startup-logs.txt, a real 0.32 CPU log,
and wrapped / interleaved / restarted logs built from vLLM's own line formats."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from kits.paths import FIXTURES
from kits.vllm_logs import boot_lines
from seatplan.errors import SeatplanError
from seatplan.observe.diagnose import diagnose
from seatplan.observe.findings import co_boot_race, context_cuts, seat_findings
from seatplan.observe.inputs import utc_offset_seconds
from seatplan.observe.logparse import parse_log, split_line
from seatplan.units import GiB

DATA = Path(__file__).parent / "data"


def excerpts() -> dict[str, list[str]]:
    text = (FIXTURES / "vllm-startup-logs.txt").read_text()
    parts = re.split(r"^### (S\d+).*$", text, flags=re.M)
    return {name: [line for line in body.splitlines() if not line.startswith("#|")]
            for name, body in zip(parts[1::2], parts[2::2])}


def gib(value: float) -> int:
    return int(round(value * GiB))


# Per excerpt: the figures its lines state (and nothing invented for what they do not).
EXPECTED = {
    "S01": dict(weights_bytes=gib(65.9651), available_kv_bytes=gib(-2.14), errors=["engine_failed"], pids=[5839]),
    "S02": dict(available_kv_bytes=gib(6.51), kv_cache_tokens=42656, max_concurrency=1.30, concurrency_max_model_len=32768),
    "S03": dict(available_kv_bytes=gib(8.11), kv_cache_tokens=178880, pids=[]),
    "S04": dict(seat="qwen3-1", weights_bytes=gib(14.2474), pids=[105, 107, 106, 108]),
    "S05": dict(version="0.24.0", available_kv_bytes=gib(6.01), kv_cache_tokens=569878, max_concurrency=4.35,
                concurrency_max_model_len=131072, seat="qwen3.6-35b-a3b-nvfp4"),
    "S06": dict(available_kv_bytes=gib(5.98), kv_cache_tokens=567978, max_concurrency=4.33),
    "S07": dict(weights_bytes=gib(19.75)),
    "S08": dict(gpu_memory_utilization=0.82, cuda_graph_estimate_bytes=gib(0.36), available_kv_bytes=gib(6.87), pids=[448, 447]),
    "S09": dict(available_kv_bytes=gib(2.97), kv_cache_tokens=150745),
    "S10": dict(kv_cache_tokens=467520, max_concurrency=93.35, concurrency_max_model_len=5000, ready=True),
    "S11": dict(errors=["not_enough_kv_cache"]),
    "S12": dict(weights_bytes=gib(14.9888), non_torch_bytes=gib(0.35), available_kv_bytes=gib(2.89), num_gpu_blocks=1478,
                gpu_memory_utilization=0.90, max_concurrency=0.82, errors=["not_enough_kv_cache"]),
    "S13": dict(weights_bytes=gib(67.7229), num_gpu_blocks=1381, max_concurrency=10.79, concurrency_max_model_len=2048),
}


def test_every_excerpt_has_expectations():
    assert set(excerpts()) == set(EXPECTED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_excerpt(name):
    parsed = parse_log(excerpts()[name], source=name, year=2025)
    assert len(parsed.boots) == 1, [boot.source for boot in parsed.boots]
    boot = parsed.boots[0]
    for field, expected in EXPECTED[name].items():
        actual = getattr(boot, field)
        if field == "errors":
            actual = [error.kind for error in actual]
        assert actual == expected, field


def test_not_enough_kv_error_figures():
    boot = parse_log(excerpts()["S11"], source="S11").boots[0]
    error = boot.errors[0]
    assert (error.max_model_len, error.estimated_max_model_len) == (131072, 5632)
    assert error.needed_kv_bytes == 16 * GiB and error.available_kv_bytes == gib(0.71)


def test_tensor_parallel_available_kv_is_the_smallest_rank():
    lines = [
        "(VllmWorker rank=0 pid=11) INFO 05-01 10:00:00 [gpu_worker.py:200] Available KV cache memory: 8.11 GiB",
        "(VllmWorker rank=1 pid=12) INFO 05-01 10:00:00 [gpu_worker.py:200] Available KV cache memory: 8.02 GiB",
    ]
    assert parse_log(lines).boots[0].available_kv_bytes == gib(8.02)


@pytest.mark.parametrize("figure", ["9" * 400, "1e999", "9" * 20, "-" + "9" * 20])
def test_a_figure_no_device_holds_drops_its_line_not_the_boot(figure):
    """A garbled size (found by the fuzz test: 400 nines overflowed a float into int) tells nothing; the
    boot's other lines still count, and the sane figure of the same kind is kept."""
    lines = [
        "(EngineCore_0 pid=7) INFO 05-01 10:00:00 [default_loader.py:262] Loading weights took 2.20 seconds",
        f"(EngineCore_0 pid=7) INFO 05-01 10:00:01 [gpu_worker.py:200] Available KV cache memory: {figure} GiB",
        f"(EngineCore_0 pid=7) INFO 05-01 10:00:01 [gpu_model_runner.py:1] Model loading took {figure} GiB and 2.5 seconds",
        "(EngineCore_0 pid=7) INFO 05-01 10:00:02 [kv_cache_utils.py:1] GPU KV cache size: 1,024 tokens",
    ]
    boot = parse_log(lines).boots[0]
    assert boot.available_kv_bytes is None and boot.weights_bytes is None
    assert boot.kv_cache_tokens == 1024


def test_real_vllm_032_cpu_log():
    parsed = parse_log((DATA / "vllm-0.32.0-cpu-boot.log").read_text().splitlines(), source="cpu.log", year=2026)
    assert len(parsed.boots) == 1
    boot = parsed.boots[0]
    assert (boot.seat, boot.version, boot.port, boot.max_model_len) == ("tiny-seat", "0.32.0", 18931, 4096)
    assert boot.kv_cache_memory_bytes_pinned == 67108864 and boot.sized_by == "pinned"
    assert (boot.kv_cache_tokens, boot.kv_cache_device, boot.max_concurrency) == (131072, "CPU", 32.0)
    assert boot.ready and boot.errors == []
    assert sorted(boot.pids) == [9398, 9515]
    assert boot.started_at.isoformat() == "2026-11-30T10:51:04+00:00"
    assert len(parsed.stats) == 1
    stats = parsed.stats[0]
    assert (stats.seat, stats.running_requests, stats.waiting_requests, stats.kv_cache_usage_pct) == ("tiny-seat", 0, 0, 0.0)


# ------------------------------------------------------------------ synthetic logs in vLLM's own formats

def test_co_boot_race_seed_case_in_one_docker_log():
    # The seed: one seat's three boots; its container restarts, so the pids repeat.
    lines = []
    for clock, non_torch, kv in (("11-20 09:00:00", 8.11, 20.37), ("11-22 14:00:00", 1.74, 26.74), ("11-25 08:30:00", -0.56, 29.04)):
        lines += [f"2026-{clock[:5]}T{clock[6:]}.000000000Z {line}" for line in boot_lines(1, 107, "qwen3-32b", clock=clock,
                                                                                             kv_gib=kv, non_torch_gib=non_torch)]
    parsed = parse_log(lines, source="docker.log")
    boots = parsed.boots
    assert [round(b.non_torch_bytes / GiB, 2) for b in boots] == [8.11, 1.74, -0.56]
    assert [round(b.available_kv_bytes / GiB, 2) for b in boots] == [20.37, 26.74, 29.04]
    assert [b.started_at.day for b in boots] == [20, 22, 25]
    assert {b.seat for b in boots} == {"qwen3-32b"} and all(b.sized_by == "utilization" for b in boots)


    findings = seat_findings("qwen3-32b", boots)
    # Alone in the log, the moving KV is drift: nothing shows a neighbour booting at the same time.
    assert {f.kind for f in findings} >= {"kv_drift"} and "co_boot_race" not in {f.kind for f in findings}
    # The neighbour's log shows it booting during the third boot: now it is a race.
    neighbour = parse_log([f"2026-11-25T08:30:00.000000000Z {line}" for line in boot_lines(5, 6, "gen-small", clock="11-25 08:30:00")],
                          source="neighbour.log").boots
    findings = seat_findings("qwen3-32b", boots, neighbours=neighbour)
    race = next(f for f in findings if f.kind == "co_boot_race")
    assert "gen-small" in race.message and any("neighbour.log" in line for line in race.evidence)
    assert race.pin_kv_cache_memory_bytes == 29 * GiB  # 29.04 GiB rounded down to the 0.5 GiB step
    assert "8.11 → 1.74 → -0.56" in race.message and "20.37 → 26.74 → 29.04" in race.message
    assert "--kv-cache-memory-bytes 31138512896" in race.fix
    planned = seat_findings("qwen3-32b", boots, planned_kv_bytes=27 * GiB, neighbours=neighbour)
    assert next(f for f in planned if f.kind == "co_boot_race").pin_kv_cache_memory_bytes == 27 * GiB


def test_steady_boots_are_no_race():
    boots = parse_log(boot_lines(1, 2, "a", clock="11-20 09:00:00") + boot_lines(1, 2, "a", clock="11-21 09:00:00", kv_gib=20.41)).boots

    assert len(boots) == 2 and co_boot_race("a", boots) is None


def test_two_engines_interleaved_in_one_file_are_told_apart_by_pid_and_name():
    first = boot_lines(100, 101, "alpha", kv_gib=10.0)
    second = boot_lines(200, 201, "beta", kv_gib=30.0)
    mixed = [line for pair in zip(first, second) for line in pair]
    boots = {boot.seat: boot for boot in parse_log(mixed).boots}
    assert set(boots) == {"alpha", "beta"}
    assert boots["alpha"].available_kv_bytes == 10 * GiB and boots["beta"].available_kv_bytes == 30 * GiB
    assert sorted(boots["alpha"].pids) == [100, 101] and sorted(boots["beta"].pids) == [200, 201]


def test_compose_prefixes_colours_and_journald_formats():
    core = boot_lines(7, 8, "gamma", kv_gib=12.5)
    compose = [f"gamma-1  | \x1b[32m{line}\x1b[0m" for line in core]
    short = [f"Nov 20 09:00:00 gpu-node-01 vllm-gamma[7]: {line}" for line in core]
    as_json = [json.dumps({"MESSAGE": line, "_PID": "7", "SYSLOG_IDENTIFIER": "vllm-gamma",
                           "__REALTIME_TIMESTAMP": str(1795597200 * 10**6)}) for line in core]
    export = []
    for line in core:
        export += ["__CURSOR=s=1", "__REALTIME_TIMESTAMP=1795597200000000", "_PID=7", "SYSLOG_IDENTIFIER=vllm-gamma", f"MESSAGE={line}", ""]
    for variant in (compose, short, as_json, export):
        boots = parse_log(variant, year=2026).boots
        assert len(boots) == 1
        assert boots[0].available_kv_bytes == gib(12.5) and boots[0].seat == "gamma" and boots[0].ready


def test_split_line_peels_every_wrapper():
    line = split_line("qwen-1  | 2026-11-27T10:05:40.123456789Z (EngineCore_DP0 pid=42) INFO 11-27 10:05:40 [x.py:1] hello", 3)
    assert (line.stream, line.pid, line.number) == ("qwen-1", 42, 3)
    assert line.at.isoformat() == "2026-11-27T10:05:40.123456+00:00"
    assert line.text.startswith("INFO 11-27")


def test_startup_errors_and_old_engine():
    lines = [
        "INFO 04-01 10:00:00 [core.py:61] Initializing a V1 LLM engine (v0.9.2) with config: model='/m/x', served_model_name=x",
        "ERROR 04-01 10:00:05 [core.py:500] ValueError: Free memory on device (30.1/79.19 GiB) on startup is less than desired "
        "GPU memory utilization (0.5, 39.6 GiB). Decrease GPU memory utilization or reduce GPU memory used by other processes.",
        "INFO 04-01 11:00:00 [core.py:61] Initializing a V1 LLM engine (v0.9.2) with config: model='/m/x', served_model_name=x",
        "ERROR 04-01 11:00:01 [core.py:500] ValueError: User-specified max_model_len (262144) is greater than the derived "
        "max_model_len (max_position_embeddings=40960 or model_max_length=None in model's config.json).",
    ]
    boots = parse_log(lines, year=2026).boots
    assert [boot.errors[0].kind for boot in boots] == ["free_memory_below_utilization", "max_model_len_above_derived"]
    assert boots[0].errors[0].requested_bytes == gib(39.6)
    assert boots[1].errors[0].derived_max_model_len == 40960


    kinds = [f.kind for f in seat_findings("x", boots)]
    assert kinds.count("boot_failed") == 2 and "no_kv_bytes_flag" in kinds


def test_auto_fit_is_a_context_cut():
    lines = boot_lines(1, 2, "d")
    lines.insert(3, "(EngineCore_DP0 pid=2) INFO 11-20 09:00:00 [kv_cache_utils.py:1] Auto-fit max_model_len: reduced from 262144 to 98304")
    boot = parse_log(lines).boots[0]
    assert (boot.max_model_len_before_auto_fit, boot.max_model_len) == (262144, 98304)

    assert "262144 to 98304" in context_cuts("d", [boot])[0].message


def test_host_clock_offset_applies_to_zone_less_times_only():
    plain = "(EngineCore pid=1) INFO 11-27 10:05:40 [gpu_worker.py:1] Available KV cache memory: 20.0 GiB"
    docker = "2026-11-27T10:05:40Z " + plain
    assert parse_log([plain], year=2026, utc_offset_s=3600).boots[0].started_at.isoformat() == "2026-11-27T09:05:40+00:00"
    assert parse_log([docker], year=2026, utc_offset_s=3600).boots[0].started_at.isoformat() == "2026-11-27T10:05:40+00:00"


@pytest.mark.parametrize("text, seconds", [("+01:00", 3600), ("-0500", -18000), ("UTC+5:30", 19800), (None, 0)])
def test_utc_offset_option(text, seconds):
    assert utc_offset_seconds(text) == seconds


def test_bad_utc_offset():
    with pytest.raises(SeatplanError, match="UTC offset"):
        utc_offset_seconds("+25:00")


@pytest.mark.parametrize("line, running, waiting, usage, preempted", [
    # V0 engine
    ("INFO 06-01 10:00:00 metrics.py:351] Avg prompt throughput: 0.0 tokens/s, Avg generation throughput: 35.2 tokens/s, "
     "Running: 3 reqs, Swapped: 0 reqs, Pending: 2 reqs, GPU KV cache usage: 41.5%, CPU KV cache usage: 0.0%.", 3, 2, 41.5, 0),
    # V1, 0.8–0.2x
    ("(APIServer pid=1) INFO 06-01 10:00:00 [loggers.py:118] Engine 000: Avg prompt throughput: 812.4 tokens/s, Avg generation "
     "throughput: 95.0 tokens/s, Running: 12 reqs, Waiting: 4 reqs, GPU KV cache usage: 97.3%, Prefix cache hit rate: 12.0%", 12, 4, 97.3, 0),
    # 0.32 with preemptions in the interval
    ("(APIServer pid=1) INFO 06-01 10:00:00 [loggers.py:335] Engine 000: Avg prompt throughput: 1.9 tokens/s, Avg generation "
     "throughput: 20.0 tokens/s, Running: 9 reqs, Waiting: 7 reqs, Preemptions: 3, GPU KV cache usage: 100.0%", 9, 7, 100.0, 3),
])
def test_engine_stats_lines(line, running, waiting, usage, preempted):
    stats = parse_log([line], year=2026).stats
    assert [(s.running_requests, s.waiting_requests, s.kv_cache_usage_pct, s.preemptions) for s in stats] == [
        (running, waiting, usage, preempted)]


def test_thirteen_unrelated_excerpts_are_thirteen_engines_and_no_race():
    """Issue 13 §2: the excerpts in one file come from different machines; none may be merged or raced."""
    lines = (FIXTURES / "vllm-startup-logs.txt").read_text().splitlines()
    boots = [boot for boot in parse_log(lines, source="vllm-startup-logs.txt", year=2025).boots
             if boot.source.split(":")[1].split("-")[0] not in {str(n) for n, line in enumerate(lines, 1) if line.startswith("#|")}]
    first_lines = {name: next(n for n, line in enumerate(lines, 1) if line.startswith(f"### {name}")) for name in EXPECTED}
    owners = sorted({max((n for n in first_lines.values() if n < int(boot.source.split(":")[1].split("-")[0])), default=0) for boot in boots})
    assert len(owners) == len(EXPECTED) - 0  # every excerpt has its own boot(s) ...
    for boot in boots:
        start = int(boot.source.split(":")[1].split("-")[0])
        end = int(boot.source.split("-")[-1])
        block = max(n for n in first_lines.values() if n < start)
        assert all(not (block < n <= end) for n in first_lines.values() if n != block)  # ... and none spans two
    assert [boot.seat for boot in boots if not boot.fragment] == ["qwen3.6-35b-a3b-nvfp4"]  # only S05 shows its start
    report, _ = diagnose(boots=boots, stats=[], series=[], processes=[])
    assert {f.kind for f in report.findings}.isdisjoint({"co_boot_race", "kv_drift"})


def test_two_engines_booting_together_in_one_log_are_a_race():
    """Without a fleet, engines in one log file are assumed to share the GPU, and the evidence says so. A race
    needs a figure that moved (issue 20: one was reported where KV went 6.02 → 6.02 GiB)."""

    both = [line for pair in zip(boot_lines(100, 101, "alpha", kv_gib=10.0), boot_lines(200, 201, "beta", kv_gib=30.0))
            for line in pair]
    later = boot_lines(300, 301, "alpha", kv_gib=12.0, clock="11-21 09:00:00")  # alone: no neighbour overlaps it
    report, _ = diagnose(boots=parse_log(both + later, source="host.log", year=2026).boots, stats=[], series=[], processes=[])
    races = {f.seat: f for f in report.findings if f.kind == "co_boot_race"}
    # alpha's KV moved 10.00 → 12.00 GiB; beta booted once, so nothing of it is seen to move.
    assert set(races) == {"alpha"}
    assert any("beta booted" in line and "assumed shared" in line for line in races["alpha"].evidence)
    assert "KV went 10.0 → 12.0 GiB" in races["alpha"].message and "non-torch" not in races["alpha"].message

    unmoved = boot_lines(300, 301, "alpha", kv_gib=10.0, clock="11-21 09:00:00")
    report, _ = diagnose(boots=parse_log(both + unmoved, source="host.log", year=2026).boots, stats=[], series=[], processes=[])
    assert not [f for f in report.findings if f.kind in ("co_boot_race", "kv_drift")]
