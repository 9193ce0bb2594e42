"""One number, one address: the plan's predicted KV blocks are what verify expects and what the Prometheus
rule alerts on; the address a fleet file gives is the one render and verify reach, IPv6 included.

Fleets are drawn at random: one to three hosts (CUDA or the CPU build, IPv4, IPv6 or a name), GPUs of
16 to 141 GiB, seats of the fixture models (full attention, sliding windows, MoE, hybrid GDN) at random
contexts, KV dtypes, batch limits and ports.
"""

from __future__ import annotations

import random
import re
from pathlib import Path

import pytest
import yaml

from kits.render import load_ansible_yaml
from seatplan.documents.fleet_file import load_fleet
from seatplan.engine.parse import parse_command_line, parse_env
from seatplan.engine.settings import EngineHost, engine_settings, planned_engine_settings
from seatplan.facts.api import load_model_facts
from seatplan.plan.planner import build_plan
from seatplan.render.bundle import render_files
from seatplan.render.settings import RenderSettings
from seatplan.verify.expect import HostInfo, seat_expectations, seat_facts

MODELS = Path(__file__).resolve().parents[1] / "fixtures" / "models"
# Models a small GPU holds; a sliding-window (gemma-3, gpt-oss), a hybrid (Qwen3-Next is too large) and MoE.
SEAT_MODELS = ["Qwen--Qwen3-0.6B", "Qwen--Qwen3-4B", "meta-llama--Llama-3.2-3B-Instruct", "microsoft--Phi-3.5-mini-instruct",
               "openai--gpt-oss-20b", "google--gemma-3-27b-it", "Qwen--Qwen3-8B", "mistralai--Mistral-7B-v0.1"]
ADDRESSES = ["fd00::5", "2001:db8:0:0:1::a", "10.1.2.3", "gpu-{n}.lan", "::1"]


def random_fleet(rng: random.Random, directory: Path) -> tuple[Path, dict]:
    hosts = []
    for number in range(rng.randint(1, 3)):
        address = rng.choice(ADDRESSES).format(n=number)
        gpus = [{"index": index, "total_bytes": f"{rng.choice([80, 94, 96, 141])}GiB"} for index in range(rng.randint(1, 3))]
        hosts.append({"name": f"h{number}", "address": address, "device": rng.choice(["cuda", "cpu"]), "gpus": gpus})
    seats = []
    # One seat per GPU: what is checked is each seat's numbers and address, not whether a fleet fits.
    free = [f"{host['name']}:{gpu['index']}" for host in hosts for gpu in host["gpus"]]
    for number, gpu in enumerate(rng.sample(free, rng.randint(1, min(3, len(free))))):
        seat = {"name": f"s{number}", "model": str(MODELS / rng.choice(SEAT_MODELS)), "port": 8000 + number,
                "max_model_len": rng.choice([1024, 4096, 8192, 16384, 32768]), "pin": gpu,
                "kv_cache_dtype": rng.choice(["auto", "auto", "fp8"])}
        if rng.random() < 0.5:
            seat["max_num_batched_tokens"] = rng.choice([512, 2048, 4096, 16384])
        if rng.random() < 0.3:
            seat["extra_args"] = [rng.choice(["--no-enable-prefix-caching", "--no-async-scheduling", "--enable-prefix-caching"])]
        seats.append(seat)
    fleet = {"hosts": hosts, "seats": seats, "policy": {"vllm_version": rng.choice(["0.32", "0.28", "0.19", "0.10.2"])}}
    path = directory / "fleet.yaml"
    path.write_text(yaml.safe_dump(fleet), encoding="utf-8")
    return path, fleet


def instance_of(expr: str) -> str:
    found = re.search(r'instance="([^"]+)"', expr)
    assert found is not None, expr
    return found[1]


