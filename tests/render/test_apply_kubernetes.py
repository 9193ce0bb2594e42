"""`seatplan apply PLAN --target kubernetes --context NAME` and `rollback --to TAG --target kubernetes`.

No Kubernetes API server can run on this machine (it needs etcd, a kubelet and a container runtime), so these tests put a
stand-in `kubectl` on PATH (tests/kits/kubectl_standin.py) that records every call's argv and answers `rollout status`
as each test needs; the manifests it is handed are the real render's, checked against the real schemas in
tests/render/test_render_kubernetes.py."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from kits.kubectl_standin import write_kubectl
from kits.rollout import with_rollout
from seatplan.documents.io import read_plan
from seatplan.render.kubernetes import object_name


@pytest.fixture
def kubectl(tmp_path, monkeypatch):
    """The stand-in on PATH; returns a reader of the calls it got."""
    write_kubectl(tmp_path / "bin")
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
    log = tmp_path / "kubectl.jsonl"
    monkeypatch.setenv("STANDIN_KUBECTL_LOG", str(log))
    monkeypatch.delenv("STANDIN_KUBECTL_FAIL", raising=False)

    def calls() -> list[list[str]]:
        return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []

    return calls


def verbs(calls: list[list[str]]) -> list[tuple[str, str]]:
    """(verb, object) of each call: ("apply", FILE), ("rollout", DEPLOYMENT), ("health", SERVICE), ("delete", LABEL), ("diff", FILE)."""
    found = []
    for call in calls:
        if "apply" in call:
            found.append(("apply", call[call.index("-f") + 1]))
        elif "rollout" in call:
            found.append(("rollout", call[call.index("status") + 1].split("/", 1)[1]))
        elif "--raw" in call:
            found.append(("health", call[call.index("--raw") + 1].split("/services/", 1)[1].split(":")[1]))
        elif "delete" in call:
            found.append(("delete", call[call.index("-l") + 1].split("=", 1)[1]))
        elif "diff" in call:
            found.append(("diff", call[call.index("-f") + 1]))
    return found


def demo_plan_with_steps(demo_plan_path: Path, tmp_path: Path, steps: list[tuple[str, str, list[str]]]) -> Path:
    plan = tmp_path / "plan.json"
    plan.write_text(demo_plan_path.read_text())
    return with_rollout(plan, steps)


def test_apply_follows_the_plan_order_one_seat_at_a_time(cli, kubectl, demo_plan_path, tmp_path):
    """The fixed seat's claim, the engines the rollout leaves as they are (boot order), then the rollout's steps in its order
    (a stop deletes the seat's objects), each seat applied, waited for and asked for /health through its Service before the next."""
    plan_path = demo_plan_with_steps(demo_plan_path, tmp_path, [("stop", "qwen3-8b", ["gpu-box:2"]), ("start", "mistral-7b", ["gpu-box:2"]),
                                                                ("start", "qwen3-8b", ["gpu-box:1"])])
    plan = read_plan(plan_path)
    result = cli("apply", str(plan_path), "--target", "kubernetes", "--context", "prod-east", "--tag", "t1", "-o", str(tmp_path / "out"))
    assert result.exit_code == 0, result.stderr
    calls = kubectl()
    assert all(call[call.index("--context") + 1] == "prod-east" and "--request-timeout=30s" in call for call in calls)
    stepped = {"qwen3-8b", "mistral-7b"}
    unchanged = [seat.name for seat in sorted(plan.vllm_seats(), key=lambda seat: seat.boot_order) if seat.name not in stepped]
    out = tmp_path / "out" / "kubernetes"
    expected = [("apply", str(out / "fixed" / "speech.yaml")), ("rollout", "speech")]
    for seat in [*unchanged, "mistral-7b"]:
        expected += [("apply", str(out / "seats" / f"{object_name(seat)}.yaml")), ("rollout", object_name(seat)), ("health", object_name(seat))]
    expected.insert(len(expected) - 3, ("delete", "qwen3-8b"))
    expected += [("apply", str(out / "seats" / "qwen3-8b.yaml")), ("rollout", "qwen3-8b"), ("health", "qwen3-8b"),
                 ("apply", str(out / "gateway.yaml")), ("apply", str(out / "alerts.yaml"))]
    assert verbs(calls) == expected
    # every call that waits is bounded: rollout status and delete carry the health timeout, the process a deadline
    assert all(any(word.startswith("--timeout=") for word in call) for call in calls if "rollout" in call or "delete" in call)
    release = json.loads((tmp_path / "out" / "kubernetes-releases" / "t1" / "release.json").read_text())
    assert release["ok"] is True and release["applied"][0] == "kubernetes/fixed/speech.yaml" and release["applied"][-1] == "kubernetes/alerts.yaml"
    assert (tmp_path / "out" / "kubernetes-releases" / "CURRENT").read_text() == "t1\n"
    assert (tmp_path / "out" / "kubernetes-releases" / "t1" / "kubernetes" / "seats" / "qwen3-8b.yaml").read_text() == (out / "seats" / "qwen3-8b.yaml").read_text()


def test_a_failing_rollout_stops_and_restores_the_previous_objects(cli, kubectl, demo_plan_path, tmp_path, monkeypatch):
    """Release t1 completes; t2 changes qwen3-4b and its rollout status fails: qwen3-4b is put back as t1 applied it, no later
    seat is touched, CURRENT stays t1. Then rollback --to t1 applies t1's manifests again in reverse order."""
    plan_path = demo_plan_with_steps(demo_plan_path, tmp_path, [])
    out = tmp_path / "out"
    assert cli("apply", str(plan_path), "--target", "kubernetes", "--context", "c", "--tag", "t1", "-o", str(out)).exit_code == 0
    first = len(kubectl())
    document = json.loads(plan_path.read_text())
    seat = next(seat for seat in document["seats"] if seat["name"] == "qwen3-4b")
    seat["launch"]["max_num_seqs"] = 64
    plan_path.write_text(json.dumps(document))
    monkeypatch.setenv("STANDIN_KUBECTL_FAIL", "qwen3-4b")
    result = cli("apply", str(plan_path), "--target", "kubernetes", "--context", "c", "--tag", "t2", "-o", str(out))
    assert result.exit_code == 1
    assert "qwen3-4b" in result.stderr and "exceeded its progress deadline" in result.stderr and "put back as release t1" in result.stderr
    second = verbs(kubectl()[first:])
    failed_at = second.index(("rollout", "qwen3-4b"))
    assert second[failed_at - 1] == ("apply", str(out / "kubernetes" / "seats" / "qwen3-4b.yaml"))
    assert second[failed_at + 1:] == [("apply", str(out / "kubernetes-releases" / "t1" / "kubernetes" / "seats" / "qwen3-4b.yaml")),
                                      ("rollout", "qwen3-4b"), ("health", "qwen3-4b")]
    new, old = (out / "kubernetes" / "seats" / "qwen3-4b.yaml").read_text(), (out / "kubernetes-releases" / "t1" / "kubernetes" / "seats" / "qwen3-4b.yaml").read_text()
    assert "- --max-num-seqs\n        - '64'" in new and "- --max-num-seqs\n        - '64'" not in old  # what was put back is t1's engine
    assert json.loads((out / "kubernetes-releases" / "t2" / "release.json").read_text())["ok"] is False
    assert (out / "kubernetes-releases" / "CURRENT").read_text() == "t1\n"

    before = len(kubectl())
    back = cli("rollback", str(out), "--to", "t1", "--target", "kubernetes", "--context", "c")
    assert back.exit_code == 0, back.stderr
    t1 = json.loads((out / "kubernetes-releases" / "t1" / "release.json").read_text())["applied"]
    applied = [target for verb, target in verbs(kubectl()[before:]) if verb == "apply"]
    assert applied == [str(out / "kubernetes-releases" / "t1" / path) for path in reversed(t1)]


def test_first_release_failure_removes_the_new_seat(cli, kubectl, demo_plan_path, tmp_path, monkeypatch):
    """No earlier release: the seat whose rollout failed is removed (its claim's bytes freed), and the rollout stops there."""
    plan_path = demo_plan_with_steps(demo_plan_path, tmp_path, [])
    monkeypatch.setenv("STANDIN_KUBECTL_FAIL", "qwen3-30b-a3b")
    result = cli("apply", str(plan_path), "--target", "kubernetes", "--context", "c", "--tag", "t1", "-o", str(tmp_path / "out"))
    assert result.exit_code == 1 and "removed (no earlier release had it)" in result.stderr
    assert verbs(kubectl())[-2:] == [("rollout", "qwen3-30b-a3b"), ("delete", "qwen3-30b-a3b")]
    assert not (tmp_path / "out" / "kubernetes-releases" / "CURRENT").exists()


def test_check_shows_kubectl_diff_per_step_and_applies_nothing(cli, kubectl, demo_plan_path, tmp_path):
    plan_path = demo_plan_with_steps(demo_plan_path, tmp_path, [("stop", "qwen3-8b", ["gpu-box:2"]), ("start", "qwen3-8b", ["gpu-box:1"])])
    result = cli("apply", str(plan_path), "--target", "kubernetes", "--context", "c", "--check", "-o", str(tmp_path / "out"))
    assert result.exit_code == 0, result.stderr
    found = verbs(kubectl())
    assert {verb for verb, _ in found} == {"diff"} and len(found) == 1 + 7 + 2  # the fixed seat, 7 engines, gateway and alerts
    assert "would delete the objects of seat qwen3-8b" in result.stdout and "changes" in result.stdout
    assert not (tmp_path / "out" / "kubernetes-releases").exists()


def test_refusals(cli, kubectl, demo_plan_path, tmp_path):
    plan_path = demo_plan_with_steps(demo_plan_path, tmp_path, [])
    missing = cli("apply", str(plan_path), "--target", "kubernetes", "-o", str(tmp_path / "out"))
    assert missing.exit_code == 2 and "--context" in missing.stderr
    assert cli("apply", str(plan_path), "--target", "kubernetes", "--context", "c", "--tag", "t1", "-o", str(tmp_path / "out")).exit_code == 0
    again = cli("apply", str(plan_path), "--target", "kubernetes", "--context", "c", "--tag", "t1", "-o", str(tmp_path / "out"))
    assert again.exit_code == 2 and "exists already" in again.stderr
    unknown = cli("rollback", str(tmp_path / "out"), "--to", "t9", "--target", "kubernetes", "--context", "c")
    assert unknown.exit_code == 2 and "tags there: t1" in unknown.stderr
    hosts = cli("apply", str(plan_path), "-o", str(tmp_path / "out"))
    assert hosts.exit_code == 2 and "--inventory" in hosts.stderr
