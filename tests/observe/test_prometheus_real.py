"""seatplan's Prometheus reader against a real Prometheus server holding backfilled DCGM and vLLM series."""

from __future__ import annotations

import subprocess
import time

import httpx
import pytest

from kits.parts import free_port, require_binary, stop_process
from kits.series import DAY, MINUTE, T0, dcgm_text, seed_scenarios
from seatplan.errors import SeatplanError
from seatplan.observe.detect import analyse
from seatplan.observe.sources.prometheus import read_prometheus

pytestmark = [pytest.mark.prometheus, pytest.mark.timeout(300)]


def vllm_openmetrics(days: int) -> str:
    lines = ["# TYPE vllm:kv_cache_usage_perc gauge", "# TYPE vllm:num_requests_running gauge"]
    for minute in range(0, days * 24 * 60, 60):
        usage = 0.93 if minute == 24 * 60 else 0.25
        lines.append(f'vllm:kv_cache_usage_perc{{engine="0",model_name="qwen3-32b"}} {usage} {T0 + minute * MINUTE}')
        lines.append(f'vllm:num_requests_running{{engine="0",model_name="qwen3-32b"}} 3 {T0 + minute * MINUTE}')
    return "\n".join(lines) + "\n"


@pytest.fixture(scope="module")
def prometheus_url(tmp_path_factory):
    prometheus = require_binary("prometheus")
    promtool = require_binary("promtool")
    root = tmp_path_factory.mktemp("prometheus")
    storage = root / "data"
    gpus = {index: scenario.generate() for index, scenario in enumerate(seed_scenarios().values())}
    dcgm = dcgm_text(gpus, openmetrics=True).replace("# EOF\n", "")
    (root / "backfill.om").write_text(dcgm + vllm_openmetrics(7) + "# EOF\n")
    subprocess.run([promtool, "tsdb", "create-blocks-from", "openmetrics", str(root / "backfill.om"), str(storage)],
                   check=True, capture_output=True, timeout=240)
    (root / "prometheus.yml").write_text("global:\n  scrape_interval: 1m\n")
    port = free_port()
    server = subprocess.Popen(
        [prometheus, f"--config.file={root / 'prometheus.yml'}", f"--storage.tsdb.path={storage}",
         f"--web.listen-address=127.0.0.1:{port}", "--storage.tsdb.retention.time=100y"],
        stdout=subprocess.DEVNULL, stderr=(root / "prometheus.log").open("w"))
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.time() + 60
        while time.time() < deadline:
            try:
                if httpx.get(f"{url}/-/ready", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(0.3)
        else:
            pytest.fail("Prometheus did not become ready: " + (root / "prometheus.log").read_text()[-2000:])
        yield url
    finally:
        stop_process(server)


def test_query_range_through_a_real_prometheus(prometheus_url):
    series, stats = read_prometheus(prometheus_url, start=T0, end=T0 + 7 * DAY, step_seconds=60)
    by_index = {s.index: s for s in series}
    assert set(by_index) == {0, 1} and {s.host for s in series} == {"node-1"}
    # More than one query_range chunk (Prometheus caps a range at 11,000 points).
    assert by_index[1].times_s[-1] > T0 + 10_000 * 60 and len(by_index[1].times_s) > 9_900

    flat, creeping = analyse(by_index[0]), analyse(by_index[1])
    assert len(flat.steps) == 1 and abs(flat.steps[0].at.timestamp() - (T0 + 4 * DAY)) <= 10 * MINUTE
    assert flat.steps[0].after_mib == pytest.approx(91_082, abs=60)
    assert len(creeping.steps) == 1 and abs(creeping.steps[0].at.timestamp() - (T0 + 3 * DAY)) <= 10 * MINUTE
    assert creeping.segments[-1].creep is not None and creeping.segments[-1].plateau_used_mib == pytest.approx(97_800, abs=60)

    usage = [record.kv_cache_usage_pct for record in stats if record.seat == "qwen3-32b"]
    assert max(usage) == pytest.approx(93.0) and min(usage) == pytest.approx(25.0)


def test_unreachable_prometheus_is_a_seatplan_error():
    with pytest.raises(SeatplanError, match="cannot query Prometheus"):
        read_prometheus(f"http://127.0.0.1:{free_port()}", start=T0, end=T0 + 3600, timeout_s=2)
