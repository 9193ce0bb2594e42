"""apply refuses a plan whose inputs changed, that no longer fits, or that names other hosts, unless --force.

Each refusal goes through the real command line: exit 2, `error:` naming what changed and `fix:`, nothing rendered,
no playbook run. Hosts are read by the real ``ansible-inventory``.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from kits.parts import free_port, require
from kits.render import QWEN3_8B
from kits.rollout import ansible_installed, apply_args, build_plan_file, cpu_fleet, fake_launcher, render_args, run_seatplan
from seatplan.documents.plan import Plan
from seatplan.render.guard import misfits

pytestmark = pytest.mark.ansible


@pytest.fixture
def planned(tmp_path):
    """A one-seat CPU fleet on a copy of a model directory (so a test may change the model), and its plan."""
    require(ansible_installed(), "ansible-playbook (pip install ansible-core)")
    model = tmp_path / "model"
    shutil.copytree(QWEN3_8B, model)
    fleet = cpu_fleet(tmp_path, {"alpha": (model, free_port())}, kv="256MiB", total="64GiB")
    return tmp_path, fleet, model, build_plan_file(fleet, tmp_path / "plan.json")


def refused(capsys, monkeypatch, tmp_path: Path, plan: Path, *extra: str) -> str:
    code, out, err = run_seatplan(capsys, monkeypatch, *apply_args(tmp_path, plan, "t1", "--check", *extra))
    assert code == 2, out + err
    assert "error:" in err and "fix:" in err and "--force" in err
    assert not (tmp_path / "rendered").exists()  # nothing rendered, so no playbook could have run
    said = json.loads(out)  # under --json the error is also one JSON object on stdout (issue 32), the same error
    assert set(said) == {"error", "fix", "where"} and " ".join(said["error"].split()) in " ".join(err.split())
    return " ".join(err.split())


def test_a_fresh_plan_passes_the_guard_and_is_applied(planned, capsys, monkeypatch):
    tmp_path, _, _, plan = planned
    assert run_seatplan(capsys, monkeypatch, *render_args(tmp_path, plan, fake_launcher()))[0] == 0
    code, out, err = run_seatplan(capsys, monkeypatch, *apply_args(tmp_path, plan, "t1", "--check"))
    assert code == 0, out + err
    assert json.loads(out)["overridden"] == [] and "warning" not in err


def test_the_plan_records_the_model_files_it_was_sized_from(planned):
    _, _, _, plan = planned
    recorded = Plan.model_validate_json(plan.read_text()).inputs.model_facts_sha256
    assert set(recorded) == {"alpha"}
    assert recorded["alpha"]["config.json"] != "absent" and recorded["alpha"]["hf_quant_config.json"] == "absent"


def test_a_changed_fleet_file_is_refused(planned, capsys, monkeypatch):
    tmp_path, fleet, _, plan = planned
    fleet.write_text(fleet.read_text() + "# edited after planning\n")
    err = refused(capsys, monkeypatch, tmp_path, plan)
    assert f"the fleet file {fleet} changed since the plan was made" in err


@pytest.mark.parametrize("edit", ["config.json", "generation_config.json"])
def test_a_changed_model_file_is_refused_and_named(planned, capsys, monkeypatch, edit):
    tmp_path, _, model, plan = planned
    path = model / edit
    document = json.loads(path.read_text()) if path.exists() else {}
    path.write_text(json.dumps(document | {"max_new_tokens": 77}))
    err = refused(capsys, monkeypatch, tmp_path, plan)
    assert f"seat alpha: the model's {edit} changed since the plan was made" in err
    assert "fleet file" not in err


def test_a_model_that_is_gone_is_refused(planned, capsys, monkeypatch):
    tmp_path, _, model, plan = planned
    shutil.rmtree(model)
    err = refused(capsys, monkeypatch, tmp_path, plan)
    assert "seat alpha: its model cannot be read now" in err


def test_a_plan_that_no_longer_fits_is_refused(planned, capsys, monkeypatch):
    tmp_path, fleet, _, plan = planned
    # someone else now holds 63 GiB of the 64 GiB budget
    fleet.write_text(fleet.read_text().replace("total_bytes: 64GiB}", "total_bytes: 64GiB, reserved_bytes: 63GiB}"))
    err = refused(capsys, monkeypatch, tmp_path, plan)
    assert "GPU cpu-box:0: the plan uses 16.37 GiB, more than the 1.00 GiB it has (64.00 GiB total − 63.00 GiB reserved − 0 B headroom)" in err


def test_misfits_use_the_plans_own_figures_without_a_fleet(planned):
    _, _, _, plan_path = planned
    plan = Plan.model_validate_json(plan_path.read_text())
    assert misfits(plan, None) == []
    gpu = plan.gpus[0]
    gpu.used_bytes = gpu.total_bytes - gpu.reserved_bytes - gpu.headroom_bytes + 1
    assert misfits(plan, None) == [misfits(plan, None)[0]] and misfits(plan, None)[0].startswith("GPU cpu-box:0: the plan uses")
    gpu.used_bytes -= 1
    assert misfits(plan, None) == []


def test_a_plan_for_another_host_set_is_refused(planned, capsys, monkeypatch):
    tmp_path, _, _, plan = planned
    inventory = tmp_path / "other.ini"
    inventory.write_text("[gpus]\nother-box ansible_connection=local\n")
    arguments = apply_args(tmp_path, plan, "t1", "--check")
    arguments[arguments.index("--inventory") + 1] = str(inventory)
    code, out, err = run_seatplan(capsys, monkeypatch, *arguments)
    assert code == 2 and not (tmp_path / "rendered").exists()
    err = " ".join(err.split())
    assert "the inventory lacks the plan's host(s) cpu-box" in err
    assert "the inventory holds host(s) other-box that the plan does not know" in err


def test_a_missing_fleet_file_is_refused(planned, capsys, monkeypatch):
    tmp_path, fleet, _, plan = planned
    fleet.rename(tmp_path / "moved.yaml")
    err = refused(capsys, monkeypatch, tmp_path, plan)
    assert "fleet file" in err and "is not here" in err
    # --fleet points at it again, and the plan passes
    assert run_seatplan(capsys, monkeypatch, *render_args(tmp_path, plan, fake_launcher()))[0] == 0
    code, out, err = run_seatplan(capsys, monkeypatch, *apply_args(tmp_path, plan, "t1", "--check", "--fleet", str(tmp_path / "moved.yaml")))
    assert code == 0, out + err


def test_force_applies_anyway_and_says_what_it_overrode(planned, capsys, monkeypatch):
    tmp_path, fleet, model, plan = planned
    assert run_seatplan(capsys, monkeypatch, *render_args(tmp_path, plan, fake_launcher()))[0] == 0
    fleet.write_text(fleet.read_text() + "# edited after planning\n")
    (model / "config.json").write_text((model / "config.json").read_text().replace("{", '{"note": 1,', 1))
    code, out, err = run_seatplan(capsys, monkeypatch, *apply_args(tmp_path, plan, "t1", "--check", "--force"))
    assert code == 0, out + err
    overridden = json.loads(out)["overridden"]
    assert len(overridden) == 2
    assert overridden[0].startswith(f"the fleet file {fleet} changed") and overridden[1].startswith("seat alpha: the model's config.json changed")
    assert " ".join(err.split()).count("warning: --force overrides:") == 2
