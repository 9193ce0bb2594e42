"""Each adopt reader on real formats, odd ones and hostile ones; the writer on any string; the TODO refusal.

Fast: no engine (the HTTP reader's real-engine test is test_adopt_vllm.py; its hostile answers come from a
stand-in server on localhost below, because a real vLLM cannot be made to answer garbage).
"""

from __future__ import annotations

import http.server
import json
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kits.cli import run_cli
from seatplan import __version__
from seatplan.adopt.args import read_args
from seatplan.adopt.assemble import Noted
from seatplan.adopt.engines import checked_base_url, probe_engine
from seatplan.adopt.readers.compose import read_compose as read_compose_and_warnings
from seatplan.adopt.readers.env_files import read_env_file
from seatplan.adopt.readers.litellm import read_litellm_config
from seatplan.adopt.readers.nvidia_smi import read_smi_csv
from seatplan.adopt.writer import comment, fleet_text, scalar
from seatplan.documents.fleet import SeatSpec
from seatplan.documents.fleet_file import control_problems, parse_fleet, resolve_model
from seatplan.errors import SeatplanError

FORMATS = Path(__file__).parents[1] / "fixtures" / "formats"


def read_compose(path):
    return read_compose_and_warnings(path)[0]


# ----------------------------------------------------------------------------- nvidia-smi


@given(st.lists(st.tuples(st.text(st.characters(min_codepoint=32, max_codepoint=126, exclude_characters=',"'), min_size=1, max_size=30)
                          .filter(lambda name: name.strip() == name and not name.startswith("index")),
                          st.integers(1024, 200_000), st.integers(0, 4096)), min_size=1, max_size=8),
       st.booleans(), st.booleans())
def test_nvidia_smi_reads_back_every_gpu(gpus, units, reserved_column):
    header = "index, name, uuid, memory.total [MiB]" + (", memory.reserved [MiB]" if reserved_column else "")
    suffix = " MiB" if units else ""
    lines = [header] + [f"{index}, {name}, GPU-{index:08x}-aaaa, {total}{suffix}" + (f", {reserved}{suffix}" if reserved_column else "")
                        for index, (name, total, reserved) in enumerate(gpus)]
    read = read_smi_csv("\n".join(lines) + "\n", "smi.csv", None)
    assert [(gpu.index, gpu.name, gpu.uuid, gpu.total_mib) for gpu in read] == [
        (index, name, f"GPU-{index:08x}-aaaa", total) for index, (name, total, _) in enumerate(gpus)]
    assert [gpu.cuda_total_bytes for gpu in read] == [(total - (reserved if reserved_column else 0)) * 2**20 for _, total, reserved in gpus]


@pytest.mark.parametrize(("text", "said"), [
    ("index, name, memory.total [MiB]\n0, H100, 81559 MiB\n", "lacks uuid"),
    ("index, name, uuid, memory.total [MiB]\n0, H100, GPU-1, lots\n", "not a whole number"),
    ("index, name, uuid, memory.total [MiB]\n0, H100, GPU-1, 81559 MiB\n0, H100, GPU-1, 81559 MiB\n", "appears twice"),
    ("index, name, uuid, memory.total [MiB]\n0, H100, GPU-1\n", "fields under a header"),
    ("index, name, uuid, memory.total [MiB]\n", "no GPU"),
    ("index, name, uuid, memory.total [MiB]\n-1, H100, GPU-1, 81559 MiB\n", "index is .-1., outside 0..4,095"),
])
def test_nvidia_smi_refuses_what_it_cannot_read(text, said):
    with pytest.raises(SeatplanError, match=said) as raised:
        read_smi_csv(text, "smi.csv", None)
    assert raised.value.where.startswith("smi.csv")


# ----------------------------------------------------------------------------- LiteLLM config


