"""The hostile and awkward adopt inputs of issue 30 (compose files, env files, units, LiteLLM configs, nvidia-smi CSVs),
each through the real ``seatplan adopt`` command: every one ends in a located ``error:``/``fix:``, a ``TODO`` with a
warning, or the correct value; never a traceback, a hang, a leaked secret, or a silent change.

(The hostile engine and Hub servers are tests/hardening's.)
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import yaml
from pydantic import ValidationError

from kits.cli import run_cli
from seatplan.adopt.api import mark_refused
from seatplan.adopt.assemble import adopt as assemble_adopt
from seatplan.adopt.engines import MAX_CARDS, probe_engine
from seatplan.adopt.evidence import EngineSeen, Route
from seatplan.adopt.readers.compose import read_compose
from seatplan.adopt.writer import fleet_text
from seatplan.documents.fleet import MAX_GPU_BYTES, GpuSpec

SMI = "index, name, uuid, memory.total [MiB], memory.reserved [MiB], memory.used [MiB]\n" + "".join(
    f"{index}, NVIDIA H100 80GB HBM3, GPU-{index}aaaaaaa-1111-2222-3333-44444444444{index}, 81559 MiB, 551 MiB, 1000 MiB\n" for index in range(4))
SECRET = "sk-local-5e1a0c2b9d3f4a7e8b61"
HF = "hf_AbCdEf0123456789xyzXYZ"
PASSWORD = "pw-Zq81xkQ"


@dataclass
class Adopted:
    code: int
    out: str
    err: str
    text: str  # the fleet file written ("" when none)

    @property
    def data(self) -> dict:
        return yaml.safe_load(self.text)

    def seat(self, name: str) -> dict:
        return next(seat for seat in self.data["seats"] if seat["name"] == name)


def adopt(tmp_path: Path, capsys, monkeypatch, *options: str, smi: bool = True) -> Adopted:
    (tmp_path / "smi.csv").write_text(SMI)
    out = tmp_path / "fleet.yaml"
    given = [*options, *(["--nvidia-smi", f"box={tmp_path / 'smi.csv'}"] if smi else []), "--timeout", "1", "-o", str(out)]
    result = run_cli(capsys, monkeypatch, "adopt", *given)
    text = out.read_text() if out.exists() else ""
    assert "Traceback" not in result.stderr
    for secret in (SECRET, HF, PASSWORD):
        assert secret not in result.stdout + result.stderr + text, secret
    if result.exit_code != 0:
        assert "error:" in result.stderr and "fix:" in result.stderr, result.stderr
        assert not out.exists()
    return Adopted(result.exit_code, result.stdout, result.stderr, text)


def compose(tmp_path: Path, services: str, dotenv: str = "") -> str:
    path = tmp_path / "compose.yaml"
    path.write_text("services:\n" + services)
    if dotenv:
        (tmp_path / ".env").write_text(dotenv)
    return f"box={path}"


ENGINE = """  qwen:
    image: vllm/vllm-openai:v0.32.0
    command: [Qwen/Qwen3-8B, --max-model-len, "32K"{extra}]
    deploy: {{resources: {{reservations: {{devices: [{{driver: nvidia, device_ids: {ids}, capabilities: [gpu]}}]}}}}}}
"""


def engine(extra: str = "", ids: str = "['0']", tail: str = "") -> str:
    return ENGINE.format(extra=extra, ids=ids) + tail


@pytest.mark.parametrize(("ports", "expected"), [
    ("    ports: [{target: 8000, published: '8006'}]\n", 8006),
    ("    ports:\n      - target: 8000\n        published: 8006\n        host_ip: 127.0.0.1\n", 8006),
    ("    ports: ['127.0.0.1:8006:8000/tcp']\n", 8006),
    ("    ports: ['8005-8006:7999-8000']\n", 8006),
    ("    ports: ['8006-8010:8000']\n", "TODO"),  # compose picks one of the range
    ("    ports: ['8000']\n", "TODO"),  # compose picks a free host port
])
def test_compose_ports_in_every_syntax(tmp_path, capsys, monkeypatch, ports, expected):
    done = adopt(tmp_path, capsys, monkeypatch, "--compose", compose(tmp_path, engine(tail=ports)))
    assert done.code == 0, done.err
    assert done.seat("qwen")["port"] == expected
    if expected == "TODO":
        assert "compose picks the host port" in done.err


@pytest.mark.parametrize("ports", ["    ports: ['80x6:8000']\n", "    ports: ['99999:8000']\n", "    ports: [{published: 8006}]\n",
                                   "    ports: [[8006]]\n", "    ports: '8006:8000'\n"])
def test_compose_ports_that_publish_nothing_are_located_errors(tmp_path, capsys, monkeypatch, ports):
    done = adopt(tmp_path, capsys, monkeypatch, "--compose", compose(tmp_path, engine(tail=ports)))
    assert done.code == 2 and "compose.yaml:2" in done.err


def test_device_ids_are_a_set_and_uuids_go_through_nvidia_smi(tmp_path, capsys, monkeypatch):
    ids = "['0', 0, '0']"
    done = adopt(tmp_path, capsys, monkeypatch, "--compose", compose(tmp_path, engine(ids=ids)))
    assert done.data["current_layout"]["qwen"] == 0
    uuid = "GPU-2aaaaaaa-1111-2222-3333-444444444442"
    done = adopt(tmp_path, capsys, monkeypatch, "--compose", compose(tmp_path, engine(ids=f"['{uuid}', '{uuid}', 2]")))
    assert done.data["current_layout"]["qwen"] == 2  # by UUID and by index: one GPU


def test_32K_is_vllms_32768_and_the_comment_says_so(tmp_path, capsys, monkeypatch):
    done = adopt(tmp_path, capsys, monkeypatch, "--compose", compose(tmp_path, engine(extra=", --max-num-batched-tokens, 8k")))
    assert done.seat("qwen")["max_model_len"] == 32768 and done.seat("qwen")["max_num_batched_tokens"] == 8000
    assert "--max-model-len 32K (vLLM's human_readable_int: 32,768" in done.text


def test_a_flag_of_several_values_keeps_them_all(tmp_path, capsys, monkeypatch):
    extra = ", --lora-modules, a=/l/a, b=/l/b, --enable-lora, --max_loras=2"
    done = adopt(tmp_path, capsys, monkeypatch, "--compose", compose(tmp_path, engine(extra=extra)))
    assert done.seat("qwen")["extra_args"] == ["--lora-modules", "a=/l/a", "b=/l/b", "--enable-lora", "--max-loras", "2"]


def test_an_engine_behind_sh_c_is_a_vllm_seat(tmp_path, capsys, monkeypatch):
    services = """  qwen:
    image: python:3.12
    entrypoint: ["/bin/bash", "-lc"]
    command: ["source /venv/bin/activate && exec vllm serve Qwen/Qwen3-8B --port $${PORT:-8000}"]
    environment: {PORT: "8001"}
    ports: ["8006:8001"]
    deploy: {resources: {reservations: {devices: [{driver: nvidia, device_ids: ['1'], capabilities: [gpu]}]}}}
