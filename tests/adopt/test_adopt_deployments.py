"""Adopting hand-written deployments of random shape, fact by fact, then replanning them to 0 moves.

A random fleet (one or two hosts, 2-4 GPUs each with UUIDs, 2-6 seats of real model configs with random contexts, pins,
caps, served names and ports) is planned, and each seat is then started the way operators write it by hand,
drawn at random: a compose service (YAML anchors and merge keys, ``${VAR}`` from the ``.env`` beside it, an
``env_file:``, short or long port syntax, ``device_ids`` as indices or UUIDs, repeated), an env file holding the
whole command (``export``, quotes, CRLF, ``\\``-continued lines), a systemd unit whose ``ExecStart=`` builds the
command from ``EnvironmentFile=`` variables (``vllm serve ${MODEL} $VLLM_ARGS``), a template unit
``vllm@.service`` with ``%i``, a ``sh -c "exec vllm serve …"`` wrapper, or a unit that runs vLLM's image with
``docker run --gpus … -p … -e …``. Counts are written in vLLM's own
syntax (``32K``, ``40k``, ``16G``). Secrets sit in the files (``HF_TOKEN=hf_…``, ``--api-key sk-…``). The gateway
config reaches each engine by the host's name, the compose service's name or ``host.docker.internal``.

``seatplan adopt`` must give back every seat, port, length, pin, cap, served name and GPU that generated it,
each secret as ``{from_host_env: NAME}`` and never its value, and how each engine is started today; with the
vLLM version filled in, the fleet replans to 0 moves.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml

from kits.cli import run_cli
from seatplan.documents.fleet_file import todo_problems

MODELS = {"Qwen--Qwen3-0.6B": (4096, 40960), "Qwen--Qwen3-4B": (4096, 40960), "Qwen--Qwen3-8B": (4096, 40960),
          "meta-llama--Llama-3.2-3B-Instruct": (4096, 65536), "mistralai--Mistral-7B-v0.1": (4096, 32768)}
MODEL_DIR = Path(__file__).parents[1] / "fixtures" / "models"
GPU_MIB = (81559, 97871, 143771)
HOSTS = ("gpu-a", "gpu-b")
STYLES = ("compose", "env", "unit", "template", "shell", "docker")


@dataclass
class Drawn:
    """One seat as generated: what adopt must give back."""

    name: str
    model: str
    port: int
    length: int
    length_text: str  # as written on the command line (32K, 40k, 40960)
    kv_bytes: int | None
    kv_text: str
    cap: int | None
    served: str | None
    gpus: list[int] = field(default_factory=list)
    host: str = ""
    style: str = "env"
    secrets: dict[str, str] = field(default_factory=dict)  # env name → value (HF_TOKEN, and VLLM_API_KEY from --api-key)
    api_key: str | None = None


def _length(rng: random.Random, low: int, high: int) -> tuple[int, str]:
    form = rng.choice(["plain", "K", "k"])
    if form == "K":
        count = rng.randint(low // 1024, high // 1024)
        return count * 1024, f"{count}K"
    if form == "k":
        count = rng.randint(-(-low // 1000), high // 1000)
        return count * 1000, f"{count}k"
    value = rng.randint(low, high) // 16 * 16
    return value, str(value)


Gpus = dict[str, list[tuple[int, int, str]]]  # host → (index, memory.total MiB, UUID)


def draw_fleet(rng: random.Random, directory: Path) -> tuple[list[Drawn], Gpus]:
    hosts = {name: [(index, rng.choice(GPU_MIB), f"GPU-{rng.getrandbits(32):08x}-{index:04x}-4e19-a5f0-{rng.getrandbits(48):012x}")
                    for index in range(rng.randint(2, 4))] for name in HOSTS[: rng.randint(1, 2)]}
    ports = rng.sample(range(8001, 8999), 6)
    seats = []
    for number in range(rng.randint(2, 6)):
        model = rng.choice(sorted(MODELS))
        length, length_text = _length(rng, *MODELS[model])
        kv_bytes, kv_text = None, ""
        if rng.random() < 0.4:
            giga = rng.randint(8, 16)
            kv_bytes, kv_text = giga * 2**30, rng.choice([f"{giga}G", str(giga * 2**30)])
        style = rng.choice(STYLES)
        # a JSON argument (the cap) cannot travel in a variable that $VAR splits at whitespace: not in the template and sh -c styles
        capped = rng.random() < 0.5 and style not in ("template", "shell")
        seat = Drawn(name=f"s{number}-{model.split('--')[1].lower()}", model=str(MODEL_DIR / model), port=ports[number], length=length,
                     length_text=length_text, kv_bytes=kv_bytes, kv_text=kv_text, cap=rng.randint(256, 8192) if capped else None,
                     served=f"team/m{number}" if rng.random() < 0.5 else None, style=style)
        if rng.random() < 0.6:
            seat.secrets["HF_TOKEN"] = f"hf_{rng.getrandbits(120):030x}"
        if rng.random() < 0.4:
            seat.api_key = f"sk-local-{rng.getrandbits(96):024x}"
        seats.append(seat)
    fleet = {"hosts": [{"name": name, "gpus": [{"index": index, "total_bytes": total * 2**20} for index, total, _ in gpus]}
                       for name, gpus in hosts.items()],
             "policy": {"vllm_version": "0.32"},
             "seats": [{key: value for key, value in {"name": seat.name, "model": seat.model, "port": seat.port, "max_model_len": seat.length,
                                                        "kv_cache_memory_bytes": seat.kv_bytes, "max_new_tokens": seat.cap,
                                                        "served_model_name": seat.served}.items() if value is not None} for seat in seats]}
    (directory / "fleet.yaml").write_text(yaml.safe_dump(fleet, sort_keys=False))
    return seats, hosts


def engine_args(seat: Drawn, rng: random.Random, *, port: int | None = None) -> list[str]:
    """The engine's arguments as an operator writes them, in a random order and spelling (``port`` 0: vLLM's default)."""
    port = seat.port if port is None else port
    flags = [[] if port == 0 else ["--port", str(port)] if rng.random() < 0.7 else [f"--port={port}"],
             ["--max-model-len", seat.length_text] if rng.random() < 0.7 else [f"--max_model_len={seat.length_text}"],
             ["--gpu-memory-utilization", "0.45"]]
    if seat.kv_bytes is not None:
        flags.append(["--kv-cache-memory-bytes", seat.kv_text])
    if seat.cap is not None:
        flags.append(["--override-generation-config", json.dumps({"max_new_tokens": seat.cap})])
    if seat.served is not None:
        flags.append(["--served-model-name", seat.served])
    if seat.api_key is not None:
        flags.append(["--api-key", seat.api_key])
    rng.shuffle(flags)
    return [seat.model, *(word for flag in flags for word in flag)]


def _quote(word: str) -> str:
    return json.dumps(word) if any(char in word for char in ' "{}$') else word


def write_deployment(seats: list[Drawn], hosts: Gpus, rng: random.Random, root: Path) -> list[str]:
    """Each host's files, each seat's in its style, and the gateway's config; the adopt options that read them."""
    options: list[str] = []
    for host, gpus in hosts.items():
        (root / host).mkdir()
        options += write_host([seat for seat in seats if seat.host == host], gpus, rng, root / host, host)
    return [*options, "--litellm-config", str(_litellm(seats, rng, root))]


