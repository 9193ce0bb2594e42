"""Fixed seats from compose files: GPU services that are not vLLM (speech, TTS) become `engine: fixed` seats.

Random compose files (random service names, GPU ids as indices or UUIDs, every form of saying a service uses
GPUs, ports, volumes, with and without an nvidia-smi compute-apps CSV) are adopted; the fixed seats must land
on the right GPUs with the memory their processes hold (or a TODO naming why), plan with 0 moves where
nothing is TODO, and be refused by `seatplan plan` naming the TODO line where one is. Hostile values end in
error:/fix:, exit 2, nothing written. No engine runs here: the vLLM services' values come from their files.
"""

from __future__ import annotations

import json
import random
import re
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml

from kits.cli import run_cli
from seatplan.adopt.readers.nvidia_smi import read_compute_apps
from seatplan.documents.fleet_file import TODO
from seatplan.errors import SeatplanError

MODEL_DIR = Path(__file__).parents[1] / "fixtures" / "models"
FORMATS = Path(__file__).parents[1] / "fixtures" / "formats"
SMALL_MODELS = ("Qwen--Qwen3-0.6B", "meta-llama--Llama-3.2-3B-Instruct")
NAME_CHARS = "abcdefghijklmnopqrstuvwxyz0123456789-_"


@dataclass
class Fixed:
    name: str
    gpus: list[int]
    form: str  # how the compose file says it uses GPUs
    host_port: int | None
    container_port: int | None
    volumes: bool
    image: str
    used_mib: dict[int, list[int]] = field(default_factory=dict)  # GPU → its processes' MiB in the compute-apps CSV


def uuid(index: int) -> str:
    return f"GPU-{index:08x}-7c1b-4d83-b2e5-9f0a1c3d4e57"


def random_name(rng: random.Random, taken: set[str]) -> str:
    while True:
        name = rng.choice("abcdefghijklmnopqrstuvwxyz") + "".join(rng.choice(NAME_CHARS) for _ in range(rng.randint(0, 20)))
        if name not in taken:
            taken.add(name)
            return name


def gpu_service(rng: random.Random, seat: Fixed) -> dict:
    service: dict = {"image": seat.image}
    words = [str(gpu) if rng.random() < 0.5 else uuid(gpu) for gpu in seat.gpus]
    if seat.form == "device_ids":
        device: dict = {"device_ids": words, "capabilities": ["gpu"]}
        if rng.random() < 0.5:
            device["driver"] = "nvidia"
        service["deploy"] = {"resources": {"reservations": {"devices": [device]}}}
    elif seat.form in ("NVIDIA_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES"):
        if rng.random() < 0.5:
            service["runtime"] = "nvidia"
        value = ",".join(words)
        service["environment"] = {seat.form: value} if rng.random() < 0.5 else [f"{seat.form}={value}"]
    else:  # runtime: nvidia with every GPU visible: which GPUs it uses, no file says
        service["runtime"] = "nvidia"
    if seat.host_port is not None:
        service["ports"] = [f"{seat.host_port}:{seat.container_port}"]
    if seat.volumes:
        service["volumes"] = ["/data/cache:/cache"]
    if rng.random() < 0.5:
        service["command"] = ["--port", str(seat.container_port or 9000)]
    return service


@dataclass
class Drawn:
    compose: Path
    smi: Path
    apps: Path | None
    gpu_count: int
    engines: dict[str, int]  # vLLM seat → GPU
    fixed: list[Fixed]
    stray: int | None  # a GPU no compose service names, with memory in use


