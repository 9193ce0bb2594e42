"""The pure builders on the demo plan: env files, compose.yaml, the LiteLLM config, Prometheus rules, flags by version."""

from __future__ import annotations

import json
import shlex
import subprocess

import jsonschema
import pytest
import yaml

from kits.documents import edited_seat
from kits.parts import require_binary
from kits.render import COMPOSE_SCHEMA, GiB, MiB, load_ansible_yaml
from seatplan.engine.command import MODULE_LAUNCHER, engine_command, shell_line, unsupported_flags
from seatplan.errors import SeatplanError
from seatplan.render.bundle import render_files
from seatplan.render.engines import plan_engines
from seatplan.render.settings import RenderSettings
from seatplan.render.targets import prometheus_rules


def vllm_seats(plan):
    return sorted((seat for seat in plan.seats if seat.engine == "vllm"), key=lambda seat: seat.boot_order)


def test_env_file_carries_the_full_command_and_reads_back_in_a_real_shell(demo_plan, tmp_path):
    files = render_files(demo_plan, RenderSettings(), ["env"])
    assert sorted(files) == sorted(f"env/{seat.name}.env" for seat in vllm_seats(demo_plan))  # the fixed seat has none
    for engine in plan_engines(demo_plan, RenderSettings()):
        path = tmp_path / f"{engine.name}.env"
        path.write_text(files[f"env/{engine.name}.env"])
        # what the restart script and systemd's ExecStart do with it: source, then eval the command
        shown = subprocess.run(["bash", "-c", 'set -a; . "$1"; set +a; eval "printf \'%s\\0\' $SEATPLAN_COMMAND"; printf "%s\\0" "$CUDA_VISIBLE_DEVICES"', "-", str(path)],
                               capture_output=True, text=True, check=True).stdout.split("\0")[:-1]
        assert shown[:-1] == engine.restart_args
        assert shown[-1] == ",".join(engine.gpu_indices)
    qwen = files["env/qwen3-30b-a3b.env"]
    assert "SEATPLAN_HEALTH_URL=http://gpu-box:8000/health" in qwen
    command = shlex.split(next(line for line in qwen.splitlines() if line.startswith("SEATPLAN_COMMAND="))[len("SEATPLAN_COMMAND="):])[0]
    words = shlex.split(command)
    assert words[:3] == ["vllm", "serve", "Qwen/Qwen3-30B-A3B-Instruct-2507"]
    seat = demo_plan.seat("qwen3-30b-a3b")
    for flag, value in [("--kv-cache-memory-bytes", str(seat.kv_cache_memory_bytes)), ("--max-model-len", "262144"), ("--served-model-name", seat.served_model_name),
                        ("--port", "8000"), ("--tensor-parallel-size", "1"), ("--gpu-memory-utilization", f"{seat.gpu_memory_utilization:.3f}"),
                        ("--override-generation-config", '{"max_new_tokens": 32768}')]:
        assert words[words.index(flag) + 1] == value


def test_launcher_decides_how_the_model_is_given(demo_plan):
    seat = demo_plan.seat("qwen3-8b")
    served = engine_command(seat.launch)
    module = engine_command(seat.launch, MODULE_LAUNCHER, bind_host="127.0.0.1")
    assert served[:3] == ["vllm", "serve", seat.launch.model]
    assert module[:5] == ["python3", "-m", "vllm.entrypoints.openai.api_server", "--model", seat.launch.model]
    assert module[module.index("--host") + 1] == "127.0.0.1" and "--host" not in served


def test_a_flag_the_version_lacks_is_an_error_naming_the_release(demo_plan):
    assert unsupported_flags(["--kv-cache-memory-bytes", "1"], "0.10.2") == []
    assert unsupported_flags(["--kv-cache-memory-bytes=1"], "0.10") == ["--kv-cache-memory-bytes needs vLLM 0.10.2 or later, not 0.10"]
    assert unsupported_flags(["--rope-scaling", "{}"], "0.11.1")[0].startswith("--rope-scaling was removed in vLLM 0.11.1")
    demo_plan.inputs.vllm_version = "0.9"
    with pytest.raises(SeatplanError) as problem:
        render_files(demo_plan, RenderSettings())
    assert "--kv-cache-memory-bytes needs vLLM 0.10.2" in problem.value.message and "0.9" in problem.value.message


