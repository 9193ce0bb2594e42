"""How a host starts vLLM today reaches render (issue 50): the fleet's hosts[].launcher, image and restart (what
`seatplan adopt` reads off the box) are render's defaults for that host, and each render flag wins over its key. Before,
the first rendered engines of a box whose units ran `/opt/vllm/.venv/bin/vllm serve` started a bare `vllm serve`."""

from __future__ import annotations

import random
from pathlib import Path

import yaml

from kits.cli import run_cli
from kits.render import DEMO_FLEET
from seatplan.documents.plan import Plan, PlannedHost
from seatplan.engine.parse import parse_args, parse_env, split_shell_line
from seatplan.render.bundle import render_files
from seatplan.render.settings import RenderSettings, default_restart


def random_launcher(rng: random.Random) -> list[str]:
    folders = "/".join(rng.choice(["opt", "srv", "vllm", ".venv", "env-0.11", "home/llm", "usr/local"]) for _ in range(rng.randint(1, 4)))
    if rng.random() < 0.5:
        return [f"/{folders}/bin/vllm", "serve"]
    return [f"/{folders}/bin/python{rng.choice(['', '3', '3.12'])}", "-m", "vllm.entrypoints.openai.api_server"]


def with_host(plan: Plan, **given: object) -> Plan:
    (host,) = {seat.host for seat in plan.vllm_seats()}
    assert host is not None
    return plan.model_copy(update={"hosts": {host: PlannedHost.model_validate(given)}})


def command_of(files: dict[str, str], seat: str) -> list[str]:
    return split_shell_line(parse_env(files[f"env/{seat}.env"])["SEATPLAN_COMMAND"])


def test_the_hosts_launcher_starts_its_env_files_commands_and_the_flag_wins(demo_plan: Plan, rng: random.Random):
    launcher = random_launcher(rng)
    plan = with_host(demo_plan, launcher=launcher)
    files = render_files(plan, RenderSettings(), ["env", "compose"])
    for seat in plan.vllm_seats():
        words = command_of(files, seat.name)
        assert words[: len(launcher)] == launcher, words
        model_at = words[len(launcher)] if launcher[-1] == "serve" else words[words.index("--model") + 1]
        assert seat.launch is not None and model_at == seat.launch.model
        # the same engine as the default `vllm serve` command, flag for flag as vLLM reads them
        bare = command_of(render_files(demo_plan, RenderSettings(), ["env"]), seat.name)
        assert bare[:2] == ["vllm", "serve"] and parse_args(words) == parse_args(bare)
    # compose's entrypoint runs in the image, where the host's path is not: `vllm serve` stays
    services = yaml.safe_load(files["compose.yaml"])["services"]
    assert {tuple(service["entrypoint"]) for service in services.values()} == {("vllm", "serve")}
    # --launcher wins over the host's, in the env files and in compose
    given = random_launcher(rng)
    chosen = render_files(plan, RenderSettings(launcher=given), ["env", "compose"])
    assert all(command_of(chosen, seat.name)[: len(given)] == given for seat in plan.vllm_seats())
    assert {tuple(service["entrypoint"]) for service in yaml.safe_load(chosen["compose.yaml"])["services"].values()} == {tuple(given)}


def test_the_hosts_image_runs_in_compose_and_the_flag_wins(demo_plan: Plan, rng: random.Random):
    tag = f"v0.{rng.randint(8, 32)}.{rng.randint(0, 3)}"
    plan = with_host(demo_plan, image=f"registry.local/vllm-openai:{tag}").model_copy(update={"image": "policy/image:1"})
    images = {service["image"] for service in yaml.safe_load(render_files(plan, RenderSettings(), ["compose"])["compose.yaml"])["services"].values()
              if "entrypoint" in service}
    assert images == {f"registry.local/vllm-openai:{tag}"}  # the host's wins over policy.image
    chosen = render_files(plan, RenderSettings(image="x/y:2"), ["compose"])["compose.yaml"]
    assert {service["image"] for service in yaml.safe_load(chosen)["services"].values() if "entrypoint" in service} == {"x/y:2"}
    # a version without a known image renders compose from the host's image alone
    unknown = plan.model_copy(update={"inputs": plan.inputs.model_copy(update={"vllm_version": "0.20"}), "image": None})
    assert f"registry.local/vllm-openai:{tag}" in render_files(unknown, RenderSettings(), ["compose"])["compose.yaml"]


def test_render_restarts_the_way_the_hosts_say_unless_told(demo_plan: Plan, demo_plan_path: Path, tmp_path: Path, capsys, monkeypatch, rng):
    assert default_restart(demo_plan) == "compose"
    mode = rng.choice(["systemd", "compose"])
    plan = with_host(demo_plan, restart=mode)
    assert default_restart(plan) == mode
    path = tmp_path / "plan.json"
    path.write_text(plan.model_dump_json())
    assert run_cli(capsys, monkeypatch, "render", str(path), "-o", str(tmp_path / "out")).exit_code == 0
    units = (tmp_path / "out" / "systemd" / "seatplan-vllm@.service").exists()
    assert units == (mode == "systemd")
    vars_file = yaml.safe_load((tmp_path / "out" / "ansible" / "vars.yaml").read_text().replace("!unsafe ", ""))
    assert vars_file["seatplan_restart"] == mode
    other = "compose" if mode == "systemd" else "systemd"
    assert run_cli(capsys, monkeypatch, "render", str(path), "-o", str(tmp_path / "flag"), "--restart", other).exit_code == 0
    assert (tmp_path / "flag" / "systemd" / "seatplan-vllm@.service").exists() == (other == "systemd")


def test_the_fleet_file_carries_them_into_the_plan_and_refuses_a_launcher_that_starts_no_server(tmp_path: Path, capsys, monkeypatch, rng):
    document = yaml.safe_load(DEMO_FLEET.read_text())
    for seat in document["seats"]:
        if "model" in seat:
            seat["model"] = str(DEMO_FLEET.parent / seat["model"])
    launcher = random_launcher(rng)
    document["hosts"][0] |= {"launcher": launcher, "image": "vllm/vllm-openai:v0.11.0", "restart": "systemd"}
    fleet = tmp_path / "fleet.yaml"
    fleet.write_text(yaml.safe_dump(document, sort_keys=False))
    result = run_cli(capsys, monkeypatch, "plan", str(fleet), "--json")
    assert result.exit_code == 0, result.stderr
    host = Plan.model_validate_json(result.stdout).hosts[document["hosts"][0]["name"]]
    assert host == PlannedHost(launcher=launcher, image="vllm/vllm-openai:v0.11.0", restart="systemd")
    document["hosts"][0]["launcher"] = [launcher[0], "run"]
    fleet.write_text(yaml.safe_dump(document, sort_keys=False))
    refused = run_cli(capsys, monkeypatch, "plan", str(fleet))
    said = " ".join(refused.stderr.split())
    assert refused.exit_code == 2 and "hosts[0].launcher" in said and "does not end in `vllm serve`" in said and "fix:" in said