@pytest.mark.parametrize("seed", range(12))
def test_plan_verify_and_alert_rule_hold_one_number(tmp_path, seed):
    rng = random.Random(seed)
    path, fleet = random_fleet(rng, tmp_path)
    loaded = load_fleet(path)
    plan = build_plan(loaded, time_limit_s=5)
    assert plan.worst_case_spare_bytes is not None, plan.infeasible
    files = render_files(plan, RenderSettings(), ["env", "ansible", "prometheus", "litellm"])
    rules = yaml.safe_load(files["prometheus/seatplan.rules.yaml"])["groups"][0]["rules"]
    hosts = {host.name: HostInfo(address=host.reachable_at, device=host.device) for host in loaded.fleet.hosts}
    expectations = {item.seat: item for item in seat_expectations(plan, hosts, loaded.base_dir, load_model_facts)}
    addresses = {host["name"]: host["address"] for host in fleet["hosts"]}
    for seat in plan.seats:
        spec = next(spec for spec in loaded.fleet.seats if spec.name == seat.name)
        # The settings verify rebuilds from the plan are the ones the plan sized the seat with.
        host = EngineHost.for_seat(loaded.fleet, spec)
        assert planned_engine_settings(seat, plan.inputs.vllm_version) == engine_settings(spec, host, plan.inputs.vllm_version)
        predicted = seat_facts(seat, plan.inputs.vllm_version, loaded.base_dir, load_model_facts)
        assert seat.kv_cache_memory_bytes is not None and seat.max_model_len is not None
        recomputed = predicted.capacity(seat.kv_cache_memory_bytes, seat.max_model_len).num_blocks
        expected = expectations[seat.name].kv
        assert expected is not None, expectations[seat.name].kv_problem
        rule = next(rule for rule in rules if rule["alert"] == "SeatplanKvBlocksDifferFromPlan" and rule["labels"]["seat"] == seat.name)
        in_rule = int(re.search(r'num_gpu_blocks!="(\d+)"', rule["expr"])[1])  # type: ignore[index]
        assert seat.num_gpu_blocks == expected.num_gpu_blocks == in_rule == recomputed
        assert expected.block_size == seat.block_size == predicted.block_size

        # The address: bracketed where it is IPv6, the same in every file and in verify.
        address = addresses[seat.host or ""]
        bracketed = f"[{address}]" if ":" in address else address
        url = f"http://{bracketed}:{seat.port}"
        assert expectations[seat.name].base_url == url
        env = parse_env(files[f"env/{seat.name}.env"])
        assert env["SEATPLAN_HEALTH_URL"] == f"{url}/health"
        assert parse_command_line(env["SEATPLAN_COMMAND"])["--max-num-batched-tokens"] == str(seat.launch.max_num_batched_tokens)  # type: ignore[union-attr]
        assert instance_of(rule["expr"]) == f"{bracketed}:{seat.port}"
        playbook_vars = load_ansible_yaml(files["ansible/vars.yaml"])
        entries = [entry for host_seats in playbook_vars["seatplan_seats"].values() for entry in host_seats]
        assert next(entry for entry in entries if entry["name"] == seat.name)["health_url"] == f"{url}/health"
        litellm = yaml.safe_load(files["litellm/config.yaml"])["model_list"]
        assert next(entry for entry in litellm if entry["model_name"] == seat.served_model_name)["litellm_params"]["api_base"] == f"{url}/v1"


def test_a_plan_at_another_version_is_predicted_again(tmp_path):
    """upgrade-check's path: away from the plan's version verify predicts the blocks from the plan's settings."""
    path, _ = random_fleet(random.Random(99), tmp_path)
    loaded = load_fleet(path)
    plan = build_plan(loaded, time_limit_s=5)
    other = "0.10.2" if plan.inputs.vllm_version != "0.10.2" else "0.32"
    hosts = {host.name: HostInfo(address=host.reachable_at, device=host.device) for host in loaded.fleet.hosts}
    for item in seat_expectations(plan, hosts, loaded.base_dir, load_model_facts, vllm_version=other):
        seat = plan.seat(item.seat)
        assert seat is not None and item.kv is not None and seat.kv_cache_memory_bytes and seat.max_model_len
        facts = seat_facts(seat, other, loaded.base_dir, load_model_facts)
        assert item.kv.num_gpu_blocks == facts.capacity(seat.kv_cache_memory_bytes, seat.max_model_len).num_blocks
