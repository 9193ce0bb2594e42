"""Values a compose file gives a seat, held to the fleet loader's own rules before adopt writes them.

Adopt writes only what ``seatplan plan`` takes, or TODO where plan must stop (naming that line). The oracle in
each test is the fleet loader itself (``parse_fleet`` on a one-seat file), never a copy of its rules:
- a fixed seat's ``image`` (compose interpolation, spaces, controls, odd first characters drawn at random);
- a served name: a vLLM engine started with an absolute ``--model`` path and no ``--served-model-name`` is served
  under that path (vLLM 0.32 vllm/entrypoints/launchers/api_server/app_state.py:49-52), which plan, render and the
  gateway config carry as is; a relative path is TODO;
- a fixed seat's ``health_url`` from its compose ``healthcheck`` (string, CMD and CMD-SHELL forms, curl and wget,
  published ports, the host network, hostile URLs), checked through plan and render's playbook variables.
No engine runs here: the values come from the files; tests/adopt/test_adopt_vllm.py runs the real ones.
"""

from __future__ import annotations

import http.server
import json
import random
import re
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import yaml

from kits.cli import run_cli
from seatplan.documents.fleet_file import TODO, parse_fleet
from seatplan.errors import SeatplanError

MODEL = Path(__file__).parents[1] / "fixtures" / "models" / "Qwen--Qwen3-0.6B"
WORD = "abcdefghijklmnopqrstuvwxyz0123456789"
# Images compose takes and the fleet file may refuse: compose variables, a space, a control, a leading '-' or '.', non-ASCII
ODD_IMAGES = ("${REGISTRY}/asr:1", "${IMAGE:-ghcr.io/x/y:1}", "ghcr.io/x/a b:1", "-x/y:1", ".x/y:1", "x/y\x07:1", "rëgistry/x:1",
              "x/y:1 ; id", "x/'y':1", "x/y:`id`")


def uuid(index: int) -> str:
    return f"GPU-{index:08x}-1c1b-4d83-b2e5-9f0a1c3d4e57"


def word(rng: random.Random, low: int = 1, high: int = 12) -> str:
    return rng.choice(WORD[:26]) + "".join(rng.choice(WORD + "-_") for _ in range(rng.randint(low, high) - 1)).rstrip("-_")


def loader_takes(key: str, value: object, engine: str = "fixed") -> bool:
    """The fleet loader's verdict on one seat value (what ``seatplan plan`` reads the file with)."""
    seat: dict = {"name": "probe", "engine": engine, key: value}
    seat |= {"memory_cap_bytes": 2**30} if engine == "fixed" else {"model": str(MODEL), "port": 8000}
    text = yaml.safe_dump({"hosts": [{"name": "box", "gpus": [{"index": 0, "total_bytes": 2**34}]}], "seats": [seat]})
    try:
        parse_fleet(text, "probe.yaml")
    except SeatplanError:
        return False
    return True


def box_files(directory: Path, gpus: int, used: dict[int, int], host: str = "box") -> list[str]:
    """nvidia-smi and compute-apps CSVs of one box, in the format nvidia-smi prints; each used GPU holds one process."""
    smi = directory / "smi.csv"
    smi.write_text("index, name, uuid, memory.total [MiB], memory.reserved [MiB], memory.used [MiB]\n"
                   + "".join(f"{gpu}, NVIDIA H100 80GB HBM3, {uuid(gpu)}, 81559 MiB, 551 MiB, {used.get(gpu, 0)} MiB\n" for gpu in range(gpus)))
    apps = directory / "apps.csv"
    apps.write_text("pid, process_name, gpu_uuid, used_memory [MiB]\n"
                    + "".join(f"{1000 + gpu}, server, {uuid(gpu)}, {mib} MiB\n" for gpu, mib in used.items()))
    return ["--nvidia-smi", f"{host}={smi}", "--compute-apps", str(apps)]


def engine_service(model: str, gpu: int, port: int, served: str | None = "engine") -> dict:
    command = ["--model", model, "--max-model-len", "4096"] + (["--served-model-name", served] if served else [])
    return {"image": "vllm/vllm-openai:v0.32.0", "command": command, "ports": [f"{port}:8000"],
            "deploy": {"resources": {"reservations": {"devices": [{"driver": "nvidia", "device_ids": [str(gpu)], "capabilities": ["gpu"]}]}}}}


