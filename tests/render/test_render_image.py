"""compose runs the engine image of the plan's vLLM version (issue 18): never `latest`, whose numbers may not
be the plan's; a version without a known image is a render error unless the fleet (policy.image) or --image names one."""

from __future__ import annotations

import pytest
import yaml

from kits.cli import run_cli
from kits.render import DEMO_FLEET
from seatplan.documents.plan import Plan
from seatplan.errors import SeatplanError
from seatplan.render.bundle import render_files
from seatplan.render.settings import RenderSettings
from seatplan.versions import IMAGE_TAGS, NEWEST_MODELLED, OLDEST_MODELLED


def images(files: dict[str, str]) -> set[str]:
    return {service["image"] for service in yaml.safe_load(files["compose.yaml"])["services"].values()}


def with_version(plan: Plan, version: str, image: str | None = None) -> Plan:
    return plan.model_copy(update={"inputs": plan.inputs.model_copy(update={"vllm_version": version}), "image": image})


def test_compose_runs_the_image_of_the_plans_vllm_version(demo_plan):
    assert demo_plan.inputs.vllm_version == "0.32"
    assert images(render_files(demo_plan, RenderSettings(), ["compose"])) == {"vllm/vllm-openai:v0.32.0"}


def test_a_version_without_a_known_image_is_a_render_error_unless_an_image_is_named(demo_plan, tmp_path, capsys, monkeypatch, rng):
    # The demo pins KV bytes, a flag vLLM has from 0.10.2 on; an older plan is refused for that flag first
    # (test_versions covers it), so the image rule is checked on every release that has the plan's flags.
    unknown = [f"0.{minor}" for minor in range(max(OLDEST_MODELLED[1], 11), NEWEST_MODELLED[1] + 1)
               if (0, minor) not in IMAGE_TAGS]
    assert unknown
    for each in unknown:
        with pytest.raises(SeatplanError) as refused:
            render_files(with_version(demo_plan, each), RenderSettings(), ["compose"])
        assert f"vLLM {each}" in refused.value.message and "policy.image" in refused.value.fix, each
    version = rng.choice(unknown)
    plan = with_version(demo_plan, version)
    # the env files alone need no image
    assert render_files(plan, RenderSettings(), ["env"])
    # the fleet's policy.image, or --image, names one; --image wins
    assert images(render_files(with_version(demo_plan, version, "registry.local/vllm:mine"), RenderSettings(), ["compose"])) == {"registry.local/vllm:mine"}
    assert images(render_files(with_version(demo_plan, version, "registry.local/vllm:mine"), RenderSettings(image="x/y:1"), ["compose"])) == {"x/y:1"}
    # through the CLI: exit 2, nothing written
    path = tmp_path / "plan.json"
    path.write_text(plan.model_dump_json())
    result = run_cli(capsys, monkeypatch, "render", str(path), "-o", str(tmp_path / "out"))
    assert result.exit_code == 2 and "no known engine image" in result.stderr and "fix:" in result.stderr
    assert not (tmp_path / "out").exists()
    assert run_cli(capsys, monkeypatch, "render", str(path), "-o", str(tmp_path / "out"), "--image", "x/y:1").exit_code == 0


def test_policy_image_in_the_fleet_reaches_the_plan(tmp_path, capsys, monkeypatch):
    document = yaml.safe_load(DEMO_FLEET.read_text())
    document["policy"]["image"] = "registry.local/vllm:pinned"
    for seat in document["seats"]:
        if "model" in seat:
            seat["model"] = str(DEMO_FLEET.parent / seat["model"])
    fleet = tmp_path / "fleet.yaml"
    fleet.write_text(yaml.safe_dump(document))
    result = run_cli(capsys, monkeypatch, "plan", str(fleet), "--json")
    assert Plan.model_validate_json(result.stdout).image == "registry.local/vllm:pinned"


def test_systemd_and_script_restarts_render_without_an_image(demo_plan, tmp_path, capsys, monkeypatch, rng):
    """issue 50: `render --restart systemd` of a plan on a version without a known image stopped with "no known engine
    image" until --image was given, though a systemd (or script) engine runs no image: only compose's files need one."""
    unknown = [f"0.{minor}" for minor in range(max(OLDEST_MODELLED[1], 11), NEWEST_MODELLED[1] + 1) if (0, minor) not in IMAGE_TAGS]
    plan = with_version(demo_plan, rng.choice(unknown))
    path = tmp_path / "plan.json"
    path.write_text(plan.model_dump_json())
    script = tmp_path / "restart.sh"
    for restart in (["--restart", "systemd"], ["--restart", "script", "--restart-script", str(script)]):
        out = tmp_path / restart[1]
        result = run_cli(capsys, monkeypatch, "render", str(path), "-o", str(out), *restart)
        assert result.exit_code == 0, result.stderr
        written = {file.relative_to(out).as_posix() for file in out.rglob("*") if file.is_file()}
        assert {f"env/{seat.name}.env" for seat in plan.vllm_seats()} <= written and "ansible/playbook.yaml" in written
        assert not any(name == "compose.yaml" or name.startswith("compose") for name in written), sorted(written)
        assert f"compose.yaml not written: no known engine image for vLLM {plan.inputs.vllm_version}" in " ".join(result.stderr.split())
        # with an image named, the cold-boot compose file is written as before
        again = run_cli(capsys, monkeypatch, "render", str(path), "-o", str(out), *restart, "--image", "x/y:1")
        assert again.exit_code == 0 and images({"compose.yaml": (out / "compose.yaml").read_text()}) == {"x/y:1"}
        assert "compose.yaml not written" not in again.stderr
    # compose restarts still need it, and the error says so
    refused = run_cli(capsys, monkeypatch, "render", str(path), "-o", str(tmp_path / "compose"), "--restart", "compose")
    assert refused.exit_code == 2 and "no known engine image" in refused.stderr