def test_litellm_config_sample_names_its_engines():
    routes = read_litellm_config(FORMATS / "litellm_config.yaml")
    assert [(route.model_name, route.backend_name, route.base_url) for route in routes] == [
        ("qwen3-30b-a3b", "Qwen/Qwen3-30B-A3B-Instruct-2507", "http://10.20.0.11:8000"),
        ("qwen3-embed-8b", "Qwen/Qwen3-Embedding-8B", "http://10.20.0.11:8080"),
    ]
    assert routes[0].source.endswith("litellm_config.yaml:3")


@pytest.mark.parametrize(("text", "said"), [
    ("a: &a [1, 2]\nb: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a]\nc: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b]\n"
     "d: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c]\ne: &e [*d, *d, *d, *d, *d, *d, *d, *d, *d]\nf: [*e, *e, *e, *e, *e, *e, *e, *e, *e]\n",
     "YAML nodes"),
    ("model_list: {a: 1}\n", "no model_list"),
    ("model_list:\n  - litellm_params: {model: x}\n", "no model_name"),
    ("model_list: [\n", "not valid YAML"),
    ("", "empty"),
])
def test_litellm_config_refuses_hostile_files(tmp_path, text, said):
    path = tmp_path / "config.yaml"
    path.write_text(text)
    with pytest.raises(SeatplanError, match=said):
        read_litellm_config(path)


def test_a_file_too_large_or_not_text_is_refused(tmp_path):
    big = tmp_path / "big.yaml"
    big.write_bytes(b"#" * (2 << 20))
    with pytest.raises(SeatplanError, match="larger than"):
        read_litellm_config(big)
    binary = tmp_path / "bin.env"
    binary.write_bytes(b"A=\xff\xfe\n")
    with pytest.raises(SeatplanError, match="not UTF-8") as raised:
        read_env_file(binary)
    assert raised.value.where == f"{binary}:1"


# ----------------------------------------------------------------------------- env files and compose


def test_a_handwritten_env_file_with_export_double_quotes_and_short_flags(tmp_path):
    path = tmp_path / "coder.env"
    path.write_text('# started by hand\nexport HF_HOME=/data/hf\nCUDA_VISIBLE_DEVICES=2,3\n'
                    'ENGINE="vllm serve Qwen/Qwen3-32B -tp 2 --port=8011 --max-model-len 32768 --gpu-memory-utilization 0.9 --trust-remote-code"\n')
    launch = read_env_file(path)
    assert launch is not None
    assert launch.seat == "coder" and launch.gpus == ["2", "3"] and launch.env == {"HF_HOME": "/data/hf"}
    args = read_args(launch.args)
    assert args.values == {"model": "Qwen/Qwen3-32B", "tensor_parallel_size": 2, "port": 8011, "max_model_len": 32768}
    assert args.extra_args == ["--trust-remote-code"] and args.dropped == {"--gpu-memory-utilization": "0.9"}


def test_an_env_file_that_starts_no_engine_is_not_a_seat(tmp_path):
    path = tmp_path / "gateway.env"
    path.write_text("LITELLM_MASTER_KEY=sk-x\nPORT=4000\n")
    assert read_env_file(path) is None


def test_a_compose_file_in_vllms_docs_style(tmp_path):
    path = tmp_path / "compose.yaml"
    path.write_text("""\
services:
  qwen:
    image: vllm/vllm-openai:v0.11.0
    command: ["--model", "Qwen/Qwen3-8B", "--max-model-len", "40960", "--kv-cache-memory-bytes", "8053063680"]
    ports: ["8002:8000"]
    environment:
      HF_TOKEN_PATH: /run/secrets/hf
    deploy:
      resources:
        reservations:
          devices:
            - driver: nvidia
              device_ids: ["GPU-5e1a"]
              capabilities: [gpu]
  gateway:
    image: ghcr.io/berriai/litellm:main-stable
    command: ["--config", "/app/config.yaml"]
""")
    launches = read_compose(path)
    assert [launch.seat for launch in launches] == ["qwen"]  # the gateway starts no vLLM engine
    qwen = launches[0]
    assert qwen.gpus == ["GPU-5e1a"] and qwen.published_port == 8002 and qwen.env == {"HF_TOKEN_PATH": "/run/secrets/hf"}
    assert qwen.source == f"{path}:2"
    assert read_args(qwen.args).values["kv_cache_memory_bytes"] == 8053063680


