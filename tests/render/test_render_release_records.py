"""Release records on the host and rollback from them (issue 43, items 4 and 5), through the real ansible-playbook
against this machine in script mode with the stand-in engine (tests/integration/fake_engine.py answers /health only;
tests/integration/test_apply_vllm_records.py runs the three releases with real vLLM CPU engines and `seatplan verify`).

- Each apply leaves HOST_DIR/releases/<time>-<tag>.json: the tag, the plan's SHA-256, the steps, each file replaced with
  its backup, what it started.
- `rollback --to first` after `second` and `third` puts the first plan's files back and restarts the engines that
  changed, whatever DIR holds (another plan is rendered into it first); no mark is left, the undone records are set aside.
- `rollback --to nosuch` exits 2 naming the tags there and changes nothing.
- A failed apply leaves DIR as the last release that landed: `diff --against DIR` and `plan --current DIR` describe it.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from kits.parts import free_port, require
from kits.paths import REPO_ROOT
from kits.render import QWEN3_8B
from kits.rollout import (
    ansible_installed,
    apply_args,
    build_plan_file,
    cpu_fleet,
    fake_launcher,
    localhost_inventory,
    render_args,
    run_seatplan,
    stop_engines,
)
from seatplan.documents.fleet_file import load_fleet
from seatplan.plan.current import read_current

pytestmark = pytest.mark.ansible
FAST_HEALTH = ("-e", "seatplan_health_timeout_s=30")
SEATS = ("alpha", "beta")
RENDER_DOC = REPO_ROOT / "docs" / "render.md"


def doc_block(after: str, fence: str) -> str:
    """The first fenced block of docs/render.md after the line holding ``after``."""
    text = RENDER_DOC.read_text(encoding="utf-8")
    rest = text[text.index(after):]
    start = rest.index(fence + "\n") + len(fence) + 1
    return rest[start:rest.index("```", start)]


@pytest.fixture
def rollout(tmp_path):
    require(ansible_installed(), "ansible-playbook (pip install ansible-core)")
    yield tmp_path
    stop_engines(tmp_path)


def starts(tmp_path: Path) -> list[str]:
    return [" ".join(line.split()[:2]) for line in (tmp_path / "state" / "starts.log").read_text().splitlines()]


def env_texts(tmp_path: Path) -> dict[str, str]:
    return {seat: (tmp_path / "host" / "env" / f"{seat}.env").read_text() for seat in SEATS}


def marks(tmp_path: Path) -> list[str]:
    return sorted(path.name for kind in ("new", "stopped", "cutover") for path in (tmp_path / "host").rglob(f"*.{kind}-*"))


def three_plans(tmp_path: Path, rng) -> list[Path]:
    """Three plans of alpha and beta whose output caps differ (drawn), each changing at least one seat."""
    ports = {seat: (QWEN3_8B, free_port()) for seat in SEATS}
    caps = [{seat: rng.randint(8, 4096) for seat in SEATS}]
    for _ in range(2):
        changed = rng.sample(SEATS, rng.randint(1, 2))
        caps.append({seat: (rng.randint(8, 4096) if seat in changed else caps[-1][seat]) for seat in SEATS})
        for seat in changed:
            while caps[-1][seat] == caps[-2][seat]:
                caps[-1][seat] = rng.randint(8, 4096)
    return [build_plan_file(cpu_fleet(tmp_path, ports, kv="256MiB", total="64GiB", caps=cap, name=f"fleet{number}.yaml"), tmp_path / f"plan{number}.json")
            for number, cap in enumerate(caps, 1)]


def rollback(capsys, monkeypatch, tmp_path: Path, *args: str) -> tuple[int, str, str]:
    return run_seatplan(capsys, monkeypatch, "rollback", str(tmp_path / "rendered"), *args, "--inventory", str(localhost_inventory(tmp_path)),
                        "-e", "seatplan_run_verify=false", *FAST_HEALTH, "--json")


@pytest.mark.slow
def test_rollback_to_a_tag_undoes_every_later_release_from_the_hosts_records(rollout, capsys, monkeypatch, rng):
    tmp_path = rollout
    plans = three_plans(tmp_path, rng)
    assert run_seatplan(capsys, monkeypatch, *render_args(tmp_path, plans[0], fake_launcher()))[0] == 0
    after: list[dict[str, str]] = []
    for plan, tag in zip(plans, ("first", "second", "third"), strict=True):
        code, out, err = run_seatplan(capsys, monkeypatch, *apply_args(tmp_path, plan, tag), *FAST_HEALTH)
        assert code == 0, out + err
        after.append(env_texts(tmp_path))
    records = sorted((tmp_path / "host" / "releases").glob("*.json"))
    assert [path.name.rsplit("-", 1)[1] for path in records] == ["first.json", "second.json", "third.json"]
    for path, plan in zip(records, plans, strict=True):
        record = json.loads(path.read_text())
        assert record["landed"] and record["plan_sha256"] == hashlib.sha256(plan.read_bytes()).hexdigest()
        assert sorted(step["seat"] for step in record["steps"]) == list(SEATS)
    # docs/render.md's record shows the keys a real one has
    shown = json.loads(doc_block("**Release records.**", "```json"))
    assert set(shown) == set(json.loads(records[0].read_text()))
    assert set(shown["steps"][0]) == set(json.loads(records[1].read_text())["steps"][0])
    second = json.loads(records[1].read_text())
    changed = {seat for seat in SEATS if after[1][seat] != after[0][seat]}
    replaced = {item["dest"]: item["backup"] for step in second["steps"] for item in step["files"]}
    assert set(replaced) == {str(tmp_path / "host" / "env" / f"{seat}.env") for seat in changed}
    assert all(Path(backup).read_text() == after[0][Path(dest).stem] for dest, backup in replaced.items())
    assert {step["seat"] for step in second["steps"] if step["started"] and step["pid"]} == changed

    # DIR holds another plan's render: rollback reads the hosts' records, not DIR
    assert run_seatplan(capsys, monkeypatch, *render_args(tmp_path, plans[1], fake_launcher()))[0] == 0
    before_log = starts(tmp_path)
    code, out, err = rollback(capsys, monkeypatch, tmp_path, "--to", "nosuch")
    assert code == 2 and "no release tagged nosuch is recorded on host cpu-box; tags there: first, second, third" in err, out + err
    assert all(line in err.splitlines() for line in doc_block("A tag no record on a host carries", "```").splitlines())
    assert env_texts(tmp_path) == after[2] and starts(tmp_path) == before_log

    code, out, err = rollback(capsys, monkeypatch, tmp_path, "--to", "first")
    assert code == 0, out + err
    assert env_texts(tmp_path) == after[0]
    # every engine whose files go back stops first, then each starts from them (stop before start: vLLM's memory check)
    restarted = sorted(seat for seat in SEATS if after[0][seat] != after[2][seat])
    assert starts(tmp_path)[len(before_log):] == [f"{seat} stop" for seat in restarted] + [f"{seat} start" for seat in restarted]
    assert marks(tmp_path) == []
    assert sorted(path.name for path in (tmp_path / "host" / "releases" / "undone").glob("*.json")) == [path.name for path in records[1:]]
    # once more: nothing after first, nothing restarted
    code, out, err = rollback(capsys, monkeypatch, tmp_path, "--to", "first")
    assert code == 0 and "no release after first: nothing to roll back" in out, out + err
    assert len(starts(tmp_path)) == len(before_log) + 2 * len(restarted)


@pytest.mark.slow
def test_a_failed_apply_leaves_the_rendered_directory_at_the_release_that_landed(rollout, capsys, monkeypatch):
    tmp_path = rollout
    ports = {seat: (QWEN3_8B, free_port()) for seat in SEATS}
    landed = build_plan_file(cpu_fleet(tmp_path, ports, kv="256MiB", total="64GiB"), tmp_path / "plan1.json")
    fleet2 = cpu_fleet(tmp_path, ports, kv="256MiB", total="64GiB", envs={"beta": {"SEATPLAN_TEST_BROKEN": "1"}}, name="fleet2.yaml")
    broken = build_plan_file(fleet2, tmp_path / "plan2.json")
    assert run_seatplan(capsys, monkeypatch, *render_args(tmp_path, landed, fake_launcher()))[0] == 0
    code, out, err = run_seatplan(capsys, monkeypatch, *apply_args(tmp_path, landed, "first"), *FAST_HEALTH)
    assert code == 0, out + err
    rendered = tmp_path / "rendered"
    manifest = (rendered / "seatplan-render.json").read_text()

    code, out, err = run_seatplan(capsys, monkeypatch, *apply_args(tmp_path, broken, "second"), "-e", "seatplan_health_timeout_s=8")
    assert code == 1 and json.loads(out)["failed_step"].endswith("(restart beta on cpu-box:0)"), out + err
    assert f"{rendered} is left as it was: it holds the last release that landed" in err
    assert (rendered / "seatplan-render.json").read_text() == manifest
    assert not [path for path in tmp_path.iterdir() if path.name.endswith(".apply")]  # the staging directory is gone
    # nothing would change against DIR for the plan that landed (the failed plan's diff reads the stand-in's command,
    # which is no vLLM command line: tests/integration/test_apply_vllm_records.py diffs it with real engines)
    assert run_seatplan(capsys, monkeypatch, "diff", str(landed), "--against", str(rendered))[0] == 0
    current = read_current(rendered, load_fleet(fleet2).fleet)
    assert current.gpus == read_current(landed, load_fleet(fleet2).fleet).gpus
    assert "SEATPLAN_TEST_BROKEN" not in (rendered / "env" / "beta.env").read_text()
    # the release that failed recorded the step that landed before it (alpha's), so rollback --to first can undo it
    record = json.loads(sorted((tmp_path / "host" / "releases").glob("*-second.json"))[0].read_text())
    assert not record["landed"] and [step["seat"] for step in record["steps"]] == ["alpha"]