def draw(rng: random.Random, directory: Path, with_apps: bool) -> Drawn:
    gpu_count = rng.randint(2, 8)
    free = list(range(gpu_count))
    rng.shuffle(free)
    taken: set[str] = set()
    ports = iter(rng.sample(range(8000, 20000), 12))
    services: dict = {}
    engines: dict[str, int] = {}
    for _ in range(rng.randint(1, min(2, gpu_count - 1))):
        name, gpu = random_name(rng, taken), free.pop()
        model = MODEL_DIR / rng.choice(SMALL_MODELS)
        services[name] = {"image": "vllm/vllm-openai:v0.32.0", "ports": [f"{next(ports)}:8000"],
                          "command": ["--model", str(model), "--served-model-name", name, "--max-model-len", "4096"],
                          "deploy": {"resources": {"reservations": {"devices": [{"driver": "nvidia", "device_ids": [str(gpu)], "capabilities": ["gpu"]}]}}}}
        engines[name] = gpu
    fixed: list[Fixed] = []
    while free and len(fixed) < 3:
        share = bool(fixed) and fixed[-1].form != "runtime" and rng.random() < 0.2
        width = 1 if share or len(free) < 2 or rng.random() < 0.7 else 2
        gpus = list(fixed[-1].gpus[:1]) if share else sorted(free.pop() for _ in range(width))
        form = rng.choice(("device_ids", "device_ids", "NVIDIA_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES", "runtime"))
        host_port = next(ports) if rng.random() < 0.8 else None
        container_port = (host_port if rng.random() < 0.5 else rng.randint(1, 65535)) if host_port else None
        fixed.append(Fixed(name=random_name(rng, taken), gpus=gpus, form=form, host_port=host_port, container_port=container_port,
                           volumes=rng.random() < 0.3, image=rng.choice(("nvcr.io/nim/nvidia/parakeet-ctc-1.1b-asr:1.3.0", "ghcr.io/example/piper:2.1"))))
        services[fixed[-1].name] = gpu_service(rng, fixed[-1])
        if rng.random() < 0.2:
            break
    services[random_name(rng, taken)] = {"image": "ghcr.io/berriai/litellm:main-stable", "ports": [f"{next(ports)}:4000"]}
    items = list(services.items())
    rng.shuffle(items)
    compose = directory / "compose.yaml"
    compose.write_text(yaml.safe_dump({"services": dict(items)}, sort_keys=False))

    stray = free.pop() if free and rng.random() < 0.6 else None
    used = {gpu: 0 for gpu in range(gpu_count)}
    apps = ["gpu_uuid, pid, process_name, used_gpu_memory [MiB]"]
    for gpu in engines.values():
        used[gpu] = rng.randint(2000, 60000)
        apps.append(f"{uuid(gpu)}, {rng.randint(2, 4_000_000)}, VLLM::EngineCore, {used[gpu]} MiB")
    for seat in fixed:
        for gpu in seat.gpus:
            seat.used_mib[gpu] = [rng.randint(1, 40000) for _ in range(rng.randint(1, 2))]
            used[gpu] += sum(seat.used_mib[gpu])
            apps += [f"{uuid(gpu)}, {rng.randint(2, 4_000_000)}, /opt/{seat.name}/server, {mib} MiB" for mib in seat.used_mib[gpu]]
    if stray is not None:
        used[stray] = rng.randint(1025, 70000)
        apps.append(f"{uuid(stray)}, 77, python3, {used[stray]} MiB")
    smi = directory / "nvidia-smi.csv"
    smi.write_text("index, name, uuid, memory.total [MiB], memory.reserved [MiB], memory.used [MiB]\n"
                   + "".join(f"{gpu}, NVIDIA H200, {uuid(gpu)}, 143771 MiB, 551 MiB, {used[gpu]} MiB\n" for gpu in range(gpu_count)))
    apps_path = directory / "compute-apps.csv" if with_apps else None
    if apps_path is not None:
        apps_path.write_text("\n".join(apps) + "\n")
    return Drawn(compose, smi, apps_path, gpu_count, engines, fixed, stray)


def expected_cap(drawn: Drawn, seat: Fixed) -> int | None:
    """What the cap must be: the most its processes hold on one GPU, where it is alone there and the GPUs are named."""
    alone = all(other is seat or not set(other.gpus) & set(seat.gpus) for other in drawn.fixed)
    if drawn.apps is None or seat.form == "runtime" or not alone:
        return None
    return max(sum(mibs) for mibs in seat.used_mib.values()) * 2**20


