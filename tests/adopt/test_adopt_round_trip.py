"""Adopting a deployment seatplan rendered, without engines: the env files and an nvidia-smi CSV alone.

Random fleets (one or two hosts, 1-4 GPUs of sizes users meet, 1-5 seats of real model configs, random
contexts, pins, caps and ports) are planned and rendered; ``seatplan adopt`` reads the rendered env files
back; with the one value no file holds (the vLLM version, which only a running engine tells) filled in,
the adopted fleet replans to 0 moves and renders byte-identical env files. The real-engine version of this
round trip is tests/adopt/test_adopt_vllm.py.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
import yaml

from kits.cli import run_cli
from seatplan.documents.fleet_file import todo_problems

MODELS = {  # fixture config → contexts a user might set
    "Qwen--Qwen3-0.6B": (4096, 40960),
    "Qwen--Qwen3-4B": (4096, 40960),
    "Qwen--Qwen3-8B": (4096, 40960),
    "meta-llama--Llama-3.2-3B-Instruct": (4096, 65536),
    "mistralai--Mistral-7B-v0.1": (4096, 32768),
}
MODEL_DIR = Path(__file__).parents[1] / "fixtures" / "models"
GPU_MIB = (24564, 49140, 81559, 97871, 143771)  # 24 GB, 48 GB, H100 80 GB, 96 GB, H200 141 GB as nvidia-smi counts them


def random_fleet(rng: random.Random, directory: Path) -> tuple[Path, dict[str, list[tuple[int, int, int]]]]:
    """A fleet file and each host's GPUs as nvidia-smi would list them: (index, memory.total MiB, memory.reserved MiB)."""
    hosts = {f"gpu-{chr(97 + number)}": [(index, rng.choice(GPU_MIB), rng.choice((0, 0, 551))) for index in range(rng.randint(1, 4))]
             for number in range(rng.randint(1, 2))}
    ports = rng.sample(range(8000, 9000), 5)
    seats = []
    for number in range(rng.randint(1, 5)):
        model = rng.choice(sorted(MODELS))
        low, high = MODELS[model]
        seat = {"name": f"s{number}-{model.split('--')[1].lower()}", "model": str(MODEL_DIR / model), "port": ports[number],
                "max_model_len": rng.randint(low, high) // 16 * 16}
        if rng.random() < 0.5:
            seat["max_new_tokens"] = rng.randint(256, 8192)
        if rng.random() < 0.3:
            seat["kv_cache_memory_bytes"] = rng.randint(8, 16) * 2**30
        if rng.random() < 0.3:
            seat["served_model_name"] = f"team/{seat['name']}"
        seats.append(seat)
    fleet = {"hosts": [{"name": name, "gpus": [{"index": index, "total_bytes": (total - reserved) * 2**20} for index, total, reserved in gpus]}
                       for name, gpus in hosts.items()],
             "policy": {"vllm_version": "0.32"}, "seats": seats}
    path = directory / "fleet.yaml"
    path.write_text(yaml.safe_dump(fleet, sort_keys=False))
    return path, hosts


def smi_csvs(directory: Path, hosts: dict[str, list[tuple[int, int, int]]]) -> list[str]:
    specs = []
    for host, gpus in hosts.items():
        lines = ["index, name, uuid, memory.total [MiB], memory.reserved [MiB]"]
        lines += [f"{index}, NVIDIA Test GPU, GPU-{host}-{index:04d}-5e1a, {total} MiB, {reserved} MiB" for index, total, reserved in gpus]
        path = directory / f"{host}.csv"
        path.write_text("\n".join(lines) + "\n")
        specs += ["--nvidia-smi", f"{host}={path}"]
    return specs


def env_files(rollout: Path) -> dict[str, bytes]:
    return {path.name: path.read_bytes() for path in sorted((rollout / "env").glob("*.env"))}


@pytest.mark.parametrize("seed", range(6))
def test_a_rendered_deployment_adopts_to_the_same_plan(seed, tmp_path, capsys, monkeypatch):
    rng = random.Random(seed)
    for _ in range(20):  # a fleet that does not fit (exit 3) has nothing to render: draw another
        fleet, hosts = random_fleet(rng, tmp_path)
        planned = run_cli(capsys, monkeypatch, "plan", str(fleet), "-o", str(tmp_path / "plan.json"), "--json")
        if planned.exit_code != 3:
            break
    assert planned.exit_code == 0, planned.stderr
    assert run_cli(capsys, monkeypatch, "render", str(tmp_path / "plan.json"), "-o", str(tmp_path / "rollout")).exit_code == 0

    adopted_path = tmp_path / "adopted.yaml"
    adopted = run_cli(capsys, monkeypatch, "adopt", "--env-dir", str(tmp_path / "rollout" / "env"), *smi_csvs(tmp_path, hosts),
                      "--litellm-config", str(tmp_path / "rollout" / "litellm" / "config.yaml"), "-o", str(adopted_path), "--json")
    assert adopted.exit_code == 0, adopted.stderr
    assert json.loads(adopted.stdout)["todo"] == ["policy.vllm_version"]  # no engine ran to say it
    text = adopted_path.read_text().replace("vllm_version: TODO", 'vllm_version: "0.32"')
    assert todo_problems(yaml.safe_load(text)) == []
    adopted_path.write_text(text)

    replanned = run_cli(capsys, monkeypatch, "plan", str(adopted_path), "-o", str(tmp_path / "replan.json"), "--json")
    assert replanned.exit_code == 0, replanned.stderr
    original, again = (json.loads((tmp_path / name).read_text()) for name in ("plan.json", "replan.json"))
    assert again["moves"] == 0
    assert {seat["name"]: seat["gpus"] for seat in again["seats"]} == {seat["name"]: seat["gpus"] for seat in original["seats"]}
    assert run_cli(capsys, monkeypatch, "render", str(tmp_path / "replan.json"), "-o", str(tmp_path / "again")).exit_code == 0
    assert env_files(tmp_path / "again") == env_files(tmp_path / "rollout")
    # the GPUs came from nvidia-smi: CUDA's total is memory.total less the driver's reserve
    data = yaml.safe_load(text)
    for host in data["hosts"]:
        assert [gpu["total_bytes"] for gpu in host["gpus"]] == [(total - reserved) * 2**20 for _, total, reserved in hosts[host["name"]]]
