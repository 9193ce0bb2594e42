"""A seat with speculative decoding (issue 47): the draft's KV layers join the target's, so the KV rule, the blocks and
the weights all carry the draft, whether it is given as the seat's `speculative` key or as --speculative-config in
extra_args; the plan writes the flag, and n-gram adds nothing. The engine's own figures are held in
tests/integration/test_vllm_cpu_features.py; here the plan's figures are held to the facts stage's.
"""

from __future__ import annotations

import json
import random

import pytest

from kits.cli import run_cli
from kits.plan import MODELS, QWEN3_8B, one_host, write_fleet
from seatplan.documents.fleet_file import load_fleet
from seatplan.documents.plan import PlannedVllmSeat
from seatplan.engine.command import engine_command
from seatplan.engine.settings import planned_engine_settings
from seatplan.errors import SeatplanError
from seatplan.facts.api import load_model_facts
from seatplan.facts.models import EngineSettings, SpeculativeSettings
from seatplan.plan.planner import build_plan

DRAFTS = [MODELS / "Qwen--Qwen3-0.6B", MODELS / "Qwen--Qwen3-4B", MODELS / "meta-llama--Llama-3.2-3B-Instruct"]


def _plan(tmp_path, seat_lines: str) -> PlannedVllmSeat:
    fleet = write_fleet(tmp_path, one_host(1, "141GiB") + f"seats:\n  - name: chat\n    model: {QWEN3_8B}\n    port: 8001\n" + seat_lines)
    plan = build_plan(load_fleet(fleet))
    seat = plan.vllm_seats()[0]
    assert seat.launch is not None
    return seat


def test_a_draft_raises_the_kv_rule_and_the_weights_and_the_plan_writes_its_flag(tmp_path):
    rng = random.Random(47)
    plain = _plan(tmp_path, "    max_model_len: 16384\n")
    for _ in range(3):
        draft, tokens, length = rng.choice(DRAFTS), rng.randint(1, 8), rng.choice([4096, 16384, 40960])
        seat = _plan(tmp_path, f"    max_model_len: {length}\n    speculative: {{method: draft_model, model: {draft}, num_speculative_tokens: {tokens}}}\n")
        settings = EngineSettings(speculative=SpeculativeSettings(method="draft_model", model=str(draft), num_speculative_tokens=tokens))
        facts = load_model_facts(QWEN3_8B, settings.model_copy(update={"max_num_batched_tokens": seat.launch.max_num_batched_tokens}))
        alone = load_model_facts(QWEN3_8B, EngineSettings(max_num_batched_tokens=seat.launch.max_num_batched_tokens))
        assert facts.speculative is not None and facts.speculative.num_layers > 0
        # the KV rule counts one max-length request of both models' layers
        assert seat.kv_cache_memory_bytes >= 1.25 * facts.request_kv_bytes(length) > 1.25 * alone.request_kv_bytes(length)
        assert seat.num_gpu_blocks == facts.capacity(seat.kv_cache_memory_bytes, length).num_blocks
        weights = next(part for part in seat.footprint_parts if part.name == "weights")
        assert weights.bytes == alone.weights_bytes + facts.speculative.weights_bytes and weights.inputs["draft_weights_bytes"] > 0
        assert any(line.rule == "speculative decoding" and line.inputs["draft_layers"] == facts.speculative.num_layers for line in seat.explanation)
        args = engine_command(seat.launch)
        config = json.loads(args[args.index("--speculative-config") + 1])
        assert config == {"method": "draft_model", "model": str(draft), "num_speculative_tokens": tokens}
        # what the plan wrote reads back as the settings it was sized with (verify and upgrade-check read this)
        back = planned_engine_settings(seat, "0.32")
        assert back is not None and back.speculative == settings.speculative
    assert plain.launch is not None and "--speculative-config" not in plain.launch.extra_args


def test_the_flag_in_extra_args_is_the_key(tmp_path):
    draft = DRAFTS[0]
    config = json.dumps({"model": str(draft), "num_speculative_tokens": 3})  # no method: vLLM's draft_model
    by_flag = _plan(tmp_path, f"    max_model_len: 8192\n    extra_args: [--speculative-config, '{config}']\n")
    by_key = _plan(tmp_path, f"    max_model_len: 8192\n    speculative: {{model: {draft}, num_speculative_tokens: 3}}\n")
    assert (by_flag.num_gpu_blocks, by_flag.kv_cache_memory_bytes, by_flag.footprint_bytes) == (
        by_key.num_gpu_blocks, by_key.kv_cache_memory_bytes, by_key.footprint_bytes)