def test_adopt_maps_a_compose_uuid_to_its_gpu_through_nvidia_smi(tmp_path, capsys, monkeypatch):
    compose = tmp_path / "compose.yaml"
    compose.write_text('services:\n  qwen:\n    image: vllm/vllm-openai\n    command: "--model Qwen/Qwen3-8B --served-model-name q8"\n'
                       '    deploy: {resources: {reservations: {devices: [{driver: nvidia, device_ids: ["GPU-bbbb"]}]}}}\n')
    smi = tmp_path / "smi.csv"
    smi.write_text("index, name, uuid, memory.total [MiB], memory.reserved [MiB]\n0, NVIDIA H100 80GB HBM3, GPU-aaaa, 81559 MiB, 551 MiB\n"
                   "1, NVIDIA H100 80GB HBM3, GPU-bbbb, 81559 MiB, 551 MiB\n")
    out = tmp_path / "fleet.yaml"
    result = run_cli(capsys, monkeypatch, "adopt", "--compose", str(compose), "--nvidia-smi", f"box={smi}", "-o", str(out), "--json")
    assert result.exit_code == 0, result.stderr
    data = yaml.safe_load(out.read_text())
    assert data["current_layout"] == {"qwen": 1}
    assert data["hosts"][0]["gpus"][1] == {"index": 1, "name": "NVIDIA H100 80GB HBM3", "total_bytes": (81559 - 551) * 2**20}
    summary = json.loads(result.stdout)
    # only a running engine tells the version: TODO with a warning, nothing guessed
    assert summary["todo"] == ["policy.vllm_version"]
    assert any("vllm_version is TODO" in warning for warning in summary["warnings"])
    # no --max-model-len: unset, which means the same to vLLM and to the plan (the length derived from the config)
    assert "max_model_len" not in data["seats"][0] and "# max_model_len: no --max-model-len in" in out.read_text()
    assert data["seats"][0]["served_model_name"] == "q8"


HOSTILE_TEXT = st.text(st.characters(blacklist_categories=("Cs",)), max_size=60)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(value=HOSTILE_TEXT, key=st.text(st.characters(min_codepoint=33, max_codepoint=126, exclude_characters="=#"), min_size=1, max_size=12))
def test_hostile_env_values_never_reach_the_fleet_file_as_keys(tmp_path, capsys, monkeypatch, value, key):
    """Any text in an env file ends as a quoted value or is left out with a warning: the fleet file never gains a key."""
    env_dir = tmp_path / "env"
    env_dir.mkdir(exist_ok=True)
    line = value.replace("\n", " ").replace("\r", " ")
    (env_dir / "s.env").write_text(f"CUDA_VISIBLE_DEVICES=0\n{key}={line}\nCMD='vllm serve /m --port 8001 --max-model-len 4096'\n", encoding="utf-8")
    out = tmp_path / "fleet.yaml"
    result = run_cli(capsys, monkeypatch, "adopt", "--env-dir", str(env_dir), "-o", str(out), "--json")
    if result.exit_code == 2:  # a value the env parser refuses (an unclosed quote): refused whole, nothing written
        assert "error:" in result.stderr
        return
    assert result.exit_code == 0, result.stderr
    data = yaml.safe_load(out.read_text())
    assert set(data) == {"hosts", "policy", "seats", "current_layout"}
    seat = data["seats"][0]
    assert set(seat) <= {"name", "model", "served_model_name", "port", "max_model_len", "env"}
    assert set(seat.get("env", {})) <= {key.removeprefix("export ").strip()}
    # and what is written is what the fleet loader takes: plan would stop at no line but a TODO's
    SeatSpec.model_validate({"name": "s", "env": seat.get("env", {})})
    assert control_problems(seat.get("env", {})) == []