def write_host(seats: list[Drawn], gpus: list[tuple[int, int, str]], rng: random.Random, root: Path, host: str) -> list[str]:
    """One host's files; the adopt options that read them, each naming the host (HOST=PATH)."""
    compose_dir, env_dir, unit_dir = root / "compose", root / "env", root / "units"
    for directory in (compose_dir, env_dir, unit_dir):
        directory.mkdir()
    uuid = {index: text for index, _, text in gpus}
    services: dict[str, dict] = {}
    dotenv: list[str] = []
    for seat in seats:
        secrets = dict(seat.secrets)
        plain = {"HF_HOME": "/data/hf"}
        if seat.style == "compose":
            gpu_ids = [uuid[index] if rng.random() < 0.5 else index for index in seat.gpus] * rng.choice((1, 1, 3))  # repeated ids: one GPU
            variable = f"LEN_{len(services)}"
            dotenv.append(f"{variable}={seat.length_text}")
            container = rng.choice([seat.port, 8000, 0])  # the engine's own port in the container (0: vLLM's default, 8000)
            args = engine_args(seat, rng, port=container)
            args = [f"${{{variable}}}" if word == seat.length_text else word.replace("$", "$$") for word in args]
            container = container or 8000
            service: dict = {"<<": "ENGINE", "command": args if rng.random() < 0.5 else " ".join(_quote(word) for word in args),
                             "environment": plain,
                             "deploy": {"resources": {"reservations": {"devices": [{"driver": "nvidia", "device_ids": [str(x) for x in gpu_ids],
                                                                                     "capabilities": ["gpu"]}]}}}}
            service["ports"] = [f"{seat.port}:{container}"] if rng.random() < 0.5 else [{"target": container, "published": str(seat.port)}]
            if secrets:
                (compose_dir / f"{seat.name}.secrets.env").write_text("".join(f"{key}={value}\n" for key, value in secrets.items()))
                service["env_file"] = [f"{seat.name}.secrets.env"]
            services[seat.name] = service
            continue
        devices = ",".join(uuid[index] if rng.random() < 0.3 else str(index) for index in seat.gpus)
        if seat.style == "docker":  # a unit that runs vLLM's image; the engine listens on 8000 in the container
            args = engine_args(seat, rng, port=0)
            env_options = " ".join(f"-e {key}={value}" for key, value in {**plain, **secrets}.items())
            quoted = " ".join(f"'{word}'" if any(char in word for char in ' "{}') else word for word in args)
            (unit_dir / f"{seat.name}.service").write_text(
                f"[Service]\nExecStartPre=-/usr/bin/docker rm -f {seat.name}\n"
                f"ExecStart=/usr/bin/docker run --rm --name {seat.name} --gpus '\"device={devices}\"' -p {seat.port}:8000 \\\n"
                f"    {env_options} --ipc=host vllm/vllm-openai:v0.32.0 {quoted}\n")
            continue
        args = engine_args(seat, rng)
        if seat.style == "env":
            command = "vllm serve " + " ".join(_quote(word) for word in args)
            lines = ["# hand-written", f"export CUDA_VISIBLE_DEVICES={devices}", f'VLLM_CMD="{command.replace(chr(92), chr(92) * 2).replace(chr(34), chr(92) + chr(34))}"']
            lines += [f"{key}={value}" for key, value in {**plain, **secrets}.items()]
            newline = rng.choice(["\n", "\r\n"])
            (env_dir / f"{seat.name}.env").write_text(newline.join(lines) + newline)
            continue
        model, rest = args[0], args[1:]
        env_lines = [f"CUDA_VISIBLE_DEVICES={devices}", f"MODEL={model}", "VLLM_ARGS=" + " \\\n  ".join(
            " ".join(rest[position : position + 2]) for position in range(0, len(rest), 2))]
        env_lines += [f"{key}={value}" for key, value in {**plain, **secrets}.items()]
        if any(char in " ".join(rest) for char in '"{}'):  # a JSON argument does not split at whitespace: keep it on ExecStart
            json_words = [word for word in rest if "{" in word]
            keep = [rest[position - 1] for position, word in enumerate(rest) if "{" in word]
            rest_plain = [word for word in rest if word not in json_words and word not in keep]
            env_lines[2] = "VLLM_ARGS=" + " ".join(rest_plain)
            tail = " ".join(f"{flag} '{word}'" for flag, word in zip(keep, json_words))
        else:
            tail = ""
        if seat.style == "template":
            (unit_dir / f"{seat.name}.env").write_text("\n".join(env_lines) + "\n")
            continue
        (unit_dir / f"{seat.name}.conf").write_text("\n".join(env_lines) + "\n")
        if seat.style == "unit":
            exec_start = f"ExecStart=/opt/vllm/bin/vllm serve ${{MODEL}} $VLLM_ARGS {tail}".rstrip()
        else:
            exec_start = f"ExecStart=/bin/sh -c 'cd /srv && exec vllm serve \"$MODEL\" $VLLM_ARGS {tail.replace(chr(39), chr(34))}'".rstrip()
        (unit_dir / f"{seat.name}.service").write_text(
            f"[Unit]\nDescription=vLLM {seat.name}\n\n[Service]\nEnvironment=PYTHONUNBUFFERED=1\n"
            f"EnvironmentFile=/etc/vllm/{seat.name}.conf\n{exec_start}\nRestart=always\n\n[Install]\nWantedBy=multi-user.target\n")
    if any(seat.style == "template" for seat in seats):
        (unit_dir / "vllm@.service").write_text(
            "[Service]\nEnvironmentFile=-/etc/default/vllm\nEnvironmentFile=/etc/vllm/%i.env\n"
            "ExecStart=/usr/bin/env vllm serve ${MODEL} \\\n    $VLLM_ARGS\n")
        wants = unit_dir / "multi-user.target.wants"
        wants.mkdir()
        for seat in seats:
            if seat.style == "template":
                (wants / f"vllm@{seat.name}.service").symlink_to(unit_dir / "vllm@.service")
    options = ["--nvidia-smi", f"{host}={_smi(root, gpus)}"]
    if services:
        text = _compose_text(services, rng)
        (compose_dir / "compose.yaml").write_text(text)
        (compose_dir / ".env").write_text("\n".join(dotenv) + "\n")
        options += ["--compose", f"{host}={compose_dir / 'compose.yaml'}"]
    if any(seat.style == "env" for seat in seats):
        options += ["--env-dir", f"{host}={env_dir}"]
    if any(seat.style in ("unit", "template", "shell", "docker") for seat in seats):
        options += ["--systemd", f"{host}={unit_dir}"]
    return options