def fixed_service(gpu: int, port: int, image: str) -> dict:
    """A GPU service seatplan's compose file could run as is (its image, its port as PORT:PORT, its GPU)."""
    return {"image": image, "ports": [f"{port}:{port}"], "command": ["--port", str(port)],
            "deploy": {"resources": {"reservations": {"devices": [{"capabilities": ["gpu"], "device_ids": [str(gpu)]}]}}}}


def adopt(capsys, monkeypatch, out: Path, *args: str) -> tuple[dict, dict, str]:
    done = run_cli(capsys, monkeypatch, "adopt", *args, "-o", str(out), "--json")
    assert done.exit_code == 0, done.stderr
    text = out.read_text().replace("vllm_version: TODO", 'vllm_version: "0.32"')
    out.write_text(text)
    return json.loads(done.stdout), yaml.safe_load(text), text


def plan_refuses_at_a_todo_line(capsys, monkeypatch, fleet: Path, text: str, path: str) -> None:
    planned = run_cli(capsys, monkeypatch, "plan", str(fleet), "-o", str(fleet.with_suffix(".json")))
    assert planned.exit_code == 2 and not fleet.with_suffix(".json").exists(), planned.stderr
    number = int(re.search(rf"^error: {re.escape(str(fleet))}:(\d+): ", planned.stderr, re.M)[1])
    assert text.splitlines()[number - 1].split("#")[0].rstrip().endswith(f": {TODO}") and path in planned.stderr, planned.stderr


# ----------------------------------------------------------------------------- 1a: a fixed seat's image


def test_fixed_seat_images_the_fleet_file_refuses_are_todo_and_plan_stops_there(rng, tmp_path, capsys, monkeypatch):
    gpus = rng.randint(2, 8)
    ports = iter(rng.sample(range(8000, 30000), 10))
    services = {"engine": engine_service(str(MODEL), 0, next(ports))}
    images: dict[str, str] = {}
    for gpu in range(1, rng.randint(2, gpus)):
        name = f"svc{gpu}-{word(rng)}"
        good = "/".join(word(rng) for _ in range(rng.randint(1, 3))) + rng.choice(("", f":{rng.randint(1, 9)}.{rng.randint(0, 9)}"))
        images[name] = rng.choice(ODD_IMAGES) if rng.random() < 0.6 else good
        services[name] = fixed_service(gpu, next(ports), images[name])
    (tmp_path / "compose.yaml").write_text(yaml.safe_dump({"services": services}))
    fleet = tmp_path / "fleet.yaml"
    summary, data, text = adopt(capsys, monkeypatch, fleet, "--compose", f"box={tmp_path / 'compose.yaml'}",
                                *box_files(tmp_path, gpus, {gpu: rng.randint(100, 9000) for gpu in range(1, len(images) + 1)}))
    seats = {seat["name"]: (position, seat) for position, seat in enumerate(data["seats"])}
    refused = [name for name, image in images.items() if not loader_takes("image", image)]
    for name, image in images.items():
        position, seat = seats[name]
        if name in refused:
            assert seat["image"] == TODO and f"seats[{position}].image" in summary["todo"]
            warning = next(warning for warning in summary["warnings"] if warning.startswith(f"seat {name}: "))
            assert "image is TODO" in warning and "fix: " in warning
        else:
            assert seat["image"] == image and seat["command"] == ["--port", str(seat["port"])]
    assert summary["todo"] == ["policy.vllm_version"] + [f"seats[{seats[name][0]}].image" for name in refused]
    if refused:
        plan_refuses_at_a_todo_line(capsys, monkeypatch, fleet, text, f"seats[{seats[refused[0]][0]}].image")
        # the operator writes the image compose pulls: then plan takes the file as is
        fleet.write_text(re.sub(r"^(\s+)image: TODO .*$", r"\1image: ghcr.io/example/filled:1", text, flags=re.M))
    assert run_cli(capsys, monkeypatch, "plan", str(fleet), "-o", str(tmp_path / "plan.json")).exit_code == 0
    assert run_cli(capsys, monkeypatch, "render", str(tmp_path / "plan.json"), "--target", "compose", "-o", str(tmp_path / "roll")).exit_code == 0
    rendered = yaml.safe_load((tmp_path / "roll" / "compose.yaml").read_text())["services"]
    assert {name: rendered[name]["image"] for name in images} == {
        name: "ghcr.io/example/filled:1" if name in refused else image for name, image in images.items()}


# ----------------------------------------------------------------------------- 1b: served under the --model path


