"""The rendered engine commands are accepted by vLLM's own `vllm serve` argument parser, value for value.

The parser is imported from the test virtualenv that has vLLM (seatplan itself never imports vLLM).
"""

from __future__ import annotations

import json
import shlex
import subprocess
from pathlib import Path

import pytest

from kits.rollout import build_plan_file
from seatplan.documents.plan import Plan
from seatplan.engine.parse import parse_env
from seatplan.render.bundle import render_files
from seatplan.render.settings import RenderSettings

pytestmark = pytest.mark.vllm
PARSER_SCRIPT = Path(__file__).with_name("parse_vllm_args.py")
DEMO_FLEET = Path(__file__).resolve().parents[2] / "examples" / "demo" / "fleet.yaml"


def vllm_parse(vllm_python: Path, commands: list[list[str]]) -> list[dict]:
    completed = subprocess.run([str(vllm_python), str(PARSER_SCRIPT)], input=json.dumps(commands), capture_output=True, text=True, timeout=600)
    assert completed.returncode == 0, completed.stderr[-4000:]
    return json.loads(completed.stdout.strip().splitlines()[-1])


def test_rendered_commands_parse_to_the_planned_values(vllm_python_path, tmp_path):
    plan = Plan.model_validate_json(build_plan_file(DEMO_FLEET, tmp_path / "plan.json").read_text())
    files = render_files(plan, RenderSettings(), ["env"])
    seats = [seat for seat in plan.seats if seat.engine == "vllm"]
    commands = [shlex.split(parse_env(files[f"env/{seat.name}.env"])["SEATPLAN_COMMAND"])[1:] for seat in seats]
    assert all(command[0] == "serve" for command in commands)
    # a flag vLLM does not have must fail the same parser (so this test can fail)
    parsed = vllm_parse(vllm_python_path, commands + [commands[0] + ["--kv-cache-memory-gigabytes", "3"]])
    assert parsed[-1]["ok"] is False and "--kv-cache-memory-gigabytes" in parsed[-1]["error"]
    for seat, values in zip(seats, parsed):
        assert values["ok"], values
        assert values["model"] == seat.launch.model
        assert values["served_model_name"] == [seat.served_model_name]
        assert values["port"] == seat.port
        assert values["tensor_parallel_size"] == seat.tensor_parallel_size
        assert values["max_model_len"] == seat.max_model_len
        assert values["kv_cache_memory_bytes"] == seat.kv_cache_memory_bytes
        assert values["gpu_memory_utilization"] == round(seat.gpu_memory_utilization, 3)
        assert values["max_num_seqs"] == seat.launch.max_num_seqs
        assert values["max_num_batched_tokens"] == seat.launch.max_num_batched_tokens
        assert values["override_generation_config"] == ({"max_new_tokens": seat.max_new_tokens} if seat.max_new_tokens else {})
        assert values["hf_overrides"] == (seat.launch.hf_overrides or {})