"""
    done = adopt(tmp_path, capsys, monkeypatch, "--compose", compose(tmp_path, services))
    seat = done.seat("qwen")
    assert seat.get("engine", "vllm") == "vllm" and seat["model"] == "Qwen/Qwen3-8B" and seat["port"] == 8006


def test_env_file_interpolation_and_secrets_of_a_compose_service(tmp_path, capsys, monkeypatch):
    (tmp_path / "qwen.env").write_text(f"HF_TOKEN={HF}\r\nexport HF_HOME='/data/hf'\r\n")
    services = engine(extra=", --api-key, \"${LOCAL_KEY}\", --served-model-name, \"${SERVED:-qwen3}\"", tail=(
        "    env_file: [qwen.env, {path: missing.env, required: false}]\n    environment:\n"
        f"      OPENAI_BASE: {SECRET}\n      DB_URL: postgres://app:{PASSWORD}@db:5432/x\n"
        "      LOG_LEVEL: ${LOG_LEVEL:-info}\n"))
    done = adopt(tmp_path, capsys, monkeypatch, "--compose", compose(tmp_path, services, dotenv=f"LOCAL_KEY={SECRET}\n"))
    seat = done.seat("qwen")
    assert seat["served_model_name"] == "qwen3"
    assert seat["env"] == {"HF_TOKEN": {"from_host_env": "HF_TOKEN"}, "HF_HOME": "/data/hf", "OPENAI_BASE": {"from_host_env": "OPENAI_BASE"},
                           "DB_URL": {"from_host_env": "DB_URL"}, "LOG_LEVEL": "info", "VLLM_API_KEY": {"from_host_env": "LOCAL_KEY"}}
    assert "export LOCAL_KEY on the GPU host" in done.err  # the variable the command line names (issue 44): one reference


def test_a_required_env_file_missing_is_a_warning_naming_it(tmp_path, capsys, monkeypatch):
    done = adopt(tmp_path, capsys, monkeypatch, "--compose", compose(tmp_path, engine(tail="    env_file: gone.env\n")))
    assert done.code == 0 and "env_file 'gone.env' is not beside the compose file" in done.err


@pytest.mark.parametrize(("key", "fix"), [("extends", "docker compose -f compose.yaml config"), ("include", "docker compose -f compose.yaml config")])
def test_what_adopt_does_not_read_is_an_error_naming_it(tmp_path, capsys, monkeypatch, key, fix):
    if key == "extends":
        text = compose(tmp_path, engine(tail="    extends: {file: base.yaml, service: engine}\n"))
    else:
        (tmp_path / "compose.yaml").write_text("include: [base.yaml]\nservices:\n" + engine())
        text = f"box={tmp_path / 'compose.yaml'}"
    done = adopt(tmp_path, capsys, monkeypatch, "--compose", text)
    assert done.code == 2 and f"({key}:)" in done.err and fix in done.err


def test_profiles_follow_compose_profiles(tmp_path, capsys, monkeypatch):
    services = engine(tail="    profiles: [gpu]\n") + engine().replace("qwen:", "other:").replace("['0']", "['1']")
    done = adopt(tmp_path, capsys, monkeypatch, "--compose", compose(tmp_path, services))
    assert [seat["name"] for seat in done.data["seats"]] == ["other"] and "runs only under profile gpu" in done.err
    done = adopt(tmp_path, capsys, monkeypatch, "--compose", compose(tmp_path, services, dotenv="COMPOSE_PROFILES=gpu,debug\n"))
    assert sorted(seat["name"] for seat in done.data["seats"]) == ["other", "qwen"]


def test_a_command_split_over_two_variables_is_read_through_its_unit(tmp_path, capsys, monkeypatch):
    """The seat issue 30 saw dropped: ExecStart=… vllm serve $MODEL $VLLM_ARGS, the env file holding neither whole."""
    env = tmp_path / "env"
    env.mkdir()
    (env / "coder.env").write_text("CUDA_VISIBLE_DEVICES=0\nMODEL=Qwen/Qwen3-32B-FP8\nVLLM_ARGS=--port 8002 \\\n  --max-model-len 32K\n"
                                   f"VLLM_LOCAL_KEY={SECRET}\n")
    (env / "coder.env.bak-2024-11-02").write_text("MODEL=old\n")  # a stale backup: not an env file adopt reads
    (env / "vllm-coder.service").write_text("[Service]\nEnvironmentFile=/etc/vllm/coder.env\n"
                                            "ExecStart=/opt/vllm/bin/vllm serve ${MODEL} $VLLM_ARGS\n")
    done = adopt(tmp_path, capsys, monkeypatch, "--env-dir", f"box={env}")
    seat = done.seat("vllm-coder")
    assert (seat["model"], seat["port"], seat["max_model_len"]) == ("Qwen/Qwen3-32B-FP8", 8002, 32768)
    assert seat["env"] == {"VLLM_LOCAL_KEY": {"from_host_env": "VLLM_LOCAL_KEY"}}
    assert seat["started_by"] == {"systemd_unit": "vllm-coder.service"}
    assert done.data["current_layout"]["vllm-coder"] == 0


def test_without_its_unit_the_half_command_is_a_warning_and_the_routed_model_a_todo_seat(tmp_path, capsys, monkeypatch):
    env = tmp_path / "env"
    env.mkdir()
    (env / "coder.env").write_text("MODEL=Qwen/Qwen3-32B-FP8\nVLLM_ARGS=--port 8002\n")
    (env / "chat.env").write_text("CMD=vllm serve Qwen/Qwen3-8B --port 8003\nCUDA_VISIBLE_DEVICES=1\n")
    config = tmp_path / "litellm.yaml"
    config.write_text(yaml.safe_dump({"model_list": [
        {"model_name": "coder", "litellm_params": {"model": "hosted_vllm/Qwen/Qwen3-32B-FP8", "api_base": f"http://admin:{PASSWORD}@127.0.0.1:9/v1"}},
        {"model_name": "Qwen/Qwen3-8B", "litellm_params": {"model": "hosted_vllm/Qwen/Qwen3-8B", "api_base": "http://127.0.0.1:9/v1"}}]}))
    done = adopt(tmp_path, capsys, monkeypatch, "--env-dir", f"box={env}", "--litellm-config", str(config))
    assert done.code == 0
    assert "coder.env: holds no whole vLLM command and no unit given reads it" in done.err
    todo = done.seat("Qwen3-32B-FP8")
    assert todo["model"] == "TODO" and todo["max_model_len"] == "TODO" and done.data["current_layout"]["Qwen3-32B-FP8"] == "TODO"
    assert "seat Qwen3-32B-FP8 is written with TODOs" in done.err and "carries a user or password" in done.err


def test_a_crlf_env_file_with_continued_lines_is_read(tmp_path, capsys, monkeypatch):
    env = tmp_path / "env"
    env.mkdir()
    (env / "qwen.env").write_bytes(b'CUDA_VISIBLE_DEVICES=1,1\r\nVLLM_CMD="vllm serve Qwen/Qwen3-8B \\\r\n  --port 8004 --max-model-len 40k"\r\n')
    done = adopt(tmp_path, capsys, monkeypatch, "--env-dir", f"box={env}")
    seat = done.seat("qwen")
    assert (seat["port"], seat["max_model_len"], done.data["current_layout"]["qwen"]) == (8004, 40000, 1)


def test_units_templates_wrappers_and_config_files(tmp_path, capsys, monkeypatch):
    units = tmp_path / "units"
    (units / "multi-user.target.wants").mkdir(parents=True)
    (units / "vllm@.service").write_text("[Service]\r\nEnvironment=\"HF_HOME=/data/hf\" CUDA_VISIBLE_DEVICES=%i\r\n"
                                         "EnvironmentFile=-/etc/vllm/%i.env\r\n"
                                         "ExecStart=/bin/sh -c 'exec /opt/v/bin/python -m vllm.entrypoints.openai.api_server "
                                         "--model \"$MODEL\" --port 80%i --config /etc/vllm/engine.yaml'\r\n")
    (units / "multi-user.target.wants" / "vllm@2.service").symlink_to(units / "vllm@.service")
    (units / "2.env").write_text(f"MODEL=Qwen/Qwen3-4B\nHF_TOKEN={HF}\n")
    (units / "engine.yaml").write_text("max-model-len: 16K\nenforce-eager: true\nenable-prefix-caching: false\nkv-cache-memory-bytes: 8G\n")
    done = adopt(tmp_path, capsys, monkeypatch, "--systemd", f"box={units}")
    seat = done.seat("2")
    assert (seat["model"], seat["port"], seat["max_model_len"], seat["kv_cache_memory_bytes"], seat["enforce_eager"]) == (
        "Qwen/Qwen3-4B", 802, 16384, 8 * 2**30, True)
    assert seat["extra_args"] == ["--no-enable-prefix-caching"]
    assert seat["env"] == {"HF_HOME": "/data/hf", "HF_TOKEN": {"from_host_env": "HF_TOKEN"}}
    assert seat["started_by"] == {"systemd_unit": "vllm@2.service"} and done.data["current_layout"]["2"] == 2
    assert "engine.yaml (--config)" in done.text


def test_a_missing_config_file_is_a_located_error(tmp_path, capsys, monkeypatch):
    done = adopt(tmp_path, capsys, monkeypatch, "--compose", compose(tmp_path, engine(extra=", --config, /etc/vllm/nowhere.yaml")))
    assert done.code == 2 and "nowhere.yaml" in done.err and "compose.yaml:2" in done.err


def test_a_secret_shaped_argument_is_left_out(tmp_path, capsys, monkeypatch):
    done = adopt(tmp_path, capsys, monkeypatch, "--compose", compose(tmp_path, engine(extra=f", --hf-token, {HF}, --tokenizer, {SECRET}")))
    seat = done.seat("qwen")
    assert seat["env"]["HF_TOKEN"] == {"from_host_env": "HF_TOKEN"} and "extra_args" not in seat
    assert "--tokenizer holds a value shaped like a key" in done.err


def test_credentials_in_an_engine_url_are_never_shown(tmp_path, capsys, monkeypatch):
    done = adopt(tmp_path, capsys, monkeypatch, "--engine", f"http://admin:{PASSWORD}@127.0.0.1:9", smi=False)
    assert done.code == 2 and "carries a user or password" in done.err


@pytest.mark.parametrize("entries", [
    [{"model_name": 7, "litellm_params": {"model": "hosted_vllm/x"}}],
    [{"model_name": "a", "litellm_params": ["model", "x"]}],
    [{"model_name": "a", "litellm_params": {"model": ["x"], "api_base": 5, "max_tokens": "1e9"}}],
    ["just a string"],
    [{"model_name": "a\x00b", "litellm_params": {"model": "hosted_vllm/q", "api_base": "http://[::1"}}],
])
def test_litellm_configs_of_mixed_types(tmp_path, capsys, monkeypatch, entries):
    config = tmp_path / "litellm.yaml"
    config.write_text(json.dumps({"model_list": entries}))
    done = adopt(tmp_path, capsys, monkeypatch, "--litellm-config", str(config))
    assert done.code in (0, 2)
    if done.code == 2:
        assert "litellm.yaml" in done.err


@pytest.mark.parametrize("row", ["²", "٨", "0x1", "-1", "1e3", "9" * 12])
def test_nvidia_smi_numbers_are_ascii_whole_numbers(tmp_path, capsys, monkeypatch, row):
    csv = tmp_path / "smi.csv"
    for text in (f"index, name, uuid, memory.total [MiB]\n{row}, H100, GPU-1, 81559 MiB\n",
                 f"index, name, uuid, memory.total [MiB]\n0, H100, GPU-1, {row} MiB\n"):
        csv.write_text(text)
        result = run_cli(capsys, monkeypatch, "adopt", "--compose", compose(tmp_path, engine()), "--nvidia-smi", f"box={csv}",
                         "-o", str(tmp_path / "f.yaml"))
        assert result.exit_code == 2 and "smi.csv:2" in result.stderr and "fix:" in result.stderr


MODEL = Path(__file__).parents[1] / "fixtures" / "models" / "Qwen--Qwen3-8B"


@pytest.mark.parametrize(("used_mib", "said"), [(70000, "likely an engine not adopted"), (9000, "an engine not running"), (None, "")])
def test_memory_used_against_the_seats_adopted_on_a_gpu(tmp_path, capsys, monkeypatch, used_mib, said):
    """Qwen3-8B's weights (about 15.3 GiB) and an 8 GiB KV pin on GPU 0: 70,000 MiB in use is far more than that and
    an engine's overhead, 9,000 MiB far less; in between (GPU 0 at 25,000 MiB) agrees, and no warning is given."""
    services = f"""  qwen:
    image: vllm/vllm-openai:v0.32.0
    command: [{MODEL}, --kv-cache-memory-bytes, 8G]
    deploy: {{resources: {{reservations: {{devices: [{{driver: nvidia, device_ids: ['0'], capabilities: [gpu]}}]}}}}}}
"""
    smi = SMI.replace(", 1000 MiB\n", f", {used_mib or 25000} MiB\n", 1)
    (tmp_path / "smi2.csv").write_text(smi)
    done = adopt(tmp_path, capsys, monkeypatch, "--compose", compose(tmp_path, services), "--nvidia-smi", f"box={tmp_path / 'smi2.csv'}", smi=False)
    assert done.code == 0, done.err
    warned = [line for line in done.err.splitlines() if line.startswith("warning: box GPU 0:")]
    if not said:
        assert not warned
        return
    assert len(warned) == 1 and said in warned[0] and f"memory.used {used_mib} MiB" in warned[0] and "seats adopted here (qwen" in warned[0]
    gpu0 = done.text.split("- index: 0", 1)[1].split("- index: 1", 1)[0]
    assert "# reserved_bytes:" in gpu0
    if used_mib == 70000:
        extra = int(gpu0.split("# reserved_bytes: ", 1)[1].split(" ", 1)[0])
        assert 30000 * 2**20 < extra < 50000 * 2**20