def _compose_text(services: dict[str, dict], rng: random.Random) -> str:
    """A compose file with an anchor for what engines share and a merge key in each service."""
    shared = {"image": "vllm/vllm-openai:v0.32.0", "ipc": "host", "restart": "unless-stopped"}
    body = yaml.safe_dump({"services": services}, sort_keys=False, width=1 << 20)
    body = body.replace("'<<': ENGINE", "<<: *engine")
    head = "x-engine: &engine\n" + "".join(f"  {key}: {value}\n" for key, value in shared.items())
    gateway = "  litellm:\n    image: ghcr.io/berriai/litellm:main-stable\n    ports: ['4000:4000']\n"
    return head + body + gateway


def _smi(root: Path, gpus: list[tuple[int, int, str]]) -> Path:
    lines = ["index, name, uuid, memory.total [MiB], memory.reserved [MiB], memory.used [MiB]"]
    lines += [f"{index}, NVIDIA H100 80GB HBM3, {uuid}, {total} MiB, 0 MiB, 30000 MiB" for index, total, uuid in gpus]
    path = root / "smi.csv"
    path.write_text("\n".join(lines) + "\n")
    return path


def _litellm(seats: list[Drawn], rng: random.Random, root: Path) -> Path:
    entries = []
    for seat in seats:
        served = seat.served or seat.model
        if seat.style == "compose":
            base = rng.choice([f"http://{seat.name}:{seat.port}/v1", f"http://host.docker.internal:{seat.port}/v1"])
        else:
            base = rng.choice([f"http://{seat.host}:{seat.port}/v1", f"http://host.docker.internal:{seat.port}/v1"])
        params = {"model": f"hosted_vllm/{served}", "api_base": base}
        if seat.api_key:
            params["api_key"] = "os.environ/VLLM_KEY"
        entries.append({"model_name": served, "litellm_params": params})
    path = root / "litellm.yaml"
    path.write_text(yaml.safe_dump({"model_list": entries}, sort_keys=False))
    return path