# ----------------------------------------------------------------------------- engines over HTTP


class _Hostile(http.server.BaseHTTPRequestHandler):
    answers: dict[str, bytes] = {}

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        body = self.answers.get(self.path, b"")
        self.send_response(200 if self.path in self.answers else 404)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        return


@pytest.fixture
def stand_in() -> Iterator[tuple[str, type[_Hostile]]]:
    """A stand-in engine on localhost that answers whatever a test sets (a real vLLM cannot answer garbage)."""
    handler = type("Handler", (_Hostile,), {"answers": {}})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", handler
    finally:
        server.shutdown()
        server.server_close()


def test_an_engine_answering_garbage_is_a_warning_with_what_was_wrong(stand_in):
    url, handler = stand_in
    handler.answers.update({"/v1/models": b"[" * 100_000, "/version": b'{"version": "0.32.0"}', "/metrics": b"\xff\xfe not metrics"})
    seen = probe_engine(url, "--engine", 5.0)
    assert seen.models == [] and seen.version == "0.32.0" and seen.cache_labels is None
    assert any(problem.startswith("/v1/models") for problem in seen.problems)


def test_an_engine_answering_too_much_is_cut_off(stand_in):
    url, handler = stand_in
    handler.answers.update({"/v1/models": b'{"data": []}', "/version": b" " * (9 << 20)})
    seen = probe_engine(url, "--engine", 10.0)
    assert seen.version is None and any("more than" in problem for problem in seen.problems)


def test_an_unreachable_engine_is_named(tmp_path, capsys, monkeypatch):
    result = run_cli(capsys, monkeypatch, "adopt", "--engine", "http://127.0.0.1:9", "-o", str(tmp_path / "f.yaml"))
    assert result.exit_code == 2 and "found no engine" in result.stderr and "127.0.0.1:9" in result.stderr
    assert not (tmp_path / "f.yaml").exists()


@pytest.mark.parametrize("url", ["ftp://box:8000", "http://user:pw@box:8000", "http://box:8000/?q=1", "http://", "box:8000", "http://box:99999"])
def test_engine_urls_are_checked(url):
    with pytest.raises(SeatplanError):
        checked_base_url(url, "--engine")


def test_engine_url_drops_v1_and_slashes():
    assert checked_base_url("http://10.0.0.5:8001/v1/", "--engine") == "http://10.0.0.5:8001"


# ----------------------------------------------------------------------------- the writer


@given(st.one_of(HOSTILE_TEXT, st.integers(), st.booleans(), st.lists(HOSTILE_TEXT, max_size=4)), HOSTILE_TEXT)
def test_any_value_is_written_as_one_line_that_reads_back_the_same(value, note):
    line = f"key: {scalar(value)}  # {comment(note)}"
    assert "\n" not in line
    assert yaml.safe_load(line) == {"key": value}


def test_a_hostile_seat_name_stops_adopt_naming_where_it_was_read(tmp_path, capsys, monkeypatch):
    env_dir = tmp_path / "env"
    env_dir.mkdir()
    (env_dir / "x.env").write_text("SEATPLAN_SEAT='a b: {c'\nCMD='vllm serve /m --port 8001'\n")
    result = run_cli(capsys, monkeypatch, "adopt", "--env-dir", str(env_dir), "-o", str(tmp_path / "f.yaml"))
    assert result.exit_code == 2 and "is no name a fleet file takes" in result.stderr and str(env_dir / "x.env") in result.stderr
    assert not (tmp_path / "f.yaml").exists()