def test_an_env_file_command_built_from_its_own_variables(tmp_path, capsys, monkeypatch):
    env = tmp_path / "env"
    env.mkdir()
    (env / "chat.env").write_text('MODEL=Qwen/Qwen3-8B\nARGS="--port 8003 --max-model-len 4K"\nCMD="exec vllm serve $MODEL ${ARGS}"\n'
                                  "CUDA_VISIBLE_DEVICES=3\nHF_HOME=/data/hf\n")
    done = adopt(tmp_path, capsys, monkeypatch, "--env-dir", f"box={env}")
    seat = done.seat("chat")
    assert (seat["model"], seat["port"], seat["max_model_len"], seat["env"]) == ("Qwen/Qwen3-8B", 8003, 4096, {"HF_HOME": "/data/hf"})


def test_vllms_image_with_an_entrypoint_adopt_cannot_read_says_so(tmp_path, capsys, monkeypatch):
    services = engine(tail="    entrypoint: [/start.sh]\n")
    done = adopt(tmp_path, capsys, monkeypatch, "--compose", compose(tmp_path, services))
    assert done.seat("qwen")["engine"] == "fixed" and "runs vLLM's image, but its entrypoint '/start.sh'" in done.err


@pytest.mark.parametrize("label", ["9" * 400, "٨٠٠٦", "²", "1e30", str(2**60)])
def test_an_engines_kv_label_that_no_gpu_holds_is_not_taken(label):
    """/metrics' cache_config_info as a hostile engine could write it (the HTTP side is tests/harden's)."""
    seen = EngineSeen(base_url="http://127.0.0.1:9", source="--engine", models=[{"id": "q", "root": "Qwen/Qwen3-8B", "max_model_len": 10**400}],
                      version="0.32.0", cache_labels={"kv_cache_memory_bytes": label})
    adopted = assemble_adopt([], [], [seen], [])
    seat = adopted.tree["seats"][0]
    assert seat["kv_cache_memory_bytes"].value == "TODO"
    assert seat["max_model_len"].value == "TODO"
    assert any("is no byte count a GPU holds" in warning for warning in adopted.warnings)


