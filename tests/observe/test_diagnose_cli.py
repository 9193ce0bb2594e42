"""`seatplan diagnose` end to end: logs + GPU series + per-process readings + a plan → report and observations."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest

from kits.documents import plan_document, planned_gpu, planned_seat
from kits.night import NIGHT, vllm_log_options
from kits.paths import FORMAT_FIXTURES, REPO_ROOT
from kits.series import DAY, HOUR, MINUTE, T0, seed_scenarios, write_nvidia_smi
from kits.vllm_logs import boot_lines
from seatplan.documents.observed import ObservedFootprints
from seatplan.units import GiB, MiB


def clock(offset_s: int) -> str:
    return datetime.fromtimestamp(T0 + offset_s, tz=UTC).strftime("%m-%d %H:%M:%S")


@pytest.fixture(scope="module")
def scene(tmp_path_factory):
    root = tmp_path_factory.mktemp("diagnose")
    gpus = {index: scenario.generate() for index, scenario in enumerate(seed_scenarios().values())}
    write_nvidia_smi(root / "smi.csv", gpus)
    # "big" (GPU 0) restarted when GPU 0 stepped; "racy" booted three times with moving KV.
    log = boot_lines(10, 11, "big", clock=clock(0), kv_gib=60.0) + boot_lines(20, 21, "big", clock=clock(4 * DAY), kv_gib=62.0, util=0.93)
    for number, (kv, non_torch) in enumerate(((20.37, 8.11), (26.74, 1.74), (29.04, -0.56))):
        log += boot_lines(30 + number, 40 + number, "racy", clock=clock(number * DAY + HOUR), kv_gib=kv, non_torch_gib=non_torch)
    (root / "engines.log").write_text("\n".join(log) + "\n")
    apps = ["timestamp, gpu_uuid, pid, process_name, used_gpu_memory [MiB]"]
    for minute, used in enumerate([30_500, 31_200, 31_900, 32_000, 32_010, 31_990]):
        stamp = datetime.fromtimestamp(T0 + 5 * DAY + minute * MINUTE, tz=UTC).strftime("%Y/%m/%d %H:%M:%S.000")
        apps.append(f"{stamp}, GPU-1, 42, VLLM::EngineCore, {used} MiB")
    (root / "apps.csv").write_text("\n".join(apps) + "\n")
    plan = plan_document(
        [planned_seat("big", ["node-1:0"], 86_000 * MiB, kv_cache_memory_bytes=60 * GiB),
         planned_seat("racy", ["node-1:1"], 30_000 * MiB, kv_cache_memory_bytes=27 * GiB),
         planned_seat("emb", ["node-1:1"], 60_000 * MiB)],
        [planned_gpu("node-1", 0, 86_000 * MiB, 6_000 * MiB, ["big"], total_bytes=97_871 * MiB),
         planned_gpu("node-1", 1, 90_000 * MiB, 4_000 * MiB, ["racy", "emb"], total_bytes=97_871 * MiB)],
    ).model_dump(mode="json")
    (root / "plan.json").write_text(json.dumps(plan))
    return root


def test_json_report_and_observations(cli, scene):
    observed_path = scene / "observed.json"
    result = cli("diagnose", "--vllm-log", str(scene / "engines.log"), "--log-year", "2026", "--nvidia-smi", str(scene / "smi.csv"),
                 "--nvidia-smi", str(scene / "apps.csv"), "--plan", str(scene / "plan.json"), "-o", str(observed_path), "--json")
    assert result.exit_code == 1, result.stderr  # a GPU overran its planned spare
    report = json.loads(result.stdout)  # exactly one JSON document
    gpus = {gpu["index"]: gpu for gpu in report["gpus"]}
    assert [round(s["delta_mib"], -2) for s in gpus[0]["steps"]] == [2_300]
    assert gpus[0]["creep"] is None and gpus[1]["creep"]["plateau_at"]
    assert gpus[1]["plateau_free_mib"] == pytest.approx(97_871 - 97_800, abs=60)  # "about 60 MiB free"

    # GPU 0: 91,082 used against 86,000 planned + 6,000 spare: the spare held; the seat's estimate is off.
    assert gpus[0]["plan"]["spare_held"] and gpus[0]["plan"]["seats_to_correct"] == ["big"]
    assert gpus[0]["plan"]["miss_mib"] == pytest.approx(5_082, abs=60)
    # GPU 1: 97,800 against 90,000 + 4,000: overrun by ~3,800; "racy" is observed at 32,000 vs 30,000 planned.
    assert not gpus[1]["plan"]["spare_held"] and gpus[1]["plan"]["seats_to_correct"] == ["racy"]

    seats = {seat["name"]: seat for seat in report["seats"]}
    assert len(seats["big"]["boots"]) == 2 and len(seats["racy"]["boots"]) == 3
    # No log of a neighbour booting beside racy: its moving KV is drift, not a proven race.
    drift = next(f for f in seats["racy"]["findings"] if f["kind"] == "kv_drift")
    assert drift["pin_kv_cache_memory_bytes"] == 27 * GiB  # the plan's pin wins over the log's 29 GiB
    assert {f["kind"] for f in report["findings"]} >= {"kv_drift", "plan_spare_missed", "seat_estimate_off"}
    assert "co_boot_race" not in {f["kind"] for f in report["findings"]}
    # The plateau check ends with a verdict per planned GPU, and GPU 1's extra memory stays at GPU level.
    assert [(v["index"], v["status"]) for v in report["verdicts"]] == [(0, "fail"), (1, "fail")]
    # GPU 1 at 97,800 MiB against racy's observed 32,000 and emb's planned 60,000: 5,800 MiB no seat's evidence covers.
    correction = next(c for c in report["gpu_corrections"] if c["index"] == 1)
    assert correction["extra_bytes"] / MiB == pytest.approx(5_800, abs=60) and correction["seats"] == ["racy", "emb"]
    assert result.exit_code == 1

    # One document: -o writes exactly what --json printed; its observed part is what plan --observed reads.
    written = json.loads(observed_path.read_text())
    assert written["kind"] == "seatplan.diagnose" and written == report
    observed = written["observed"]
    assert observed["seats"]["racy"]["footprint_bytes"] == 32_000 * MiB  # pid 42 (racy's last engine core) at plateau
    assert observed["seats"]["racy"]["source"].startswith("nvidia-smi compute-apps")
    # big's restart dipped to 0 on its GPU: its footprint is the GPU's plateau after the restart.
    assert observed["seats"]["big"]["footprint_bytes"] / MiB == pytest.approx(91_082, abs=60)
    assert observed["seats"]["big"]["kv_cache_memory_bytes"] == 62 * GiB

    assert observed["engines"] == {}  # no stats lines or /metrics were given

    assert ObservedFootprints.model_validate(observed).seats["big"].footprint_bytes == observed["seats"]["big"]["footprint_bytes"]


def test_human_output_and_engine_stats(cli, scene, tmp_path):
    observed_path = tmp_path / "observed.json"
    result = cli("diagnose", "--nvidia-smi", str(scene / "smi.csv"), "--vllm-log", f"renamed={scene / 'engines.log'}",
                 "--vllm-metrics", str(FORMAT_FIXTURES / "vllm_metrics.prom"), "-o", str(observed_path))
    assert result.exit_code == 0, result.stderr
    assert "GPUs" in result.stdout and "renamed" in result.stdout and "kv_drift" in result.stdout
    engines = json.loads(observed_path.read_text())["observed"]["engines"]
    assert engines["qwen3-30b-a3b"]["peak_kv_cache_usage_pct"] == pytest.approx(1.47)


@pytest.mark.parametrize("args, where", [
    ((), "diagnose"),
    (("--nvidia-smi", "/nonexistent.csv"), "/nonexistent.csv"),
    (("--prometheus", "http://127.0.0.1:9/", "--since", "ages"), "--since"),
    # files given on their own: each is told the option it goes after
    (("engine.log", "smi.csv", "data.db"), "fix: write --vllm-log engine.log --nvidia-smi smi.csv --beszel data.db"),
    # a folder where a file goes: the hub's database, or -o (refused before any reading)
    (("--beszel", str(REPO_ROOT / "examples")), "examples: is a folder, not the hub's database"),
    (("--nvidia-smi", "/nonexistent.csv", "-o", str(REPO_ROOT)), f"-o {REPO_ROOT}: is a folder, not the diagnose document to write"),
])
def test_bad_input_is_a_clean_error(cli, args, where):
    result = cli("diagnose", *args)
    assert result.exit_code == 2 and result.stdout == ""
    assert "Traceback" not in result.stderr and where in result.stderr and "fix:" in result.stderr


def test_bad_plan_is_a_clean_error(cli, tmp_path, scene):
    bad = tmp_path / "plan.json"
    plan = json.loads((scene / "plan.json").read_text())
    plan["gpus"][0]["index"] = "zero"
    bad.write_text(json.dumps(plan))
    result = cli("diagnose", "--nvidia-smi", str(scene / "smi.csv"), "--plan", str(bad), "-o", str(tmp_path / "out.json"))
    assert result.exit_code == 2 and "gpus.0.index" in result.stderr
    assert not (tmp_path / "out.json").exists()


def test_plateau_check_maps_host_names_and_never_passes_silently(cli, scene, tmp_path):
    """The plan says node-1, nvidia-smi's history has no host, a second planned host has no history at all."""
    plan = json.loads((scene / "plan.json").read_text())
    plan["gpus"].append({**plan["gpus"][0], "host": "node-2", "seats": []})
    (tmp_path / "plan.json").write_text(json.dumps(plan))
    unnamed = cli("diagnose", "--nvidia-smi", str(scene / "smi.csv"), "--plan", str(tmp_path / "plan.json"), "--json")
    verdicts = {(v["host"], v["index"]): v for v in json.loads(unnamed.stdout)["verdicts"]}
    # Two planned hosts and a history without a host name: nothing is matched by guess.
    assert {v["status"] for v in verdicts.values()} == {"unchecked"} and unnamed.exit_code == 3
    assert "--host-name" in verdicts[("node-1", 0)]["reason"]
    named = cli("diagnose", "--nvidia-smi", f"smi-host={scene / 'smi.csv'}", "--host-name", "smi-host=node-1",
                "--plan", str(tmp_path / "plan.json"), "--json")
    statuses = {(v["host"], v["index"]): v["status"] for v in json.loads(named.stdout)["verdicts"]}
    assert statuses == {("node-1", 0): "fail", ("node-1", 1): "fail", ("node-2", 0): "unchecked"}
    assert named.exit_code == 1