@pytest.mark.parametrize("seed", range(16))
def test_random_compose_files_adopt_fixed_seats_on_their_gpus(seed, tmp_path, capsys, monkeypatch):
    rng = random.Random(seed)
    drawn = draw(rng, tmp_path, with_apps=seed % 4 != 0)
    out = tmp_path / "fleet.yaml"
    apps = ["--compute-apps", str(drawn.apps)] if drawn.apps else []
    adopted = run_cli(capsys, monkeypatch, "adopt", "--compose", f"box={drawn.compose}", "--nvidia-smi", f"box={drawn.smi}", *apps,
                      "-o", str(out), "--json")
    assert adopted.exit_code == 0, adopted.stderr
    summary = json.loads(adopted.stdout)
    data = yaml.safe_load(out.read_text())
    seats = {seat["name"]: (position, seat) for position, seat in enumerate(data["seats"])}
    assert set(seats) == set(drawn.engines) | {seat.name for seat in drawn.fixed}  # the gateway is no seat
    todo = {"policy.vllm_version"}
    for seat in drawn.fixed:
        position, written = seats[seat.name]
        assert written["engine"] == "fixed"
        if seat.form == "runtime":
            assert data["current_layout"][seat.name] == TODO and "pin" not in written
            todo.add(f"current_layout.{seat.name}")
        else:
            where = seat.gpus[0] if len(seat.gpus) == 1 else seat.gpus
            assert written["pin"] == where and data["current_layout"][seat.name] == where
            assert written.get("tensor_parallel_size", 1) == len(seat.gpus)
        assert written.get("port") == seat.host_port
        faithful = not seat.volumes and seat.form != "runtime" and seat.host_port == seat.container_port
        assert ("image" in written) == faithful
        cap = expected_cap(drawn, seat)
        assert written["memory_cap_bytes"] == (cap if cap is not None else TODO)
        if cap is None:
            todo.add(f"seats[{position}].memory_cap_bytes")
            assert any(warning.startswith(f"seat {seat.name}:") and "memory_cap_bytes is TODO" in warning for warning in summary["warnings"])
    for name, gpu in drawn.engines.items():
        assert data["current_layout"][name] == gpu
    assert set(summary["todo"]) == todo
    stray_warned = [warning for warning in summary["warnings"] if re.match(r"box GPU \d+: .*memory\.used", warning)]
    runtime_only = any(seat.form == "runtime" for seat in drawn.fixed)  # a seat on unknown GPUs: the stray GPU may be its
    if not runtime_only:
        assert [int(warning.split()[2].rstrip(":")) for warning in stray_warned] == ([drawn.stray] if drawn.stray is not None else [])

    text = out.read_text().replace("vllm_version: TODO", 'vllm_version: "0.32"')
    out.write_text(text)
    planned = run_cli(capsys, monkeypatch, "plan", str(out), "-o", str(tmp_path / "plan.json"), "--json")
    if todo == {"policy.vllm_version"}:
        assert planned.exit_code == 0, planned.stderr
        plan = json.loads((tmp_path / "plan.json").read_text())
        assert plan["moves"] == 0
        placed = {seat["name"]: seat for seat in plan["seats"]}
        for seat in drawn.fixed:
            assert placed[seat.name]["gpus"] == [f"box:{gpu}" for gpu in seat.gpus]
        for name, gpu in drawn.engines.items():
            assert placed[name]["gpus"] == [f"box:{gpu}"]
    else:
        assert planned.exit_code == 2
        lines = text.splitlines()
        first = sorted(todo - {"policy.vllm_version"})[0]
        assert re.search(rf"^error: {re.escape(str(out))}:(\d+): ", planned.stderr, re.M)
        number = int(re.search(rf"{re.escape(str(out))}:(\d+): ", planned.stderr)[1])
        assert "TODO" in lines[number - 1]
        assert first in planned.stderr or any(path in planned.stderr for path in todo)
        assert not (tmp_path / "plan.json").exists()


HOSTILE = {
    "a control in the name": {"asr\x07bell": {"image": "x/asr:1", "runtime": "nvidia", "environment": {"NVIDIA_VISIBLE_DEVICES": "0"}}},
    "a line break in the name": {"asr\nhosts:": {"image": "x/asr:1", "deploy": {"resources": {"reservations": {"devices": [
        {"capabilities": ["gpu"], "device_ids": ["0"]}]}}}}},
    "a huge device id": {"asr": {"image": "x/asr:1", "deploy": {"resources": {"reservations": {"devices": [
        {"capabilities": ["gpu"], "device_ids": [str(10**30)]}]}}}}},
    "a huge visible device": {"asr": {"image": "x/asr:1", "environment": ["CUDA_VISIBLE_DEVICES=0,99999"]}},
    "a GPU word that is a shell line": {"asr": {"image": "x/asr:1", "environment": {"NVIDIA_VISIBLE_DEVICES": "0; rm -rf /"}}},
    "a port past 65535": {"asr": {"image": "x/asr:1", "runtime": "nvidia", "ports": ["70000:9000"],
                                  "environment": {"NVIDIA_VISIBLE_DEVICES": "0"}}},
}


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_hostile_compose_values_stop_adopt_and_write_nothing(case, tmp_path, capsys, monkeypatch):
    compose = tmp_path / "compose.yaml"
    engine = {"image": "vllm/vllm-openai:v0.32.0", "command": ["--model", "m"], "ports": ["8001:8000"]}
    compose.write_text(yaml.safe_dump({"services": {"engine": engine, **HOSTILE[case]}}))
    out = tmp_path / "fleet.yaml"
    done = run_cli(capsys, monkeypatch, "adopt", "--compose", str(compose), "-o", str(out))
    assert done.exit_code == 2, done.stderr
    assert re.search(r"^error: .*\n(.*\n)*fix: ", done.stderr, re.M), done.stderr
    assert str(compose) in done.stderr
    assert not out.exists()


