"""Issue 13 §3: a GPU's step is not one seat's footprint without that seat's own evidence.

Three seats share GPU 1; the host restarts and every engine comes back. One seat's boot is in the logs
at that time, but the dip went to zero (all three were down) and is far more than that seat's own
weights and KV lines: the figure stays at GPU level, as a correction the plan reserves on that GPU.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pytest

from kits.documents import plan_document, planned_gpu, planned_seat
from kits.series import DAY, T0, Scenario
from kits.series import Boot as Life
from kits.vllm_logs import boot_lines
from seatplan.observe.detect import GpuSeries
from seatplan.observe.diagnose import diagnose
from seatplan.observe.logparse import parse_log
from seatplan.units import GiB, MiB

ROOT = Path(__file__).resolve().parents[2]


def clock(offset_s: int) -> str:
    return datetime.fromtimestamp(T0 + offset_s, tz=UTC).strftime("%m-%d %H:%M:%S")


def three_seat_gpu() -> GpuSeries:
    times, used = Scenario(boots=[Life(0, 88_000), Life(3 * DAY, 89_900, down_minutes=4)], days=5, noise_mib=15).generate()
    return GpuSeries(index=1, host="gpu-box", times_s=times, used_mib=used, total_mib=97_871.0)


SEATS = (("gen-small", 30_000), ("emb", 18_000), ("rerank", 40_000))
PLAN = plan_document([planned_seat(name, ["gpu-box:1"], size * MiB) for name, size in SEATS],
                     [planned_gpu("gpu-box", 1, 88_000 * MiB, 6_000 * MiB, [name for name, _ in SEATS])])


def test_whole_gpu_restart_stays_at_gpu_level():
    # gen-small's log: 15.6 GiB of weights and 9 GiB of KV, far less than the ~90 GiB the GPU came back to.
    boots = parse_log(boot_lines(1, 2, "gen-small", clock=clock(3 * DAY), kv_gib=9.0, weights_gib=15.6), year=2026).boots
    report, observed = diagnose(boots=boots, stats=[], series=[three_seat_gpu()], processes=[], plan=PLAN)
    assert "gen-small" not in observed.seats  # no "89.9 GiB (restart step on GPU 1)" for one seat
    correction = observed.gpu_corrections[0]
    assert (correction.host, correction.index) == ("gpu-box", 1)
    assert correction.extra_bytes / MiB == pytest.approx(89_900 - 88_000, abs=60)
    assert correction.seats == ["gen-small", "emb", "rerank"]


def test_own_lines_that_account_for_the_dip_attribute_it():
    # Only gen-small restarts (the others stay up): the GPU dips by gen-small's share, which its lines explain.
    times = T0 + np.arange(0, 5 * DAY, 60)
    used = np.where(times < T0 + 3 * DAY, 88_000.0, 88_000.0 + 1_900.0)
    down = (times >= T0 + 3 * DAY) & (times < T0 + 3 * DAY + 240)
    used[down] = 88_000.0 - 30_000.0
    series = GpuSeries(index=1, host="gpu-box", times_s=times, used_mib=used, total_mib=97_871.0)
    boots = parse_log(boot_lines(1, 2, "gen-small", clock=clock(3 * DAY), kv_gib=12.0, weights_gib=15.6), year=2026).boots
    _, observed = diagnose(boots=boots, stats=[], series=[series], processes=[], plan=PLAN)
    assert observed.seats["gen-small"].footprint_bytes / MiB == pytest.approx(31_900, abs=60)
    assert observed.gpu_corrections == []  # 31,900 + 18,000 + 40,000 = the plateau


def test_plan_reserves_the_correction_on_that_gpu(cli, tmp_path):
    fleet = ROOT / "examples" / "demo" / "fleet.yaml"
    observed = tmp_path / "observed.json"
    observed.write_text(json.dumps({"kind": "seatplan.observed", "version": 1, "generated_at": "2026-11-30T00:00:00Z", "seats": {},
                                    "gpu_corrections": [{"host": "gpu-box", "index": 1, "extra_bytes": 2 * GiB,
                                                         "seats": ["a", "b"], "source": "test"}]}))

    def plan(*extra: str) -> dict:
        done = cli("plan", str(fleet), "--json", *extra)
        assert done.exit_code == 0, done.stderr
        return json.loads(done.stdout)

    before, after = plan(), plan("--observed", str(observed))
    reserved = {(g["host"], g["index"]): g["reserved_bytes"] for g in after["gpus"]}
    assert reserved[("gpu-box", 1)] == {(g["host"], g["index"]): g["reserved_bytes"] for g in before["gpus"]}[("gpu-box", 1)] + 2 * GiB
    assert any("gpu-box:1" in warning and "2.00 GiB" in warning for warning in after["warnings"])
