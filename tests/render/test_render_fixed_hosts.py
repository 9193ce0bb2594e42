"""A host that runs only fixed seats (no vLLM engine there) still gets the compose file that runs its fixed services.

Random fleets of 1-3 hosts put engines on some hosts and fixed seats (with an image, which compose runs, or without,
which it lists as not managed) anywhere, hosts with no engine among them, and fleets with no engine at all. Render's
compose and Ansible targets must agree: one compose file per host that runs an engine or a fixed seat with an image,
each with that host's services; the playbook's compose file names point at rendered files; a host without an engine
says in its compose file that apply does not reach it. Then adopt reads the rendered compose files back (with
nvidia-smi and compute-apps CSVs per host) to a fleet that replans to the same GPUs and renders the same files.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import yaml

from kits.cli import run_cli

MODEL = Path(__file__).parents[1] / "fixtures" / "models" / "Qwen--Qwen3-0.6B"
IMAGES = ("ghcr.io/example/piper:2.1", "nvcr.io/nim/nvidia/asr:1.3.0")


def uuid(host: int, index: int) -> str:
    return f"GPU-{host:04x}{index:04x}-7c1b-4d83-b2e5-9f0a1c3d4e57"


def random_fleet(rng: random.Random, directory: Path) -> tuple[Path, dict[str, int], dict[str, int]]:
    """The fleet file, each host's GPU count, and each fixed seat's cap in MiB."""
    hosts = {f"gpu-{chr(97 + number)}": rng.randint(1, 4) for number in range(rng.randint(1, 3))}
    ports = iter(rng.sample(range(8000, 20000), 16))
    seats: list[dict] = []
    caps: dict[str, int] = {}
    engine_hosts = {host for host in hosts if rng.random() < 0.5}
    if engine_hosts == set(hosts) and rng.random() < 0.8:  # mostly a host without an engine, the case under test
        engine_hosts.discard(rng.choice(sorted(hosts)))
    for number, (host, count) in enumerate(hosts.items()):
        free = list(range(count))
        rng.shuffle(free)
        if host in engine_hosts:
            seats.append({"name": f"e{number}", "model": str(MODEL), "port": next(ports), "max_model_len": 4096, "pin": f"{host}:{free.pop()}"})
        for position in range(rng.randint(0 if host in engine_hosts else 1, len(free))):
            name = f"f{number}-{position}"
            seat: dict = {"name": name, "engine": "fixed", "pin": f"{host}:{free.pop()}"}
            caps[name] = rng.randint(300, 20000)
            seat["memory_cap_bytes"] = caps[name] * 2**20
            if rng.random() < (0.9 if host not in engine_hosts and position == 0 else 0.5):  # mostly a host compose must run
                seat |= {"image": rng.choice(IMAGES), "port": next(ports)}
            seats.append(seat)
    rng.shuffle(seats)
    fleet = {"hosts": [{"name": host, "gpus": [{"index": index, "total_bytes": (81559 - 551) * 2**20} for index in range(count)]}
                       for host, count in hosts.items()],
             "policy": {"vllm_version": "0.32"}, "seats": seats}
    path = directory / "fleet.yaml"
    path.write_text(yaml.safe_dump(fleet, sort_keys=False))
    return path, hosts, caps


def test_hosts_with_only_fixed_seats_get_their_compose_file(rng, tmp_path, capsys, monkeypatch):
    fleet, hosts, caps = random_fleet(rng, tmp_path)
    planned = run_cli(capsys, monkeypatch, "plan", str(fleet), "-o", str(tmp_path / "plan.json"))
    assert planned.exit_code == 0, planned.stderr
    rendered = run_cli(capsys, monkeypatch, "render", str(tmp_path / "plan.json"), "--target", "compose", "--target", "ansible",
                       "-o", str(tmp_path / "roll"))
    assert rendered.exit_code == 0, rendered.stderr
    plan = json.loads((tmp_path / "plan.json").read_text())
    seats = {seat["name"]: seat for seat in yaml.safe_load(fleet.read_text())["seats"]}
    host_of = {seat["name"]: seat["gpus"][0].split(":")[0] for seat in plan["seats"]}
    engines = {host_of[name] for name, seat in seats.items() if seat.get("engine") != "fixed"}
    running = {host: sorted(name for name in seats if host_of[name] == host and (seats[name].get("engine") != "fixed" or "image" in seats[name]))
               for host in hosts}
    with_file = sorted(host for host, names in running.items() if names)
    paths = {host: "compose.yaml" if len(with_file) == 1 else f"compose/{host}.yaml" for host in with_file}
    roll = tmp_path / "roll"
    assert sorted(str(path.relative_to(roll)) for path in roll.rglob("*.yaml") if "compose" in str(path.relative_to(roll))
                  and not str(path.relative_to(roll)).startswith("compose-seats/")) == sorted(paths.values())  # each seat's own file aside
    for host, path in paths.items():
        text = (roll / path).read_text()
        assert sorted(yaml.safe_load(text)["services"]) == running[host]
        assert ("no engine here, only fixed seats" in text) == (host not in engines)
    variables = yaml.safe_load((roll / "ansible" / "vars.yaml").read_text().replace("!unsafe ", ""))
    assert variables["seatplan_compose_files"] == {host: paths[host] for host in sorted(engines)}
    assert sorted(yaml.safe_load((roll / "ansible" / "inventory.yaml").read_text().replace("!unsafe ", ""))["all"]["hosts"] or {}) == sorted(engines)

    # adopt the rendered compose files back: the same seats where they run, and the same files rendered again
    args: list[str] = []
    apps = ["pid, process_name, gpu_uuid, used_memory [MiB]"]
    for number, (host, count) in enumerate(hosts.items()):
        smi = tmp_path / f"{host}.csv"
        smi.write_text("index, name, uuid, memory.total [MiB], memory.reserved [MiB]\n"
                       + "".join(f"{index}, NVIDIA H100 80GB HBM3, {uuid(number, index)}, 81559 MiB, 551 MiB\n" for index in range(count)))
        args += ["--nvidia-smi", f"{host}={smi}"]
        apps += [f"{4000 + number}, worker, {uuid(number, int(seat['gpus'][0].split(':')[1]))}, {caps[seat['name']]} MiB"
                 for seat in plan["seats"] if seat["name"] in caps and host_of[seat["name"]] == host]
    (tmp_path / "apps.csv").write_text("\n".join(apps) + "\n")
    managed = [name for name in seats if "image" in seats[name] or seats[name].get("engine") != "fixed"]
    if not managed:
        return  # every seat is a fixed one compose does not run: no compose file to adopt from
    adopted = tmp_path / "adopted.yaml"
    done = run_cli(capsys, monkeypatch, "adopt", *[word for path in paths.values() for word in ("--compose", str(roll / path))], *args,
                   "--compute-apps", str(tmp_path / "apps.csv"), "-o", str(adopted), "--json")
    assert done.exit_code == 0, done.stderr
    adopted.write_text(adopted.read_text().replace("vllm_version: TODO", 'vllm_version: "0.32"'))
    assert json.loads(done.stdout)["todo"] == ["policy.vllm_version"]
    # seats on hosts without a compose file are not in any file given: the hosts' GPUs come back from nvidia-smi alone
    assert run_cli(capsys, monkeypatch, "plan", str(adopted), "-o", str(tmp_path / "replan.json")).exit_code == 0
    replan = json.loads((tmp_path / "replan.json").read_text())
    assert replan["moves"] == 0
    back = {seat["name"]: seat["gpus"] for seat in replan["seats"]}
    assert {name: gpus for name, gpus in back.items()} == {seat["name"]: seat["gpus"] for seat in plan["seats"] if seat["name"] in back}
    if set(back) == set(seats):
        again = run_cli(capsys, monkeypatch, "render", str(tmp_path / "replan.json"), "--target", "compose", "-o", str(tmp_path / "again"))
        assert again.exit_code == 0, again.stderr
        for path in paths.values():
            assert (tmp_path / "again" / path).read_text() == (roll / path).read_text()