def test_an_engine_served_under_its_absolute_model_path_plans_renders_and_adopts_back(rng, tmp_path, capsys, monkeypatch):
    """No --served-model-name: vLLM serves the engine under its --model string, and clients ask for that path."""
    model = tmp_path.joinpath(*(word(rng) + rng.choice(("", ".", "_v")) + word(rng, 0, 4) for _ in range(rng.randint(1, 4))))
    model.parent.mkdir(parents=True, exist_ok=True)
    model.symlink_to(MODEL, target_is_directory=True)
    gpus, port = rng.randint(1, 4), rng.randint(8000, 30000)
    gpu = rng.randrange(gpus)
    (tmp_path / "compose.yaml").write_text(yaml.safe_dump({"services": {"engine": engine_service(str(model), gpu, port, served=None)}}))
    fleet = tmp_path / "fleet.yaml"
    summary, data, _ = adopt(capsys, monkeypatch, fleet, "--compose", f"box={tmp_path / 'compose.yaml'}", *box_files(tmp_path, gpus, {}))
    assert summary["todo"] == ["policy.vllm_version"] and data["seats"][0]["served_model_name"] == str(model)
    assert run_cli(capsys, monkeypatch, "plan", str(fleet), "-o", str(tmp_path / "plan.json")).exit_code == 0
    rendered = run_cli(capsys, monkeypatch, "render", str(tmp_path / "plan.json"), "-o", str(tmp_path / "roll"))
    assert rendered.exit_code == 0, rendered.stderr
    env = (tmp_path / "roll" / "env" / "engine.env").read_text()
    assert f"--served-model-name {model} " in env
    gateway = yaml.safe_load((tmp_path / "roll" / "litellm" / "config.yaml").read_text())["model_list"]
    assert [(entry["model_name"], entry["litellm_params"]["model"]) for entry in gateway] == [(str(model), f"hosted_vllm/{model}")]
    # seatplan's own files adopt back to the same name, and the replan renders the same env file
    again = tmp_path / "again.yaml"
    summary, data, _ = adopt(capsys, monkeypatch, again, "--compose", str(tmp_path / "roll" / "compose.yaml"), *box_files(tmp_path, gpus, {}))
    assert data["seats"][0]["served_model_name"] == str(model) and summary["todo"] == ["policy.vllm_version"]
    assert run_cli(capsys, monkeypatch, "plan", str(again), "-o", str(tmp_path / "replan.json")).exit_code == 0
    assert run_cli(capsys, monkeypatch, "render", str(tmp_path / "replan.json"), "-o", str(tmp_path / "roll2")).exit_code == 0
    assert (tmp_path / "roll2" / "env" / "engine.env").read_bytes() == env.encode()


def test_a_model_path_no_served_name_can_carry_is_todo_with_the_fix(rng, tmp_path, capsys, monkeypatch):
    path = rng.choice(("./models/", "../", "~/", "/-", "/srv/my models/", "/srv/x'")) + word(rng)
    (tmp_path / "compose.yaml").write_text(yaml.safe_dump({"services": {"engine": engine_service(path, 0, 8001, served=None)}}))
    fleet = tmp_path / "fleet.yaml"
    summary, data, text = adopt(capsys, monkeypatch, fleet, "--compose", f"box={tmp_path / 'compose.yaml'}", *box_files(tmp_path, 1, {}))
    assert not loader_takes("served_model_name", path, engine="vllm")
    assert data["seats"][0]["served_model_name"] == TODO and "seats[0].served_model_name" in summary["todo"]
    assert any(warning.startswith("seat engine: ") and "--served-model-name" in warning.split("fix: ")[1] for warning in summary["warnings"])
    plan_refuses_at_a_todo_line(capsys, monkeypatch, fleet, text, "seats[0].served_model_name")