def test_the_written_text_comments_every_value():
    tree = {"hosts": [{"name": Noted("box", "x.env"), "gpus": Noted("TODO", "no nvidia-smi")}],
            "seats": [{"name": Noted("s", "x.env"), "model": Noted("/m", "x.env: --model"), "skipped": Noted(None, "left out\nwhy")}]}
    text = fleet_text(tree)
    assert "  - name: box  # x.env\n    gpus: TODO  # no nvidia-smi\n" in text
    assert "    # skipped: left out?why\n" in text


# ----------------------------------------------------------------------------- plan refuses TODO; paths; version


def test_plan_refuses_a_fleet_holding_a_todo_naming_each_line():
    text = "hosts:\n  - name: box\n    gpus:\n      - {index: 0, total_bytes: TODO}\nseats:\n  - name: s\n    model: TODO\n"
    with pytest.raises(SeatplanError) as raised:
        parse_fleet(text, "fleet.yaml")
    assert raised.value.where == "fleet.yaml:4" and "still TODO" in raised.value.message
    assert "fleet.yaml:7: seats[0].model" in raised.value.message and "fill it in" in (raised.value.fix or "")


def test_a_relative_model_path_not_found_names_the_absolute_path_tried(tmp_path):
    with pytest.raises(SeatplanError) as raised:
        resolve_model("./models/qwen3", tmp_path / "fleets")
    assert str((tmp_path / "fleets" / "models" / "qwen3").absolute()) in raised.value.message
    assert resolve_model("Qwen/Qwen3-8B", tmp_path) == "Qwen/Qwen3-8B"  # a Hub id stays a Hub id
    (tmp_path / "models").mkdir()
    with pytest.raises(SeatplanError) as raised:  # ORG/NAME in form, but models/ is a directory beside the fleet: a path
        resolve_model("models/Qwen--Qwen3-8b", tmp_path)
    assert f"tried {tmp_path / 'models' / 'Qwen--Qwen3-8b'}" in raised.value.message


def test_version_prints_the_package_version(capsys, monkeypatch):
    result = run_cli(capsys, monkeypatch, "--version")
    assert result.exit_code == 0 and result.stdout.strip() == f"seatplan {__version__}"


# ----------------------------------------------------------------------------- what adopt refuses to decide


def _env(directory: Path, name: str, text: str) -> None:
    directory.mkdir(exist_ok=True)
    (directory / f"{name}.env").write_text(text)


def test_a_seat_started_by_two_sources_names_both(tmp_path, capsys, monkeypatch):
    _env(tmp_path / "env", "qwen", "CMD='vllm serve /m --port 8001'\n")
    compose = tmp_path / "compose.yaml"
    compose.write_text("services:\n  qwen:\n    image: vllm/vllm-openai\n    command: [/m, --port, '8002']\n")
    result = run_cli(capsys, monkeypatch, "adopt", "--env-dir", str(tmp_path / "env"), "--compose", str(compose), "-o", str(tmp_path / "f.yaml"))
    assert result.exit_code == 2 and "started by two sources" in result.stderr
    assert str(tmp_path / "env" / "qwen.env") in result.stderr and f"{compose}:2" in result.stderr


def test_what_the_loader_refuses_names_the_source_and_writes_nothing(tmp_path, capsys, monkeypatch, stand_in):
    url, handler = stand_in
    handler.answers.update({"/v1/models": b'{"data": []}', "/version": b'{"version": "0.32.0"}'})
    for name in ("a", "b"):
        _env(tmp_path / "env", name, f"CUDA_VISIBLE_DEVICES=0\nCMD='vllm serve /m --served-model-name {name} --port 8001 --max-model-len 4096'\n")
    smi = tmp_path / "smi.csv"
    smi.write_text("index, name, uuid, memory.total [MiB]\n0, L4, GPU-1, 23034 MiB\n")
    out = tmp_path / "f.yaml"
    result = run_cli(capsys, monkeypatch, "adopt", "--env-dir", f"box={tmp_path / 'env'}", "--nvidia-smi", str(smi), "--engine", url, "-o", str(out))
    assert result.exit_code == 2, result.stderr
    assert "port 8001 is also used" in result.stderr and f"# {tmp_path / 'env' / 'b.env'}: --port" in result.stderr
    assert not out.exists()


