"""How a box starts vLLM today, adopted (issue 50): the launcher its units and env files run, the image its compose
services run and the restart mode they share become hosts[].launcher, image and restart, each with the line it came
from; a unit that sources its env file in a shell (`bash -c 'source FILE && exec …'`) is linked to it (started_by
filled, the file read through the unit); a GPU nothing runs on in any source is offered as keep_clear in a comment; and
no address is written where no engine URL named one (a fixed seat's healthcheck is asked on the host itself)."""

from __future__ import annotations

import random
import re
from pathlib import Path

import yaml

from kits.cli import run_cli
from seatplan.documents.fleet_file import parse_fleet

UUIDS = [f"GPU-{index:08x}-1111-2222-3333-{index:012x}" for index in range(8)]


def smi(path: Path, count: int, used: list[int] | None) -> Path:
    header = "index, name, uuid, memory.total [MiB], memory.reserved [MiB]" + (", memory.used [MiB]" if used else "")
    rows = [f"{index}, NVIDIA H100 80GB HBM3, {UUIDS[index]}, 81559 MiB, 551 MiB" + (f", {used[index]} MiB" if used else "") for index in range(count)]
    path.write_text("\n".join([header, *rows]) + "\n")
    return path


def unit_text(launcher: str, gpu: int, port: int, sourced: bool, env_file: Path) -> str:
    if sourced:  # the command's variables come from the file the script sources, not from EnvironmentFile=
        start = f"/bin/bash -c 'source {env_file} && exec {launcher} \"$MODEL\" $VLLM_ARGS'"
        return f"[Service]\nExecStart={start}\n"
    return f"[Service]\nEnvironmentFile={env_file}\nExecStart={launcher} ${{MODEL}} $VLLM_ARGS\n"


def adopted(capsys, monkeypatch, *args: str, out: Path) -> tuple[str, dict]:
    done = run_cli(capsys, monkeypatch, "adopt", *args, "-o", str(out))
    assert done.exit_code == 0, done.stderr
    text = out.read_text()
    return text, yaml.safe_load(text)


def line_of(text: str, pattern: str) -> str:
    (found,) = [line for line in text.splitlines() if re.search(pattern, line)]
    return found


def test_units_launcher_sourced_env_files_restart_and_keep_clear(tmp_path: Path, capsys, monkeypatch, rng: random.Random):
    folders = "/".join(rng.choice(["opt", "srv", "vllm", ".venv", "env-0.11", "usr/local"]) for _ in range(rng.randint(1, 3)))
    launcher = rng.choice([f"/{folders}/bin/vllm serve", f"/{folders}/bin/python3 -m vllm.entrypoints.openai.api_server"])
    count = rng.randint(2, 8)
    seats = rng.sample(range(count), rng.randint(1, count - 1))  # GPUs with an engine; the others run nothing
    units = tmp_path / "units"
    units.mkdir()
    sourced = {}
    for number, gpu in enumerate(seats):
        env_file = units / f"llm{number}.env"
        env_file.write_text(f"MODEL=/models/m{number}\nVLLM_ARGS=\"--port {8100 + number} --max-model-len 4096\"\nCUDA_VISIBLE_DEVICES={gpu}\nHF_HOME=/data/hf\n")
        sourced[f"llm{number}"] = rng.random() < 0.6
        (units / f"llm{number}.service").write_text(unit_text(launcher, gpu, 8100 + number, sourced[f"llm{number}"], Path("/etc/vllm") / env_file.name))
    used = [rng.randint(0, 900) for _ in range(count)] if rng.random() < 0.5 else None
    text, fleet = adopted(capsys, monkeypatch, "--systemd", f"box={units}", "--nvidia-smi", f"box={smi(tmp_path / 'smi.csv', count, used)}",
                          out=tmp_path / "fleet.yaml")
    host = fleet["hosts"][0]
    assert host["launcher"] == launcher.split()
    assert re.search(rf"launcher: .*  # {re.escape(str(units))}/llm\d+\.service:[23]: ExecStart", text)
    assert host["restart"] == "systemd" and "address" not in host and "image" not in host
    for seat in fleet["seats"]:
        # linked to its unit either way: started_by filled, and the file's other variable is the engine's
        assert seat["started_by"] == {"systemd_unit": f"{seat['name']}.service"}, seat["name"]
        assert seat["env"] == {"HF_HOME": "/data/hf"} and seat["port"] == 8100 + int(seat["name"][3:])
    assert fleet["current_layout"] == {f"llm{number}": gpu for number, gpu in enumerate(seats)}
    # keep_clear offered, as a comment, on exactly the GPUs no seat's file names and nvidia-smi shows nothing on
    offered, index = set(), None
    for line in text.splitlines():
        found = re.match(r"\s+- index: (\d+)", line)
        index = int(found[1]) if found else index
        if line.strip().startswith("# keep_clear: true  # no adopted seat's files name it"):
            offered.add(index)
    assert offered == set(range(count)) - set(seats)
    # uncommented, it is a key the fleet loader takes
    parse_fleet(text.replace("# keep_clear: true  #", "keep_clear: true  #").replace("TODO", '"0.11"'), str(tmp_path / "fleet.yaml"))