@contextmanager
def engine_stand_in(served: str, root: str, port_holder: list[int]) -> Iterator[str]:
    """A STAND-IN engine on 127.0.0.1 answering /v1/models, /version and /metrics as vLLM 0.32 does (vllm/entrypoints/
    openai/api_server.py show_available_models, show_version; cache_config_info): a real engine serving a Hub id would
    need that model's weights here, and test_adopt_vllm.py runs real ones."""
    answers = {"/v1/models": json.dumps({"object": "list", "data": [{"id": served, "object": "model", "root": root, "max_model_len": 4096}]}),
               "/version": json.dumps({"version": "0.32.0"}),
               "/metrics": 'vllm:cache_config_info{block_size="16",kv_cache_memory_bytes="1073741824",cache_dtype="auto"} 1.0\n'}

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = answers.get(self.path, "").encode()
            self.send_response(200 if body else 404)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            return

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    port_holder.append(server.server_address[1])
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_an_engine_known_only_by_its_url_is_a_seat_named_for_what_it_serves(rng, tmp_path, capsys, monkeypatch):
    """vLLM serves `vllm serve Qwen/Qwen3-8B` as 'Qwen/Qwen3-8B' and an absolute --model as its path: the seat is
    named for the last part (a seat name holds no '/'), and clients keep asking for the served name."""
    served = rng.choice((f"{word(rng)}/{word(rng)}-{rng.randint(1, 70)}B", "/" + "/".join(word(rng) for _ in range(rng.randint(1, 4))), word(rng)))
    ports: list[int] = []
    with engine_stand_in(served, str(MODEL), ports) as url:
        fleet = tmp_path / "fleet.yaml"
        summary, data, text = adopt(capsys, monkeypatch, fleet, "--engine", url, *box_files(tmp_path, 1, {}, host="127.0.0.1"))
    seat = data["seats"][0]
    assert seat["name"] == served.rsplit("/", 1)[-1] and seat.get("served_model_name", seat["name"]) == served
    assert summary["todo"] == [f"current_layout.{seat['name']}"]  # only its files would say which GPU
    fleet.write_text(text.replace(f"{seat['name']}: TODO", f"{seat['name']}: 0"))
    assert run_cli(capsys, monkeypatch, "plan", str(fleet), "-o", str(tmp_path / "plan.json")).exit_code == 0
    planned = json.loads((tmp_path / "plan.json").read_text())["seats"][0]
    assert (planned["name"], planned["served_model_name"], planned["kv_cache_memory_bytes"]) == (seat["name"], served, 2**30)


# ----------------------------------------------------------------------------- 2: healthcheck → health_url

HOSTILE_URL_PARTS = ("`id`", "$(id)", "$$HOME", "'", '"', "\\", " x", "\x1b[2J", "\u2028", "{{ lookup('pipe','id') }}", ";id", "%0a")


def draw_healthcheck(rng: random.Random, port: int) -> tuple[dict, dict, str | None]:
    """A service's healthcheck, its other keys, and the health_url the GPU host reaches it at (None: none can be told)."""
    container = port if rng.random() < 0.5 else rng.randint(1, 65535)
    service: dict = {"ports": [f"{port}:{container}"]}
    reachable = True
    host = rng.choice(("localhost", "127.0.0.1", "[::1]", "asr-backend", "10.1.2.3"))
    target = container
    if rng.random() < 0.2:
        service["network_mode"] = "host"
        target = rng.randint(1, 65535)
    elif host in ("asr-backend", "10.1.2.3") or rng.random() < 0.15:
        reachable = False  # another host from inside the container, or a port it does not publish
        if host not in ("asr-backend", "10.1.2.3"):
            target = container + 1 if container < 65535 else container - 1
    scheme = rng.choice(("http", "http", "https", "ftp", "file"))
    path = "/" + "/".join(word(rng) for _ in range(rng.randint(0, 3)))
    if rng.random() < 0.3:
        path += rng.choice(HOSTILE_URL_PARTS)
    url = f"{scheme}://{host}:{target}{path}"
    fetcher = rng.choice(("curl", "curl", "wget", "/usr/bin/curl", "python3", "nc"))
    flags = {"curl": ["-fsS"], "wget": ["-q", "-O", "-"]}.get(fetcher.rsplit("/", 1)[-1], [])
    form = rng.choice(("string", "CMD", "CMD-SHELL"))
    if form == "CMD":
        test: object = ["CMD", fetcher, *flags, url]
    else:
        line = " ".join([fetcher, *flags, _shell_quoted(url)] + (["||", "exit", "1"] if rng.random() < 0.5 else []))
        test = line if form == "string" else ["CMD-SHELL", line]
    service["healthcheck"] = {"test": test, "interval": "10s"}
    if fetcher.rsplit("/", 1)[-1] not in ("curl", "wget") or scheme not in ("http", "https") or not reachable:
        return service, {}, None
    # compose writes a literal $ as $$, in every form; from the host the container's port is the published one
    return service, {}, f"{scheme}://{host}:{target if 'network_mode' in service else port}{path.replace('$$', '$')}"