@pytest.mark.parametrize("option", ["--compose", "--litellm-config", "--nvidia-smi", "--env-dir", "--systemd"])
def test_a_fifo_given_or_met_is_an_error_or_skipped_never_a_hang(tmp_path, option):
    """A FIFO as the file itself (an error naming it), or as an env file or unit inside a directory (not a regular
    file: not read); run as a child process with a deadline, so a hang fails the test instead of stalling it."""
    folder = tmp_path / "dir"
    folder.mkdir()
    os.mkfifo(folder / ("x.service" if option == "--systemd" else "x.env"))
    os.mkfifo(tmp_path / "pipe.yaml")
    (folder / "y.env").write_text("CMD=vllm serve Qwen/Qwen3-8B --port 8001\n")
    given = str(folder) if option in ("--env-dir", "--systemd") else str(tmp_path / "pipe.yaml")
    extra = ["--compose", compose(tmp_path, engine())] if option in ("--nvidia-smi", "--systemd") else []
    done = subprocess.run([sys.executable, "-c", "from seatplan.cli import main; main()", "adopt", option, given, *extra,
                           "-o", str(tmp_path / "f.yaml")], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[2] / "src")})
    assert "Traceback" not in done.stderr
    if option in ("--env-dir", "--systemd"):
        assert done.returncode == 0, done.stderr
    else:
        assert done.returncode == 2 and "pipe.yaml" in done.stderr and "fix:" in done.stderr