def test_shell_line_quotes_without_single_quotes():
    words = ["x", '{"a": 1}', "$HOME", "`id`", "back\\slash", "plain"]
    line = shell_line(words)
    assert "'" not in line
    shown = subprocess.run(["bash", "-c", f"printf '%s\\0' {line}"], capture_output=True, text=True, check=True).stdout.split("\0")[:-1]
    assert shown == words
    with pytest.raises(SeatplanError):
        shell_line(["it's"])


def test_compose_validates_and_boots_in_the_plans_order(demo_plan):
    document = yaml.safe_load(render_files(demo_plan, RenderSettings(image="vllm/vllm-openai:v0.32.0"), ["compose"])["compose.yaml"])
    jsonschema.Draft7Validator(json.loads(COMPOSE_SCHEMA.read_text())).validate(document)
    services = document["services"]
    order = [seat.name for seat in vllm_seats(demo_plan)]
    assert list(services) == order
    assert "depends_on" not in services[order[0]]
    for before, after in zip(order, order[1:]):
        assert services[after]["depends_on"] == {before: {"condition": "service_healthy"}}
    for seat in vllm_seats(demo_plan):
        service = services[seat.name]
        devices = service["deploy"]["resources"]["reservations"]["devices"][0]
        assert devices["device_ids"] == [label.split(":")[1] for label in seat.gpus] and devices["capabilities"] == ["gpu"]
        assert "CUDA_VISIBLE_DEVICES" not in service.get("environment", {})  # ids inside a container start at 0
        assert service["entrypoint"] + service["command"] == engine_command(seat.launch)
        assert f":{seat.port}/health" in service["healthcheck"]["test"][-1]


def test_compose_schema_rejects_a_broken_dependency(demo_plan):
    document = yaml.safe_load(render_files(demo_plan, RenderSettings(), ["compose"])["compose.yaml"])
    name = next(iter(reversed(document["services"])))
    document["services"][name]["depends_on"] = {"x": {"condition": "healthy"}}
    assert list(jsonschema.Draft7Validator(json.loads(COMPOSE_SCHEMA.read_text())).iter_errors(document))


def test_litellm_config_lists_every_seat_with_its_cap_and_no_key(demo_plan, monkeypatch):
    monkeypatch.setenv("LITELLM_MASTER_KEY", "sk-do-not-print-me")
    text = render_files(demo_plan, RenderSettings(engine_key_env="VLLM_API_KEY"), ["litellm"])["litellm/config.yaml"]
    assert "sk-do-not-print-me" not in text
    document = yaml.safe_load(text)
    assert document["general_settings"] == {"master_key": "os.environ/LITELLM_MASTER_KEY"}
    entries = {entry["model_name"]: entry["litellm_params"] for entry in document["model_list"]}
    assert set(entries) == {seat.served_model_name for seat in vllm_seats(demo_plan)}
    for seat in vllm_seats(demo_plan):
        params = entries[seat.served_model_name]
        assert params["api_base"] == f"http://gpu-box:{seat.port}/v1"
        assert params["model"] == f"hosted_vllm/{seat.served_model_name}"
        assert params.get("max_tokens") == seat.max_new_tokens
        assert params["api_key"] == "os.environ/VLLM_API_KEY"