def test_a_gpu_nvidia_smi_does_not_list_is_todo(tmp_path, capsys, monkeypatch):
    _env(tmp_path / "env", "a", "CUDA_VISIBLE_DEVICES=3\nCMD='vllm serve /m --port 8001 --max-model-len 4096'\n")
    smi = tmp_path / "smi.csv"
    smi.write_text("index, name, uuid, memory.total [MiB]\n0, L4, GPU-1, 23034 MiB\n")
    out = tmp_path / "f.yaml"
    result = run_cli(capsys, monkeypatch, "adopt", "--env-dir", f"box={tmp_path / 'env'}", "--nvidia-smi", str(smi), "-o", str(out), "--json")
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["todo"] == ["policy.vllm_version", "current_layout.a"]
    assert "names GPU 3, which nvidia-smi does not list" in out.read_text()


def test_an_engine_alone_gives_a_seat_and_a_version_seatplan_does_not_model_is_todo(tmp_path, capsys, monkeypatch, stand_in):
    url, handler = stand_in
    handler.answers.update({
        "/v1/models": b'{"data": [{"id": "q", "root": "/models/q", "max_model_len": 8192}]}',
        "/version": b'{"version": "9.1.0"}',
        "/metrics": b'vllm:cache_config_info{block_size="16",kv_cache_memory_bytes="None",gpu_memory_utilization="0.9",cache_dtype="fp8"} 1.0\n',
    })
    out = tmp_path / "f.yaml"
    result = run_cli(capsys, monkeypatch, "adopt", "--engine", url + "/v1/", "-o", str(out), "--json")
    assert result.exit_code == 0, result.stderr
    summary = json.loads(result.stdout)
    assert summary["todo"] == ["hosts[0].device", "hosts[0].gpus", "policy.vllm_version", "current_layout.q"]
    data = yaml.safe_load(out.read_text())
    assert data["hosts"][0]["name"] == "127.0.0.1"
    assert data["seats"] == [{"name": "q", "model": "/models/q", "port": int(url.rsplit(":", 1)[1]), "max_model_len": 8192, "kv_cache_dtype": "fp8"}]
    assert "not pinned today (sized by --gpu-memory-utilization 0.9)" in out.read_text()


YAMLISH = st.lists(st.sampled_from(["model_list:", "services:", "  - ", "  x:", "    command:", "    image: vllm/vllm-openai",
                                    "    deploy: {resources: {reservations: {devices: [{device_ids: [", "]}]}}}", "device_ids: 5", "{target: 8000}", "model_name: a",
                                    "litellm_params: {model: hosted_vllm/q, api_base: ", "http://h:1/v1}", "[", "{", "&a", "*a", "'",
                                    '"', "- --port", "  ports: [", "8000:8000", "]", "\t", ": ", "null", "7", "CMD='vllm serve ",
                                    "--model=/m'", "CUDA_VISIBLE_DEVICES=", "GPU-x", ","]), max_size=30)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(pieces=YAMLISH, joiner=st.sampled_from(["\n", "", " "]))
def test_every_file_reader_ends_in_a_result_or_a_located_error(tmp_path, pieces, joiner):
    """Free text to each reader: a result or a SeatplanError naming the file; never another exception."""
    text = joiner.join(pieces)
    for name, reader in (("config.yaml", read_litellm_config), ("compose.yaml", read_compose), ("x.env", read_env_file)):
        path = tmp_path / name
        path.write_text(text)
        try:
            reader(path)
        except SeatplanError as problem:
            assert str(path) in (problem.where or ""), problem
    try:
        read_smi_csv(text, "smi.csv", None)
    except SeatplanError as problem:
        assert (problem.where or "").startswith("smi.csv")