def test_a_unit_that_runs_vllms_image_with_docker_run(tmp_path, capsys, monkeypatch):
    units = tmp_path / "units"
    units.mkdir()
    (units / "qwen.service").write_text(
        "[Service]\nEnvironment=TAG=v0.11.0\n"
        "ExecStartPre=-/usr/bin/docker rm -f qwen\n"
        "ExecStart=/usr/bin/docker run --rm --name qwen --gpus '\"device=1,1\"' -p 127.0.0.1:8006:8000 \\\n"
        f"    -e HF_TOKEN={HF} --ipc=host vllm/vllm-openai:${{TAG}} --model Qwen/Qwen3-8B --max-model-len 8K\n"
        "ExecStop=/usr/bin/docker stop qwen\n")
    done = adopt(tmp_path, capsys, monkeypatch, "--systemd", f"box={units}")
    seat = done.seat("qwen")
    assert (seat["model"], seat["port"], seat["max_model_len"], done.data["current_layout"]["qwen"]) == ("Qwen/Qwen3-8B", 8006, 8192, 1)
    assert seat["env"] == {"HF_TOKEN": {"from_host_env": "HF_TOKEN"}} and seat["started_by"] == {"systemd_unit": "qwen.service"}


def test_drop_ins_override_a_unit_as_systemd_merges_them(tmp_path, capsys, monkeypatch):
    units = tmp_path / "units"
    (units / "vllm@.service.d").mkdir(parents=True)
    (units / "vllm@big.service.d").mkdir()
    (units / "vllm@.service").write_text("[Service]\nEnvironment=CUDA_VISIBLE_DEVICES=0 LEN=8K\n"
                                         "ExecStart=/usr/bin/vllm serve Qwen/Qwen3-8B --port 80%i --max-model-len ${LEN}\n")
    (units / "vllm@.service.d" / "10-gpu.conf").write_text("[Service]\nEnvironment=CUDA_VISIBLE_DEVICES=1\n")
    (units / "vllm@big.service.d" / "20-len.conf").write_text("[Service]\nEnvironment=LEN=32K CUDA_VISIBLE_DEVICES=3\nExecStart=\n"
                                                               "ExecStart=/usr/bin/vllm serve Qwen/Qwen3-8B --port 8099 --max-model-len ${LEN}\n")
    (units / "vllm@01.service").symlink_to(units / "vllm@.service")
    (units / "vllm@big.service").symlink_to(units / "vllm@.service")
    done = adopt(tmp_path, capsys, monkeypatch, "--systemd", f"box={units}")
    assert (done.seat("01")["port"], done.seat("01")["max_model_len"], done.data["current_layout"]["01"]) == (8001, 8192, 1)
    assert (done.seat("big")["port"], done.seat("big")["max_model_len"], done.data["current_layout"]["big"]) == (8099, 32768, 3)
    assert "20-len.conf:4" in done.text  # each value's comment names the drop-in line it came from


def test_the_env_file_of_a_unit_that_runs_a_script_is_read_on_its_own(tmp_path, capsys, monkeypatch):
    env = tmp_path / "env"
    env.mkdir()
    (env / "chat.env").write_text("VLLM_CMD=vllm serve Qwen/Qwen3-8B --port 8005\nCUDA_VISIBLE_DEVICES=2\n")
    (env / "chat.service").write_text("[Service]\nEnvironmentFile=/etc/vllm/chat.env\nExecStart=/usr/local/bin/start-vllm.sh\n")
    done = adopt(tmp_path, capsys, monkeypatch, "--env-dir", f"box={env}")
    assert done.seat("chat")["port"] == 8005 and "chat.service: ExecStart= starts no vLLM engine adopt can read" in done.err


def test_a_commented_line_inside_a_continuation_adds_no_flag(tmp_path, capsys, monkeypatch):
    """Issue 48: systemd ignores a comment line inside a continued ExecStart= (systemd.syntax(7)); adopt made it
    live flags (--trust-remote-code) that reached the plan and the rendered command."""
    units = tmp_path / "units"
    units.mkdir()
    (units / "vllm-a.service").write_text("[Service]\nEnvironment=CUDA_VISIBLE_DEVICES=0\nExecStart=/usr/bin/vllm serve /m \\\n"
                                          "#  --trust-remote-code --chat-template $$(touch /tmp/owned) \\\n    --port 8006\n")
    done = adopt(tmp_path, capsys, monkeypatch, "--systemd", f"box={units}")
    seat = done.seat("vllm-a")
    assert seat["port"] == 8006 and "extra_args" not in seat, seat
    assert "trust-remote-code" not in done.text and "touch" not in done.text


SHADOW_LINE = "root:$6$Qx81.hash.of.a.password:20228:0:99999:7:::"