def test_compose_images_and_mixed_restarts(tmp_path: Path, capsys, monkeypatch, rng: random.Random):
    tag = f"v0.{rng.randint(9, 32)}.{rng.randint(0, 2)}"
    compose = tmp_path / "compose.yaml"
    services = {f"e{number}": {"image": f"vllm/vllm-openai:{tag}", "command": ["--model", f"/models/e{number}", "--port", "8000"],
                               "ports": [f"{8200 + number}:8000"],
                               "deploy": {"resources": {"reservations": {"devices": [{"driver": "nvidia", "device_ids": [str(number)], "capabilities": ["gpu"]}]}}}}
                for number in range(rng.randint(1, 3))}
    # a TTS service whose healthcheck asks the container's loopback: not the engines' address
    services["tts"] = {"image": "ghcr.io/example/tts:1", "command": ["--port", "8300"], "ports": ["8300:8300"], "runtime": "nvidia",
                       "environment": {"NVIDIA_VISIBLE_DEVICES": "3"}, "healthcheck": {"test": ["CMD", "curl", "-f", "http://localhost:8300/health"]}}
    compose.write_text(yaml.safe_dump({"services": services}))
    text, fleet = adopted(capsys, monkeypatch, "--compose", f"box={compose}", "--nvidia-smi", f"box={smi(tmp_path / 'smi.csv', 4, None)}",
                          out=tmp_path / "fleet.yaml")
    host = fleet["hosts"][0]
    assert host["image"] == f"vllm/vllm-openai:{tag}" and host["restart"] == "compose" and "launcher" not in host
    assert "address" not in host, line_of(text, "address")
    assert re.search(rf"image: vllm/vllm-openai:{re.escape(tag)}  # {re.escape(str(compose))}:\d+: image", text)
    # a unit beside the compose file: two restart modes, a comment naming each, no value
    units = tmp_path / "units"
    units.mkdir()
    (units / "coder.env").write_text("MODEL=/models/coder\nVLLM_ARGS=--port 8400\nCUDA_VISIBLE_DEVICES=2\n")
    (units / "coder.service").write_text(unit_text("/opt/vllm/bin/vllm serve", 2, 8400, rng.random() < 0.5, Path("/etc/vllm/coder.env")))
    text, fleet = adopted(capsys, monkeypatch, "--compose", f"box={compose}", "--systemd", f"box={units}",
                          "--nvidia-smi", f"box={smi(tmp_path / 'smi.csv', 4, None)}", out=tmp_path / "mixed.yaml")
    host = fleet["hosts"][0]
    assert "restart" not in host and host["launcher"] == ["/opt/vllm/bin/vllm", "serve"]
    said = line_of(text, "# restart:")
    assert "coder by systemd" in said and "by compose" in said and "render --restart picks one" in said
