"""A fleet on a vLLM release without ``--kv-cache-memory-bytes`` (0.9.2: the flag arrived in 0.10.2) planned, rendered,
and its rendered command booted on the real vLLM CPU engine (0.32, the only release that runs here: it accepts the
flags it is given, and has the same unpinned path).

On the CPU build ``--gpu-memory-utilization`` is a fraction of the CPU memory node (vLLM 0.32
``vllm/v1/worker/cpu_worker.py`` lines 72-76: ``requested_cpu_memory = math.ceil(memory_status.total_memory ×
gpu_memory_utilization)``, the node's ``MemTotal`` from ``/sys/devices/system/node/nodeN/meminfo``,
``vllm/utils/cpu_resource_utils.py`` lines 189-217), and without a pin the KV cache is what that request leaves after
the worker's resident memory (``cpu_worker.py`` lines 234-250: ``requested_memory_for_kv = requested_cpu_memory −
rss``, logged as "Auto set (KV/TOTAL) GiB for KV cache ... with R GiB requested memory"). The legacy
``VLLM_CPU_KVCACHE_SPACE`` variable would pin it instead (``vllm/platforms/cpu.py`` lines 323-327 set
``kv_cache_memory_bytes`` from it), so the engine runs without it. The fleet's ``device: cpu`` budget is that node,
total for total, so the request vLLM makes is the plan's ``ceil(total × util)`` to the byte.
"""

from __future__ import annotations

import math
import os
import re
import shlex
from pathlib import Path

import pytest

from kits.parts import free_port
from kits.rollout import build_plan_file, cpu_fleet
from kits.tiny_models import QWEN3_DENSE, tiny_model_dir
from kits.vllm_engine import serve_once
from seatplan.documents.launch import ByUtilisation
from seatplan.documents.plan import Plan, PlannedVllmSeat
from seatplan.engine.command import COMMAND_KEY, MODULE_LAUNCHER
from seatplan.engine.parse import parse_env, split_shell_line
from seatplan.render.bundle import render_files
from seatplan.render.settings import RenderSettings

pytestmark = pytest.mark.vllm
GiB = 1 << 30
KV = "2GiB"  # the planned KV: with the tiny model's weights, a request of about 2 GiB, well above the worker's resident memory
AUTO_SET = re.compile(r"Auto set \((?P<kv>[\d.]+)/(?P<total>[\d.]+)\) GiB for KV cache on node (?P<node>\d+), with (?P<requested>[\d.]+) GiB requested memory")


def format_gib(value: int) -> str:
    """vLLM's own ``format_gib`` (``vllm/utils/mem_utils.py`` lines 30-31), to read its log line back."""
    return f"{round(value / GiB, 2)}"


def node_total_bytes(node: int = 0) -> int:
    """The memory node's total as vLLM's CPU worker reads it: the node's meminfo, else the system's (no NUMA)."""
    for path, pattern in ((Path(f"/sys/devices/system/node/node{node}/meminfo"), rf"^Node {node} MemTotal:\s+(\d+) kB"),
                          (Path("/proc/meminfo"), r"^MemTotal:\s+(\d+) kB")):
        if path.is_file():
            found = re.search(pattern, path.read_text(), re.MULTILINE)
            assert found, path
            return int(found[1]) * 1024
    raise AssertionError("no meminfo to read the memory node's total from")


@pytest.mark.timeout(1200)
def test_a_fleet_without_the_kv_bytes_flag_renders_a_command_the_cpu_engine_boots_sized_by_utilisation(vllm_python_path, tmp_path):
    total = node_total_bytes()
    model_dir = tiny_model_dir(QWEN3_DENSE, vllm_python_path)
    port = free_port()
    fleet = cpu_fleet(tmp_path, {"tiny-qwen": (model_dir, port)}, kv=KV, vllm_version="0.9.2", total=str(total))
    plan = Plan.model_validate_json(build_plan_file(fleet, tmp_path / "plan.json").read_text())
    seat = plan.seat("tiny-qwen")
    assert isinstance(seat, PlannedVllmSeat) and seat.launch is not None and isinstance(seat.launch.kv, ByUtilisation)
    assert not plan.warnings
    launcher = [str(vllm_python_path), *MODULE_LAUNCHER[1:]]
    files = render_files(plan, RenderSettings(launcher=launcher, bind_host="127.0.0.1"), ["env"])
    command = split_shell_line(parse_env(files["env/tiny-qwen.env"])[COMMAND_KEY])
    # what render wrote: the one utilisation, no pin
    assert "--kv-cache-memory-bytes" not in command
    util = command[command.index("--gpu-memory-utilization") + 1]
    assert float(util) == seat.gpu_memory_utilization
    requested = math.ceil(total * float(util))  # vLLM's request, in floating point as it computes it
    allocated = sum(part.bytes for part in seat.footprint_parts if part.name not in ("cuda_context", "nccl_allreduce", "creep_allowance"))
    assert allocated <= requested <= allocated + math.ceil(total / 1000)

    env = {key: value for key, value in os.environ.items() if key != "VLLM_CPU_KVCACHE_SPACE"}
    served = serve_once(command, port, "tiny-qwen", "by-utilisation", tmp_path / "boots", env=env)
    assert served.probe_completion_tokens, shlex.join(command)
    assert served.cache_config_labels["gpu_memory_utilization"] == str(float(util))
    assert served.cache_config_labels["kv_cache_memory_bytes"] == "None"
    found = AUTO_SET.search(served.log_text)
    assert found, served.log_text[-4000:]
    # the engine asked exactly the plan's request of the node the fleet declared, and sized its KV from it
    assert (found["requested"], found["total"]) == (format_gib(requested), format_gib(total))
    assert 0 < float(found["kv"]) < float(found["requested"])
    # and that KV holds a full-length request: the engine served it
    assert int(served.cache_config_labels["num_gpu_blocks"]) * int(served.cache_config_labels["block_size"]) >= seat.max_model_len
    assert served.served_max_model_len == seat.max_model_len
