"""The plateau check two days later, end to end: a real plan, a Beszel hub whose system name is not the
plan's host name, the engine's log; the fleet's hosts[].monitor_names maps them; exit codes 0/1/3."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest

from kits.beszel_hub import DAY, NOW, Gpu, Hub, Life
from kits.vllm_logs import boot_lines

MIDNIGHT = int(datetime(2026, 11, 28, tzinfo=UTC).timestamp())
TOTAL_MIB = 95_722


def fleet_text(monitor_names: str, gen_small_cap: str) -> str:
    return f"""hosts:
  - name: gpu-box
    {monitor_names}
    gpus:
      - {{index: 0, total_bytes: {TOTAL_MIB}MiB}}
      - {{index: 1, total_bytes: {TOTAL_MIB}MiB}}
policy:
  headroom_bytes: 0
seats:
  - {{name: gen-small, engine: fixed, memory_cap_bytes: {gen_small_cap}, pin: "gpu-box:0"}}
  - {{name: emb, engine: fixed, memory_cap_bytes: 70000MiB, pin: "gpu-box:1"}}
"""


@pytest.fixture(scope="module")
def scene(tmp_path_factory):
    root = tmp_path_factory.mktemp("beszel-check")
    # GPU 0: rebooted at midnight, crept 2.7 GB over 36 h to 95,111 MiB; GPU 1: steady at 70,000 MiB.
    creeping = Gpu(lives=[Life(8 * DAY, 95_111), Life(NOW - MIDNIGHT, 92_411, creep_mib=2_700, creep_hours=36, chunk_mib=32)],
                   total_mib=TOTAL_MIB)
    steady = Gpu(lives=[Life(8 * DAY, 70_000)], total_mib=TOTAL_MIB)
    Hub([creeping, steady], days=7.5, seed=5).write(root / "data.db", system="gpu-node-03")
    clock = datetime.fromtimestamp(MIDNIGHT + 30, tz=UTC).strftime("%m-%d %H:%M:%S")
    (root / "gen-small.log").write_text("\n".join(boot_lines(1, 2, "gen-small", clock=clock, kv_gib=30.0)) + "\n")
    return root


def plan_for(cli, root, name: str, monitor_names: str, gen_small_cap: str):
    fleet = root / f"{name}.yaml"
    fleet.write_text(fleet_text(monitor_names, gen_small_cap))
    done = cli("plan", str(fleet), "-o", str(root / f"{name}.json"), "--json")
    assert done.exit_code == 0, done.stderr
    return fleet, root / f"{name}.json"


def diagnose(cli, root, fleet, plan, *extra: str) -> tuple[int, dict]:
    done = cli("diagnose", "--beszel", str(root / "data.db"), "--vllm-log", str(root / "gen-small.log"), "--log-year", "2026",
               "--fleet", str(fleet), "--plan", str(plan), "--json", *extra)
    assert done.exit_code in (0, 1, 3), done.stderr
    return done.exit_code, json.loads(done.stdout)


def test_monitor_names_map_beszel_to_the_plan_and_the_check_fails_where_the_creep_ate_the_spare(cli, scene):
    # The plan thought gen-small holds 93,000 MiB: 2,722 MiB spare on GPU 0; the plateau is 95,111 (611 spare).
    fleet, plan = plan_for(cli, scene, "mapped", "monitor_names: [gpu-node-03]", "93000MiB")
    code, report = diagnose(cli, scene, fleet, plan)
    verdicts = {(v["host"], v["index"]): v for v in report["verdicts"]}
    assert {key: v["status"] for key, v in verdicts.items()} == {("gpu-box", 0): "fail", ("gpu-box", 1): "pass"}
    assert verdicts[("gpu-box", 0)]["planned_spare_mib"] == pytest.approx(TOTAL_MIB - 93_000, abs=1)
    assert verdicts[("gpu-box", 0)]["observed_spare_mib"] == pytest.approx(TOTAL_MIB - 95_111, abs=40)
    assert code == 1
    gpu0 = next(g for g in report["gpus"] if g["index"] == 0)
    assert gpu0["host"] == "gpu-box" and gpu0["steps"][0]["inferred"] is False  # the boot line fixed the reboot
    assert gpu0["creep"]["rise_mib"] == pytest.approx(2_700, rel=0.10)


def test_unmapped_names_are_unchecked_not_passed(cli, scene):
    fleet, plan = plan_for(cli, scene, "unmapped", "", "95500MiB")
    code, report = diagnose(cli, scene, fleet, plan)
    assert {v["status"] for v in report["verdicts"]} == {"unchecked"} and code == 3
    assert "gpu-node-03" in report["verdicts"][0]["reason"]
    # The flag maps them as well; everything then holds its spare.
    fleet, plan = plan_for(cli, scene, "flagged", "", "95500MiB")
    code, report = diagnose(cli, scene, fleet, plan, "--host-name", "gpu-node-03=gpu-box")
    assert [v["status"] for v in report["verdicts"]] == ["pass", "pass"] and code == 0