def test_prometheus_rules_hold_the_plans_numbers_and_pass_promtool(demo_plan, tmp_path):
    settings = RenderSettings(free_tolerance_bytes=GiB)
    text = render_files(demo_plan, settings, ["prometheus"])["prometheus/seatplan.rules.yaml"]
    rules = yaml.safe_load(text)["groups"][0]["rules"]
    free = {rule["labels"]["seatplan_gpu"]: rule for rule in rules if rule["alert"] == "SeatplanGpuFreeBelowPlan"}
    for gpu in demo_plan.gpus:
        if gpu.seats:
            assert free[str(gpu.index)]["expr"] == f'DCGM_FI_DEV_FB_FREE{{Hostname="gpu-box",gpu="{gpu.index}"}} < {(gpu.spare_bytes - GiB) // MiB}'
        else:
            assert str(gpu.index) not in free  # the keep-clear GPU has no plateau to watch
    blocks = {rule["labels"]["seat"]: rule["expr"] for rule in rules if rule["alert"] == "SeatplanKvBlocksDifferFromPlan"}
    tokens = {rule["labels"]["seat"]: rule["expr"] for rule in rules if rule["alert"] == "SeatplanContextDiffersFromPlan"}
    usage = {rule["labels"]["seat"]: rule for rule in rules if rule["alert"] == "SeatplanKvCacheNearlyFull"}
    for seat in vllm_seats(demo_plan):
        assert blocks[seat.name] == f'vllm:cache_config_info{{instance="gpu-box:{seat.port}",num_gpu_blocks!="{seat.num_gpu_blocks}"}}'
        assert f'kv_cache_size_tokens!="{seat.kv_cache_tokens}"' in tokens[seat.name]
        assert usage[seat.name]["expr"] == f'vllm:kv_cache_usage_perc{{instance="gpu-box:{seat.port}"}} > 0.9' and usage[seat.name]["for"] == "30m"
    promtool = require_binary("promtool", "/usr/bin/promtool")
    path = tmp_path / "seatplan.rules.yaml"
    path.write_text(text)
    checked = subprocess.run([promtool, "check", "rules", str(path)], capture_output=True, text=True)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert f"SUCCESS: {len(rules)} rules found" in checked.stdout
    path.write_text(text.replace("> 0.9", "> > 0.9"))
    assert subprocess.run([promtool, "check", "rules", str(path)], capture_output=True).returncode != 0


def test_old_versions_watch_the_old_usage_gauge_and_no_token_label(demo_plan):
    demo_plan.inputs.vllm_version = "0.9"

    engines = [engine for engine in plan_engines(demo_plan.model_copy(update={"inputs": demo_plan.inputs.model_copy(update={"vllm_version": "0.32"})}), RenderSettings())]
    rules = yaml.safe_load(prometheus_rules(demo_plan, engines, RenderSettings())["prometheus/seatplan.rules.yaml"])["groups"][0]["rules"]
    assert all("vllm:gpu_cache_usage_perc" in rule["expr"] for rule in rules if rule["alert"] == "SeatplanKvCacheNearlyFull")
    assert not [rule for rule in rules if rule["alert"] == "SeatplanContextDiffersFromPlan"]


def test_a_seat_without_a_port_cannot_be_delivered(demo_plan):
    demo_plan.seats = [edited_seat(seat, port=None) if seat.name == "qwen3-8b" else seat for seat in demo_plan.seats]
    with pytest.raises(SeatplanError) as problem:
        render_files(demo_plan, RenderSettings())
    assert problem.value.where == "seat qwen3-8b, port"


def test_the_playbook_ends_with_seatplan_verify_through_the_gateway(demo_plan):
    settings = RenderSettings(plan_path="/srv/plan.json", seatplan_command="seatplan", verify_gateway="http://gw:4000", gateway_key_env="GW_KEY")
    files = render_files(demo_plan, settings, ["ansible"])
    variables = load_ansible_yaml(files["ansible/vars.yaml"])
    assert variables["seatplan_verify_command"] == "seatplan verify /srv/plan.json --gateway http://gw:4000 --key-env GW_KEY"
    last_play = yaml.safe_load(files["ansible/playbook.yaml"])[-1]
    assert last_play["hosts"] == "localhost" and last_play["tasks"][0]["ansible.builtin.command"] == "{{ seatplan_verify_command }}"
    assert [seat["name"] for seat in variables["seatplan_seats"]["gpu-box"]] == [seat.name for seat in vllm_seats(demo_plan)]
