"""Fixed seats take part in the rollout (issue 18): compose runs one whose fleet entry gives an image (first in boot
order, the first engine after it), one without is listed as not managed, and the playbook waits on a fixed seat's
health URL before it restarts any engine on that host."""

from __future__ import annotations

import random

import yaml

from kits.cli import run_cli
from kits.render import DEMO_FLEET, load_ansible_yaml
from seatplan.documents.plan import Plan
from seatplan.render.bundle import render_files
from seatplan.render.settings import RenderSettings


def with_fixed(plan: Plan, **fields) -> Plan:
    return plan.model_copy(update={"seats": [seat.model_copy(update=fields) if seat.engine == "fixed" else seat for seat in plan.seats]})


def first_engine(plan: Plan) -> str:
    """The host's first engine in boot order (compose chains the engines of one host)."""
    return min((seat for seat in plan.seats if seat.engine == "vllm"), key=lambda seat: seat.boot_order).name


def test_a_fixed_seat_without_an_image_is_listed_as_not_managed(demo_plan):
    files = render_files(demo_plan, RenderSettings())
    compose = files["compose.yaml"]
    assert "# not managed by seatplan (no image in the fleet file): speech on GPU 0\n" in compose
    assert "speech" not in yaml.safe_load(compose)["services"]
    assert "depends_on" not in yaml.safe_load(compose)["services"][first_engine(demo_plan)]
    assert load_ansible_yaml(files["ansible/vars.yaml"])["seatplan_fixed"] == {"gpu-box": []}


def test_a_fixed_seat_with_an_image_is_rendered_first_and_the_engines_wait_for_its_health(demo_plan):
    port = random.randint(1024, 65535)
    health = f"http://gpu-box:{port}/health"
    command = ["python", "-m", "nemo_asr.serve", "--port", str(port), "--note", "it's $HOME"]  # no shell: kept word for word
    plan = with_fixed(demo_plan, image="nvcr.io/nvidia/nemo:24.05", command=command, health_url=health, port=port)
    files = render_files(plan, RenderSettings())
    services = yaml.safe_load(files["compose.yaml"])["services"]
    speech = services["speech"]
    assert speech["image"] == "nvcr.io/nvidia/nemo:24.05" and speech["ports"] == [f"{port}:{port}"]
    assert speech["command"] == [word.replace("$", "$$") for word in command]  # compose interpolation escaped
    assert speech["deploy"]["resources"]["reservations"]["devices"][0]["device_ids"] == ["0"]
    assert list(services)[0] == "speech"
    assert services[first_engine(plan)]["depends_on"] == {"speech": {"condition": "service_started"}}
    assert "not managed" not in files["compose.yaml"]
    assert load_ansible_yaml(files["ansible/vars.yaml"])["seatplan_fixed"] == {"gpu-box": [{"name": "speech", "health_url": health}]}
    plays = yaml.safe_load(files["ansible/playbook.yaml"])
    # the wait is in the play that prepares each host (after the secrets check); every engine's step is a play after it
    assert plays[0]["name"] == "seatplan apply: what runs, and every secret reference reaches its engine"
    assert "fixed seats: wait for their health URL before the engines" in [task["name"] for task in plays[1]["tasks"]]
    assert [play["name"] for play in plays[2:] if play["name"].startswith("step ")] and all(play["name"].startswith("step ") for play in plays[2:-4])


def test_the_fleet_file_carries_image_command_and_health_url_into_the_plan_and_refuses_a_hostile_url(tmp_path, capsys, monkeypatch):
    document = yaml.safe_load(DEMO_FLEET.read_text())
    for seat in document["seats"]:
        if "model" in seat:
            seat["model"] = str(DEMO_FLEET.parent / seat["model"])
    speech = next(seat for seat in document["seats"] if seat["name"] == "speech")
    speech |= {"image": "nvcr.io/nvidia/nemo:24.05", "command": ["serve"], "health_url": "http://gpu-box:9000/health"}
    fleet = tmp_path / "fleet.yaml"
    fleet.write_text(yaml.safe_dump(document))
    planned = Plan.model_validate_json(run_cli(capsys, monkeypatch, "plan", str(fleet), "--json").stdout).seat("speech")
    assert (planned.image, planned.command, planned.health_url) == ("nvcr.io/nvidia/nemo:24.05", ["serve"], "http://gpu-box:9000/health")
    for field, hostile in (("health_url", "http://gpu-box:9000/$(reboot)"), ("image", "nemo; rm -rf /")):
        speech[field] = hostile
        fleet.write_text(yaml.safe_dump(document))
        result = run_cli(capsys, monkeypatch, "plan", str(fleet))
        assert result.exit_code == 2 and field in result.stderr, result.stderr
        speech[field] = "http://gpu-box:9000/health" if field == "health_url" else "nvcr.io/nvidia/nemo:24.05"