def test_a_fleet_file_alone_maps_seats_but_checks_no_plan(cli):
    # --fleet tells which seat runs where, not what each GPU should hold: no plan figures, so no "plan expected 0 MiB".
    night = REPO_ROOT / "examples" / "night"
    result = cli("diagnose", "--vllm-log", f"qwen3-32b={night / 'vllm' / 'qwen3-32b.log'}", "--vllm-log", f"qwen3-4b={night / 'vllm' / 'qwen3-4b.log'}",
                 "--nvidia-smi", str(night / "nvidia-smi.csv"), "--fleet", str(REPO_ROOT / "examples" / "demo" / "fleet.yaml"), "--json")
    assert result.exit_code == 0, result.stderr
    report = json.loads(result.stdout)
    kinds = {finding["kind"] for finding in report["findings"]} | {f["kind"] for seat in report["seats"] for f in seat["findings"]}
    assert "co_boot_race" in kinds  # the fleet still names who shared GPU 0
    assert not kinds & {"plan_spare_missed", "seat_estimate_off"}
    assert all(gpu["plan"] is None for gpu in report["gpus"])


@pytest.mark.parametrize("columns", ["80", "100"])
def test_each_step_reads_whole_on_a_line_of_its_own(cli, columns, tmp_path):
    """A GPU's steps, one a line: its time and its size are never split across lines (they were "11-25" / "13:56")."""
    written = tmp_path / "diagnose.json"
    done = cli("diagnose", *vllm_log_options(), "--nvidia-smi", str(NIGHT / "nvidia-smi.csv"), "-o", str(written),
               env={"COLUMNS": columns})
    assert done.exit_code == 0, done.stderr
    steps = [step for gpu in json.loads(written.read_text())["gpus"] for step in gpu["steps"]]
    assert steps
    for step in steps:
        said = f"{datetime.fromisoformat(step['at']):%m-%d %H:%M} {step['delta_mib']:+,.0f}"
        assert any(f"│ {said} " in line for line in done.stdout.splitlines()), f"{said} is not whole on one line:\n{done.stdout}"