def test_a_foreign_file_named_as_env_file_is_never_echoed(tmp_path, capsys, monkeypatch, rng):
    """Issue 48: `env_file: [/etc/shadow]` printed each line's first 40 characters (password hashes on a real host).
    A file of that shape outside the compose folder: each line is named by file and number, never shown; the
    file outside the folder is named in a warning."""
    outside = tmp_path / "etc"
    outside.mkdir()
    lines = [SHADOW_LINE.replace("root", name) for name in rng.sample(["root", "daemon", "bin", "sys", "www-data", "nobody"], rng.randint(2, 6))]
    (outside / "shadow").write_text("\n".join(lines) + "\n")
    folder = tmp_path / "app"
    folder.mkdir()
    given = rng.choice([str(outside / "shadow"), "../etc/shadow"])
    done = adopt(folder, capsys, monkeypatch, "--compose", compose(folder, engine(tail=f"    env_file: [{given}]\n")))
    assert done.code == 0, done.err
    read_as = folder / given  # as compose joins it (an absolute path stays itself)
    for number in range(1, len(lines) + 1):
        assert f"{read_as}:{number}: not a KEY=value line" in done.err.replace("\n", " ")
    assert "$6$" not in done.out + done.err + done.text and ":20228:" not in done.out + done.err + done.text
    assert "is outside the compose file's folder" in done.err and "shadow" in done.err


@pytest.mark.parametrize("named", ["/proc/self/environ", "/dev/stdin", "/sys/kernel/mm/transparent_hugepage/enabled", "FIFO", "FOLDER"])
def test_kernel_files_and_special_files_are_refused_by_name(tmp_path, capsys, monkeypatch, named):
    """EnvironmentFile=-/proc/self/environ read adopt's own environment (not what systemd reads on the GPU host) and
    copied lines of it into the fleet; a FIFO or a device was said to be 'not here'. Each is refused by its name."""
    units = tmp_path / "units"
    units.mkdir()
    if named == "FIFO":
        os.mkfifo(units / "a.env")
        named = str(units / "a.env")
    elif named == "FOLDER":
        (units / "a.env").mkdir()
        named = str(units / "a.env")
    (units / "vllm-a.service").write_text(f"[Service]\nEnvironmentFile=-{named}\nEnvironment=CUDA_VISIBLE_DEVICES=0\n"
                                          "ExecStart=/usr/bin/vllm serve /m --port 8006\n")
    done = adopt(tmp_path, capsys, monkeypatch, "--systemd", f"box={units}")
    assert done.code == 0, done.err
    said = done.err.replace("\n", " ")
    assert f"EnvironmentFile={named}" in said and "refused, not read" in said, done.err
    assert "is not here" not in said
    assert "env" not in done.seat("vllm-a"), done.seat("vllm-a")  # nothing of this process's environment copied


def test_an_env_dir_entry_that_is_no_regular_file_is_named_in_a_warning(tmp_path, capsys, monkeypatch):
    folder = tmp_path / "env"
    folder.mkdir()
    os.mkfifo(folder / "pipe.env")
    (folder / "folder.env").mkdir()
    (folder / "dev.env").symlink_to("/dev/zero")
    (folder / "y.env").write_text("CMD=vllm serve Qwen/Qwen3-8B --port 8001\nCUDA_VISIBLE_DEVICES=0\n")
    done = adopt(tmp_path, capsys, monkeypatch, "--env-dir", f"box={folder}")
    said = done.err.replace("\n", " ")
    assert done.code == 0, done.err
    assert f"{folder / 'pipe.env'} is a FIFO (named pipe), not a regular file: skipped" in said
    assert f"{folder / 'folder.env'} is a folder, not a regular file: skipped" in said
    assert f"{folder / 'dev.env'} is under /dev" in said


@pytest.mark.parametrize("name", ["PGPASS", "MYSQL_PWD", "AWS_SESSION_TOKEN", "PEM", "JWT"])
@pytest.mark.parametrize("through", ["EnvironmentFile=", "env_file:"])
def test_a_secret_of_any_name_or_shape_is_referenced_never_copied(tmp_path, capsys, monkeypatch, name, through):
    """Issue 48: PGPASS and MYSQL_PWD read through EnvironmentFile= or env_file: were copied by value into the fleet
    (and from there the plan and the rendered env files). Now a reference, and a warning naming the line."""
    value = {"PEM": "-----BEGIN PRIVATE KEY-----\\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASC\\n-----END PRIVATE KEY-----",
             "JWT": "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJzZWF0cGxhbiJ9.Zm9vYmFyYmF6cXV4"}.get(name, "Hunter2-" + name.lower() + "-9f3a")
    key = {"PEM": "TLS_MATERIAL", "JWT": "GATEWAY_HEADER"}.get(name, name)
    env_text = f"# the engine's\nOMP_NUM_THREADS=8\n{key}=\"{value}\"\n"
    if through == "EnvironmentFile=":
        units = tmp_path / "units"
        units.mkdir()
        (units / "a.env").write_text(env_text)
        (units / "vllm-a.service").write_text("[Service]\nEnvironment=CUDA_VISIBLE_DEVICES=0\nEnvironmentFile=/etc/vllm/a.env\n"
                                              "ExecStart=/usr/bin/vllm serve /m --port 8006\n")
        done, seat, file = adopt(tmp_path, capsys, monkeypatch, "--systemd", f"box={units}"), "vllm-a", units / "a.env"
    else:
        (tmp_path / "a.env").write_text(env_text)
        done, seat, file = adopt(tmp_path, capsys, monkeypatch, "--compose", compose(tmp_path, engine(tail="    env_file: [a.env]\n"))), "qwen", tmp_path / "a.env"
    assert done.code == 0, done.err
    assert done.seat(seat)["env"] == {"OMP_NUM_THREADS": "8", key: {"from_host_env": key}}
    shown = value.replace("\\n", "\n")
    for piece in (value, shown, "MIIEvQIBADANBgkqhkiG9w0BAQEFAASC", "Hunter2", "Zm9vYmFyYmF6cXV4"):
        assert piece not in done.out + done.err + done.text
    said = done.err.replace("\n", " ")
    assert f"{file}:3: {key} holds a secret" in said or f"{file}:3 (env_file): {key} holds a secret" in said, done.err