def test_ngram_adds_no_memory(tmp_path):
    plain = _plan(tmp_path, "    max_model_len: 8192\n")
    ngram = _plan(tmp_path, "    max_model_len: 8192\n    speculative: {method: ngram, num_speculative_tokens: 4}\n")
    assert (ngram.num_gpu_blocks, ngram.kv_cache_memory_bytes, ngram.footprint_bytes) == (
        plain.num_gpu_blocks, plain.kv_cache_memory_bytes, plain.footprint_bytes)
    assert ngram.launch is not None and "--speculative-config" in ngram.launch.extra_args


@pytest.mark.parametrize(("lines", "named"), [
    ("    speculative: {method: ngram, num_speculative_tokens: 2}\n    extra_args: [--speculative-config, '{\"method\": \"ngram\"}']\n", "twice"),
    ("    extra_args: [--speculative-config.method, ngram]\n", "--speculative-config.method"),
    ("    extra_args: [--speculative-config, '{\"method\": \"medusa\", \"model\": \"x/y\", \"num_speculative_tokens\": 2}']\n", "medusa"),
    ("    extra_args: [--speculative-config, '{\"model\": \"x/y\", \"quantization\": \"fp8\", \"num_speculative_tokens\": 2}']\n", "quantization"),
    ("    extra_args: [--spec-method, ngram]\n", "--spec-method"),
    ("    speculative: {method: draft_model, num_speculative_tokens: 2}\n", "needs the draft's model"),
])
def test_what_seatplan_cannot_size_is_refused_by_name(tmp_path, lines, named):
    with pytest.raises(SeatplanError) as caught:
        _plan(tmp_path, lines)
    assert named in caught.value.message and caught.value.fix


def test_an_adopted_engine_with_a_draft_is_planned_with_it(tmp_path, capsys, monkeypatch):
    """`seatplan adopt` keeps a running engine's --speculative-config in extra_args; the plan models it from there."""
    draft = DRAFTS[1]
    config = json.dumps({"method": "draft_model", "model": str(draft), "num_speculative_tokens": 2})
    (tmp_path / "compose.yaml").write_text(f"""services:
  qwen:
    image: vllm/vllm-openai:v0.32.0
    command: ["{QWEN3_8B}", --max-model-len, "16384", --speculative-config, '{config}']
    ports: ['8001:8000']
    deploy: {{resources: {{reservations: {{devices: [{{driver: nvidia, device_ids: ['0'], capabilities: [gpu]}}]}}}}}}
""")
    (tmp_path / "smi.csv").write_text("index, name, uuid, memory.total [MiB], memory.reserved [MiB], memory.used [MiB]\n"
                                      "0, NVIDIA H200, GPU-0aaaaaaa-1111-2222-3333-444444444440, 143771 MiB, 551 MiB, 1000 MiB\n")
    adopted = run_cli(capsys, monkeypatch, "adopt", "--compose", f"box={tmp_path / 'compose.yaml'}", "--nvidia-smi",
                      f"box={tmp_path / 'smi.csv'}", "--timeout", "1", "-o", str(tmp_path / "fleet.yaml"))
    assert adopted.exit_code == 0, adopted.stderr
    fleet = tmp_path / "fleet.yaml"
    text = fleet.read_text(encoding="utf-8")
    assert "--speculative-config" in text
    fleet.write_text(text.replace("vllm_version: TODO", "vllm_version: '0.32'"), encoding="utf-8")  # no engine answered /version here
    seat = build_plan(load_fleet(tmp_path / "fleet.yaml")).vllm_seats()[0]
    assert seat.launch is not None and "--speculative-config" in seat.launch.extra_args
    facts = load_model_facts(QWEN3_8B, EngineSettings(max_num_batched_tokens=seat.launch.max_num_batched_tokens, speculative=SpeculativeSettings(
        method="draft_model", model=str(draft), num_speculative_tokens=2)))
    assert seat.num_gpu_blocks == facts.capacity(seat.kv_cache_memory_bytes, 16384).num_blocks
    assert seat.kv_cache_memory_bytes >= 1.25 * facts.request_kv_bytes(16384)