def _planned(rng: random.Random, root: Path, capsys, monkeypatch) -> tuple[list[Drawn], Gpus]:
    for _ in range(20):  # a fleet that does not fit (exit 3) runs nowhere: draw another
        seats, gpus = draw_fleet(rng, root)
        planned = run_cli(capsys, monkeypatch, "plan", str(root / "fleet.yaml"), "-o", str(root / "plan.json"), "--json")
        if planned.exit_code == 0:
            placed = {seat["name"]: seat["gpus"] for seat in json.loads((root / "plan.json").read_text())["seats"]}
            for seat in seats:
                refs = [str(ref) for ref in placed[seat.name]]
                seat.host = refs[0].rsplit(":", 1)[0] if ":" in refs[0] else next(iter(gpus))
                seat.gpus = [int(ref.rsplit(":", 1)[-1]) for ref in refs]
            return seats, gpus
        assert planned.exit_code == 3, planned.stderr
    raise AssertionError("no random fleet fitted in 20 draws")


def _layout(seat: Drawn, many_hosts: bool) -> object:
    """current_layout as the fleet file writes it: an index (HOST:INDEX with several hosts), a list for several GPUs."""
    refs: list[object] = [f"{seat.host}:{index}" for index in seat.gpus] if many_hosts else list(seat.gpus)
    return refs[0] if len(refs) == 1 else refs