@pytest.mark.parametrize(("command", "dotenv", "model"), [
    ("${MODEL:-${DEFAULT_MODEL}}", "DEFAULT_MODEL=Qwen/Qwen3-8B\n", "Qwen/Qwen3-8B"),
    ("${NAME:-${BASE}/q06}", "BASE=org\n", "org/q06"),
    ("${MODEL}", "BASE=org\nMODEL=${BASE}/q06\n", "org/q06"),  # a .env value interpolated from the lines above
    ("${MODEL}", "BASE=org\nMODEL='${BASE}/q06'\n", "${BASE}/q06"),  # single-quoted: literal
    ("${MODEL:+Qwen/Qwen3-8B}", "MODEL=x\n", "Qwen/Qwen3-8B"),
])
def test_compose_interpolation_as_compose_does_it(tmp_path, capsys, monkeypatch, command, dotenv, model):
    """Issue 48: nested defaults came out as '${DEFAULT_MODEL}' or '${BASE/q06}', a .env value stayed literal."""
    services = engine().replace("command: [Qwen/Qwen3-8B,", f"command: ['{command}',")
    done = adopt(tmp_path, capsys, monkeypatch, "--compose", compose(tmp_path, services, dotenv))
    assert done.code == 0, done.err
    assert done.seat("qwen")["model"] == model


def test_a_required_variable_without_a_value_stops_adopt_as_it_stops_compose(tmp_path, capsys, monkeypatch):
    services = engine().replace("command: [Qwen/Qwen3-8B,", "command: ['${MISSING:?set MISSING to the model}',")
    done = adopt(tmp_path, capsys, monkeypatch, "--compose", compose(tmp_path, services))
    assert done.code == 2
    assert "required variable MISSING is missing a value: set MISSING to the model" in done.err.replace("\n", " ")


def test_values_plan_would_refuse_are_written_as_todo_with_the_reason(tmp_path, capsys, monkeypatch):
    """Issue 48: adopt wrote values that plan then refused (a GPU name with ESC, a 9,999,999 MiB GPU, a model that is
    a flag), because a file with any TODO was never checked value by value."""
    (tmp_path / "odd.csv").write_text(
        "index, name, uuid, memory.total [MiB], memory.reserved [MiB], memory.used [MiB]\n"
        "0, NVIDIA \x1b[31mH100, GPU-0aaaaaaa-1111-2222-3333-444444444440, 81559 MiB, 551 MiB, 1000 MiB\n"
        "1, NVIDIA H100, GPU-1aaaaaaa-1111-2222-3333-444444444441, 9999999 MiB, 551 MiB, 1000 MiB\n")
    services = engine().replace("command: [Qwen/Qwen3-8B,", "command: [--trust-remote-code, /m,")
    done = adopt(tmp_path, capsys, monkeypatch, "--compose", compose(tmp_path, services), "--nvidia-smi", f"box={tmp_path / 'odd.csv'}",
                 smi=False)
    assert done.code == 0, done.err
    gpus = done.data["hosts"][0]["gpus"]
    assert gpus[0]["name"] == "TODO" and gpus[1]["total_bytes"] == "TODO", gpus
    assert "\x1b" not in done.text and "9999999" not in yaml.safe_dump(done.data)
    assert "written as TODO" in done.err or "no size a GPU has" in done.text
    assert "no size a GPU has" in done.text


def test_a_gpu_over_a_tebibyte_is_refused_unless_said(tmp_path, rng):
    size = rng.randint(MAX_GPU_BYTES + 1, 10**16)
    with pytest.raises(ValidationError, match="more than any GPU has"):
        GpuSpec(index=0, total_bytes=size)
    assert GpuSpec(index=0, total_bytes=size, beyond_known_sizes=True).total_bytes == size
    assert GpuSpec(index=0, total_bytes=rng.randint(0, MAX_GPU_BYTES)).total_bytes <= MAX_GPU_BYTES


def test_a_port_vllm_refuses_is_todo_as_the_warning_says(tmp_path, capsys, monkeypatch):
    """Issue 48: `--port abc` warned that a TODO fills the port, then wrote 8000 'no --port: vLLM's default'."""
    services = engine().replace("command: [Qwen/Qwen3-8B,", "command: [Qwen/Qwen3-8B, --port, abc,")
    done = adopt(tmp_path, capsys, monkeypatch, "--compose", compose(tmp_path, services))
    assert done.code == 0, done.err
    assert "(or a TODO) fills port" in done.err.replace("\n", " ")
    assert done.seat("qwen")["port"] == "TODO" and "no --port" not in done.text


SUBSTITUTED_FIELDS = {  # where a substitution lands → the fleet key that must be TODO, and the words it goes in
    "model": ("model", "vllm serve {sub} --port 8006 --served-model-name qwen"),
    "served_model_name": ("served_model_name", "vllm serve /m --port 8006 --served-model-name {sub}"),
    "extra_args": ("extra_args", "vllm serve /m --port 8006 --served-model-name qwen --chat-template {sub}"),
}


def _substitution(rng, form: str) -> str:
    program = rng.choice(["hostname", "cat /etc/vllm/template", "date +%s", "id -un", "printf x"])
    inner = f"$({program})" if form == "dollar" else f"`{program}`"
    return rng.choice(["", "/models/", "pre-"]) + inner + rng.choice(["", "/q06", ".jinja"])