def _shell_quoted(url: str) -> str:
    return "'" + url.replace("'", "'\\''") + "'"


def test_a_compose_healthcheck_gives_a_fixed_seat_its_health_url_or_nothing(rng, tmp_path, capsys, monkeypatch):
    count = rng.randint(1, 5)
    ports = rng.sample(range(9000, 30000), count + 1)
    services: dict = {"engine": engine_service(str(MODEL), 0, ports[-1])}
    expected: dict[str, str | None] = {}
    for gpu in range(1, count + 1):
        name = f"svc{gpu}-{word(rng)}"
        service, _, url = draw_healthcheck(rng, ports[gpu - 1])
        services[name] = service | {"image": "ghcr.io/example/asr:1",
                                    "deploy": {"resources": {"reservations": {"devices": [{"capabilities": ["gpu"], "device_ids": [str(gpu)]}]}}}}
        expected[name] = url
    (tmp_path / "compose.yaml").write_text(yaml.safe_dump({"services": services}))
    fleet = tmp_path / "fleet.yaml"
    summary, data, text = adopt(capsys, monkeypatch, fleet, "--compose", f"box={tmp_path / 'compose.yaml'}",
                                *box_files(tmp_path, count + 1, {gpu: 1000 + gpu for gpu in range(1, count + 1)}))
    assert summary["todo"] == ["policy.vllm_version"]
    seats = {seat["name"]: seat for seat in data["seats"]}
    for name, url in expected.items():
        warned = [warning for warning in summary["warnings"] if warning.startswith(f"seat {name}: ") and "health_url left out" in warning]
        if url is not None and loader_takes("health_url", url):
            assert seats[name]["health_url"] == url and not warned
            line = next(line for line in text.splitlines() if line.strip().startswith("health_url:") and url in line)
            assert "healthcheck" in line.split("#", 1)[1]  # the comment names where it came from
        else:
            assert "health_url" not in seats[name]
            assert bool(warned) == (url is not None)  # a URL the fleet file refuses is warned about; no URL at all is not
    assert run_cli(capsys, monkeypatch, "plan", str(fleet), "-o", str(tmp_path / "plan.json")).exit_code == 0
    assert run_cli(capsys, monkeypatch, "render", str(tmp_path / "plan.json"), "--target", "ansible", "-o", str(tmp_path / "roll")).exit_code == 0
    waits = yaml.safe_load(re.sub(r"!unsafe ", "", (tmp_path / "roll" / "ansible" / "vars.yaml").read_text()))["seatplan_fixed"]["box"]
    assert {wait["name"]: wait["health_url"] for wait in waits} == {name: seats[name]["health_url"] for name in expected if "health_url" in seats[name]}


# ----------------------------------------------------------------------------- any other value the loader refuses

REFUSED_WORDS = {  # an engine's command as compose starts it → the seat key the loader refuses there
    "a quote in the model path": (["--model", "/srv/it's/model"], "model"),
    "a quote in another argument": (["--model", str(MODEL), "--chat-template", "/srv/it's.jinja"], "extra_args"),
    "an escape in another argument": (["--model", str(MODEL), "--api-key-file", "/run/\x1b[2Jkey"], "extra_args"),
    "a control in the dtype": (["--model", str(MODEL), "--dtype", "bfloat16\x07"], "dtype"),
}


@pytest.mark.parametrize("case", sorted(REFUSED_WORDS))
def test_an_engine_value_the_fleet_file_refuses_is_todo_and_plan_stops_there(case, tmp_path, capsys, monkeypatch):
    command, key = REFUSED_WORDS[case]
    service = engine_service(str(MODEL), 0, 8001) | {"command": [*command, "--served-model-name", "engine"]}
    (tmp_path / "compose.yaml").write_text(yaml.safe_dump({"services": {"engine": service}}))
    fleet = tmp_path / "fleet.yaml"
    summary, data, text = adopt(capsys, monkeypatch, fleet, "--compose", f"box={tmp_path / 'compose.yaml'}", *box_files(tmp_path, 1, {}))
    assert data["seats"][0][key] == TODO and summary["todo"] == ["policy.vllm_version", f"seats[0].{key}"]
    assert any(warning.startswith(f"seat engine: {key}: ") and "fix: " in warning for warning in summary["warnings"])
    plan_refuses_at_a_todo_line(capsys, monkeypatch, fleet, text, f"seats[0].{key}")