def test_the_container_runtime_words_for_no_gpu_and_every_gpu(tmp_path, capsys, monkeypatch):
    """NVIDIA_VISIBLE_DEVICES=none/void mounts no GPU (not a GPU user); all mounts every one (a fixed seat whose GPUs are TODO);
    a MIG device is named, but no nvidia-smi output lists it (TODO)."""
    engine = {"image": "vllm/vllm-openai:v0.32.0", "command": ["--model", "m"], "ports": ["8001:8000"]}
    services = {"engine": engine, "cpu-side": {"image": "x/tool:1", "environment": {"NVIDIA_VISIBLE_DEVICES": "void"}},
                "quiet": {"image": "x/tool:1", "environment": ["NVIDIA_VISIBLE_DEVICES=none"]},
                "every": {"image": "x/asr:1", "environment": {"NVIDIA_VISIBLE_DEVICES": "all"}},
                "mig": {"image": "x/tts:1", "environment": {"CUDA_VISIBLE_DEVICES": "MIG-GPU-5e1a0c2b-9d3f-4a7e-8b61-0c4d2e9f1a03/1/0"}}}
    compose = tmp_path / "compose.yaml"
    compose.write_text(yaml.safe_dump({"services": services}))
    out = tmp_path / "fleet.yaml"
    done = run_cli(capsys, monkeypatch, "adopt", "--compose", f"box={compose}", "-o", str(out), "--json")
    assert done.exit_code == 0, done.stderr
    data = yaml.safe_load(out.read_text())
    assert [seat["name"] for seat in data["seats"]] == ["engine", "every", "mig"]
    assert data["current_layout"]["every"] == TODO and data["current_layout"]["mig"] == TODO
    assert {"current_layout.every", "current_layout.mig", "seats[1].memory_cap_bytes", "seats[2].memory_cap_bytes"} <= set(json.loads(done.stdout)["todo"])


def test_the_compute_apps_csv_reads_as_nvidia_smi_writes_it():
    path = FORMATS / "nvidia_smi_compute_apps_with_uuid.csv"
    apps = read_compute_apps(path.read_text(), str(path))
    assert [(app.gpu_uuid, app.pid, app.process_name, app.used_mib) for app in apps] == [
        ("GPU-8f3c2a71-5d4e-4b9a-a1c2-3e7f90d1b245", 3141592, "VLLM::EngineCore", 77476),
        ("GPU-c04e91b8-27fa-4d36-9e58-6a1b2c3d4e5f", 2718281, "text-embeddings-router", 29351)]
    assert read_compute_apps("gpu_uuid, pid, process_name, used_gpu_memory [MiB]\n", "empty.csv") == []  # no process: the header only
    seen = read_compute_apps("pid, gpu_uuid, used_memory\n5, GPU-1, [N/A]\n", "na.csv")
    assert seen[0].used_mib is None  # nvidia-smi cannot see into the process: unknown, not 0
    with pytest.raises(SeatplanError, match="lacks gpu_uuid") as raised:
        read_compute_apps((FORMATS / "nvidia_smi_compute_apps.csv").read_text(), "apps.csv")
    assert "--query-compute-apps" in (raised.value.fix or "")


def rendered_fleet(rng: random.Random, directory: Path) -> tuple[Path, int, dict[str, int]]:
    """A fleet with 1-2 engines and 1-3 fixed seats, each pinned to its own GPUs; the fixed seats' caps in MiB."""
    gpu_count = rng.randint(3, 8)
    free = list(range(gpu_count))
    rng.shuffle(free)
    ports = iter(rng.sample(range(8000, 20000), 8))
    taken: set[str] = set()
    seats: list[dict] = []
    for _ in range(rng.randint(1, 2)):
        seats.append({"name": random_name(rng, taken), "model": str(MODEL_DIR / rng.choice(SMALL_MODELS)), "port": next(ports),
                      "max_model_len": 4096, "pin": free.pop()})
    caps: dict[str, int] = {}
    for _ in range(rng.randint(1, min(3, len(free)))):
        width = 2 if len(free) >= 2 and rng.random() < 0.3 else 1
        pins = sorted(free.pop() for _ in range(width))
        seat: dict = {"name": random_name(rng, taken), "engine": "fixed", "pin": pins[0] if width == 1 else pins, "tensor_parallel_size": width}
        caps[seat["name"]] = rng.randint(300, 40000)
        seat["memory_cap_bytes"] = caps[seat["name"]] * 2**20
        if rng.random() < 0.5:  # compose runs it
            seat["image"] = rng.choice(("ghcr.io/example/piper:2.1", "nvcr.io/nim/nvidia/asr:1.3.0"))
            seat["port"] = next(ports)
            if rng.random() < 0.5:
                seat["command"] = ["--port", str(seat["port"]), "--log-level", rng.choice(("info", "debug"))]
        if rng.random() < 0.5:  # render's comment line carries it, managed or not (compose itself has no place for it)
            seat["health_url"] = f"http://{rng.choice(('127.0.0.1', 'box', '[::1]'))}:{seat.get('port') or next(ports)}/health"
        seats.append(seat)
        if not free:
            break
    rng.shuffle(seats)
    fleet = {"hosts": [{"name": "box", "gpus": [{"index": index, "total_bytes": (143771 - 551) * 2**20} for index in range(gpu_count)]}],
             "policy": {"vllm_version": "0.32"}, "seats": seats}
    path = directory / "fleet.yaml"
    path.write_text(yaml.safe_dump(fleet, sort_keys=False))
    return path, gpu_count, caps