@pytest.mark.parametrize("form", ["dollar", "backtick"])
@pytest.mark.parametrize("field", sorted(SUBSTITUTED_FIELDS))
@pytest.mark.parametrize("through", ["systemd", "compose"])
def test_a_command_substitution_in_a_shell_script_is_todo_never_carried(tmp_path, capsys, monkeypatch, rng, form, field, through):
    """Issue 48: `--chat-template '`hostname`'` in an `sh -c` script was carried literally into extra_args (and so into
    the rendered command), though the shell runs it at start and vLLM gets what it prints. `$(…)` and backticks alike:
    the value is TODO with the reason, and nothing of the substitution reaches the fleet file as a value."""
    key, words = SUBSTITUTED_FIELDS[field]
    substitution = _substitution(rng, form)
    script = "exec " + words.format(sub=substitution)
    if through == "systemd":
        units = tmp_path / "units"
        units.mkdir()
        (units / "qwen.service").write_text(f"[Service]\nEnvironment=CUDA_VISIBLE_DEVICES=0\nExecStart=/bin/sh -c '{script}'\n")
        done = adopt(tmp_path, capsys, monkeypatch, "--systemd", f"box={units}")
    else:
        services = f"""  qwen:
    image: python:3.12
    entrypoint: ["/bin/sh", "-c"]
    command: [{json.dumps(script.replace("$", "$$"))}]
    ports: ["8006:8006"]
    deploy: {{resources: {{reservations: {{devices: [{{driver: nvidia, device_ids: ['0'], capabilities: [gpu]}}]}}}}}}
"""
        done = adopt(tmp_path, capsys, monkeypatch, "--compose", compose(tmp_path, services))
    assert done.code == 0, done.err
    seat = next(seat for seat in done.data["seats"] if seat.get("port") == 8006)
    assert seat[key] == "TODO", (key, seat)
    assert "holds a command substitution" in done.err.replace("\n", " ")
    values = yaml.safe_dump(done.data)
    assert "$(" not in values and "`" not in values, values


def _engine_seen(rng, *, version: str = "0.32.0", host: str = "127.0.0.1") -> EngineSeen:
    return EngineSeen(base_url=f"http://{host}:{rng.randint(1024, 65535)}", source="--engine",
                      models=[{"id": "q", "root": "Qwen/Qwen3-8B", "max_model_len": 4096}], version=version)


def test_an_engine_address_that_plan_refuses_is_todo(tmp_path, rng):
    """Issue 48 item 8: `address: evil$(…` (the host of a gateway route's api_base, beside a compose file that names the
    host) was written; now it is TODO with the fleet's own reason, and nothing of it is a value in the file."""
    hostile = rng.choice([f"evil$(touch /tmp/{rng.randrange(10**6)})", "a;b", "evil`id`", "x y", "-oProxyCommand=sh"])
    (tmp_path / "compose.yaml").write_text("services:\n" + engine(tail='    ports: ["8006:8000"]\n'))
    launches, _ = read_compose(tmp_path / "compose.yaml")
    for launch in launches:
        launch.host, launch.host_note = "box", "--compose box="
    route = Route(model_name="qwen", backend_name="Qwen/Qwen3-8B", base_url=f"http://{hostile}:8006", max_tokens=None, source="config.yaml:3")
    adopted = assemble_adopt([], launches, [], [route])
    mark_refused(adopted)
    address = adopted.tree["hosts"][0].get("address")
    assert address is None or address.value == "TODO", address
    assert hostile not in yaml.safe_dump(yaml.safe_load(fleet_text(adopted.tree)))


def test_an_engine_version_holding_a_newline_is_todo(rng):
    """Issue 48 item 8: a /version answer `0.11.N\\nmalicious: true` reached policy.vllm_version; its warning now
    quotes it on one line, saying it is no version."""
    hostile = f"0.11.{rng.randrange(10)}\nmalicious: true"
    adopted = assemble_adopt([], [], [_engine_seen(rng, version=hostile)], [])
    version = adopted.tree["policy"]["vllm_version"]
    assert version.value == "TODO" and "\n" not in version.note and "is not a vLLM version" in version.note, version
    assert not any("\n" in warning for warning in adopted.warnings), adopted.warnings


@pytest.mark.parametrize("dtype", ["fp8;rm -rf /", "fp8\x1b[31m", "fp8 fp16", "$(id)", "fp8'"])
def test_a_kv_cache_dtype_plan_refuses_is_todo(tmp_path, capsys, monkeypatch, dtype):
    """Issue 48 item 8: a hostile --kv-cache-dtype was written as the seat's kv_cache_dtype."""
    done = adopt(tmp_path, capsys, monkeypatch, "--compose", compose(tmp_path, engine(extra=f", --kv-cache-dtype, {json.dumps(dtype)}")))
    assert done.code == 0, done.err
    assert done.seat("qwen").get("kv_cache_dtype") == "TODO", done.seat("qwen")
    assert "kv_cache_dtype is TODO" in done.err.replace("\n", " ")


def test_a_negative_gpu_total_is_refused_by_line(tmp_path, capsys, monkeypatch, rng):
    """Issue 48 item 8: a negative memory.total was written as the GPU's total_bytes."""
    mib = rng.randint(1, 200_000)
    (tmp_path / "given.csv").write_text(SMI.replace("81559 MiB", f"-{mib} MiB", 1))
    done = adopt(tmp_path, capsys, monkeypatch, "--compose", compose(tmp_path, engine()), "--nvidia-smi", f"box={tmp_path / 'given.csv'}",
                 smi=False)
    if done.code == 0:
        assert done.data["hosts"][0]["gpus"][0]["total_bytes"] == "TODO", done.data["hosts"][0]["gpus"][0]
    else:
        assert "given.csv:2" in done.err, done.err
    assert f"-{mib}" not in done.text


def test_an_engine_listing_more_models_than_adopt_reads_says_so(rng):
    """Issue 48 item 8: an engine whose /v1/models listed thousands of models was cut to the first 64 without a word.
    A stand-in engine on 127.0.0.1 (the point is the answer's length, which no real vLLM gives)."""
    listed = rng.randint(MAX_CARDS + 1, 5000)
    body = json.dumps({"data": [{"id": f"m{index}", "root": "/m", "max_model_len": 4096} for index in range(listed)]}).encode()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (http.server's name)
            answer = body if self.path == "/v1/models" else b'{"version": "0.32.0"}'
            self.send_response(200 if self.path in ("/v1/models", "/version") else 404)
            self.send_header("Content-Length", str(len(answer)))
            self.end_headers()
            self.wfile.write(answer)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        seen = probe_engine(f"http://127.0.0.1:{server.server_address[1]}", "--engine", 5.0)
    finally:
        server.shutdown()
        server.server_close()
    assert len(seen.models) == MAX_CARDS
    adopted = assemble_adopt([], [], [seen], [])
    assert any(f"lists {listed:,} models; adopt read the first {MAX_CARDS}" in warning for warning in adopted.warnings), adopted.warnings