@pytest.mark.parametrize("draw", range(8))
def test_a_hand_written_deployment_adopts_fact_by_fact_and_replans_to_0_moves(draw, rng, tmp_path, capsys, monkeypatch):
    local = random.Random(rng.getrandbits(64) + draw)
    seats, hosts = _planned(local, tmp_path, capsys, monkeypatch)
    options = write_deployment(seats, hosts, local, tmp_path)
    out = tmp_path / "adopted.yaml"
    adopted = run_cli(capsys, monkeypatch, "adopt", *options, "--timeout", "1", "-o", str(out), "--json")
    assert adopted.exit_code == 0, adopted.stderr
    text = out.read_text()
    for seat in seats:  # no secret's value anywhere: the file, the summary, the warnings
        for value in [*seat.secrets.values(), seat.api_key]:
            if value:
                assert value not in text and value not in adopted.stdout and value not in adopted.stderr
    summary = json.loads(adopted.stdout)
    assert summary["todo"] == ["policy.vllm_version"], (summary, text)
    data = yaml.safe_load(text)
    by_name = {seat["name"]: seat for seat in data["seats"]}
    assert sorted(by_name) == sorted(seat.name for seat in seats), text
    for seat in seats:
        got = by_name[seat.name]
        facts = {"model": got["model"], "port": got["port"], "max_model_len": got["max_model_len"],
                 "kv_cache_memory_bytes": got.get("kv_cache_memory_bytes"), "max_new_tokens": got.get("max_new_tokens"),
                 "served_model_name": got.get("served_model_name"), "gpus": data["current_layout"][seat.name]}
        assert facts == {"model": seat.model, "port": seat.port, "max_model_len": seat.length, "kv_cache_memory_bytes": seat.kv_bytes,
                         "max_new_tokens": seat.cap, "served_model_name": seat.served or seat.model,
                         "gpus": _layout(seat, len(hosts) > 1)}, (seat.style, text)
        expected_env = {"HF_HOME": "/data/hf", **{key: {"from_host_env": key} for key in seat.secrets}}
        if seat.style in ("unit", "shell"):
            expected_env["PYTHONUNBUFFERED"] = "1"  # the unit's Environment=
        if seat.api_key:  # the engine's key and the gateway's api_key for it are one reference: the gateway's (issue 44)
            expected_env["VLLM_API_KEY"] = {"from_host_env": "VLLM_KEY"}
        assert got.get("env") == expected_env, (seat.style, text)
        started = got.get("started_by")
        if seat.style == "compose":
            assert started == {"compose_file": str(tmp_path / seat.host / "compose" / "compose.yaml"), "compose_service": seat.name}
        elif seat.style == "env":
            assert started is None  # an env file alone does not say what starts it (a comment and a warning say so)
        else:
            assert started == {"systemd_unit": f"vllm@{seat.name}.service" if seat.style == "template" else f"{seat.name}.service"}, text
        if seat.length_text.endswith(("K", "k")):
            assert f"human_readable_int: {seat.length:,}" in text
    out.write_text(text.replace("vllm_version: TODO", 'vllm_version: "0.32"'))
    assert todo_problems(yaml.safe_load(out.read_text())) == []
    replanned = run_cli(capsys, monkeypatch, "plan", str(out), "-o", str(tmp_path / "replan.json"), "--json")
    assert replanned.exit_code == 0, replanned.stderr
    again = json.loads((tmp_path / "replan.json").read_text())
    assert again["moves"] == 0
    assert {seat["name"]: [str(ref) for ref in seat["gpus"]] for seat in again["seats"]} == {
        seat.name: [f"{seat.host}:{index}" for index in seat.gpus] for seat in seats}