@pytest.mark.parametrize("seed", range(8))
def test_a_rendered_compose_file_adopts_back_to_the_same_fixed_seats(seed, tmp_path, capsys, monkeypatch):
    """Plan, render compose, adopt the compose file (and a compute-apps CSV holding each fixed seat's cap): the
    fixed seats come back, those compose runs from their service and the others from render's comment line,
    and the replan renders the same compose file."""
    rng = random.Random(seed)
    fleet, gpu_count, caps = rendered_fleet(rng, tmp_path)
    assert run_cli(capsys, monkeypatch, "plan", str(fleet), "-o", str(tmp_path / "plan.json")).exit_code == 0
    assert run_cli(capsys, monkeypatch, "render", str(tmp_path / "plan.json"), "--target", "compose", "-o", str(tmp_path / "roll")).exit_code == 0
    plan = json.loads((tmp_path / "plan.json").read_text())
    smi = tmp_path / "smi.csv"
    smi.write_text("index, name, uuid, memory.total [MiB], memory.reserved [MiB]\n"
                   + "".join(f"{gpu}, NVIDIA H200, {uuid(gpu)}, 143771 MiB, 551 MiB\n" for gpu in range(gpu_count)))
    apps = ["pid, process_name, gpu_uuid, used_memory [MiB]"]
    for seat in plan["seats"]:
        for ref in seat["gpus"] if seat["name"] in caps else []:
            part = rng.randint(0, caps[seat["name"]])  # one or two processes, together the cap
            apps += [f"{rng.randint(2, 4_000_000)}, worker, {uuid(int(ref.split(':')[1]))}, {mib} MiB" for mib in (part, caps[seat["name"]] - part) if mib]
    (tmp_path / "apps.csv").write_text("\n".join(apps) + "\n")
    adopted_path = tmp_path / "adopted.yaml"
    adopted = run_cli(capsys, monkeypatch, "adopt", "--compose", str(tmp_path / "roll" / "compose.yaml"), "--nvidia-smi", f"box={smi}",
                      "--compute-apps", str(tmp_path / "apps.csv"), "-o", str(adopted_path), "--json")
    assert adopted.exit_code == 0, adopted.stderr
    assert json.loads(adopted.stdout)["todo"] == ["policy.vllm_version"]
    adopted_path.write_text(adopted_path.read_text().replace("vllm_version: TODO", 'vllm_version: "0.32"'))
    written = {seat["name"]: seat for seat in yaml.safe_load(adopted_path.read_text())["seats"]}
    assert {name: written[name]["memory_cap_bytes"] for name in caps} == {name: mib * 2**20 for name, mib in caps.items()}
    planned_fixed = {seat["name"]: seat for seat in yaml.safe_load(fleet.read_text())["seats"] if seat["name"] in caps}
    assert {name: written[name].get("health_url") for name in caps} == {name: seat.get("health_url") for name, seat in planned_fixed.items()}
    assert run_cli(capsys, monkeypatch, "plan", str(adopted_path), "-o", str(tmp_path / "replan.json")).exit_code == 0
    replan = json.loads((tmp_path / "replan.json").read_text())
    assert replan["moves"] == 0
    assert {seat["name"]: seat["gpus"] for seat in replan["seats"]} == {seat["name"]: seat["gpus"] for seat in plan["seats"]}
    assert run_cli(capsys, monkeypatch, "render", str(tmp_path / "replan.json"), "--target", "compose", "-o", str(tmp_path / "again")).exit_code == 0
    assert (tmp_path / "again" / "compose.yaml").read_text() == (tmp_path / "roll" / "compose.yaml").read_text()
