"""``plan --observed`` against the estimates (issue 46): on random fleets with random observations, an observed
seat is planned from what was seen (its non-KV part as observed, the plan's KV beside it, labelled derived where the
KV or context changed), a seat without one from its estimate, labelled; the headline says which; and a seat or GPU
whose estimate differs from what was seen by more than the documented share (10 %, at least 1 GiB:
plan/observed_check.py, docs/plan.md) is warned about with both figures, and no other is.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from kits.cli import run_cli
from kits.paths import REPO_ROOT
from seatplan.documents.io import read_plan
from seatplan.plan.show import headline

MODELS = REPO_ROOT / "tests" / "fixtures" / "models"
PICKS = ("Qwen--Qwen3-0.6B", "Qwen--Qwen3-4B", "meta-llama--Llama-3.2-3B-Instruct", "Qwen--Qwen3-8B", "mistralai--Mistral-7B-v0.1")
GiB = 2**30
SHARE, FLOOR = 0.10, GiB  # the documented rule


def differs(estimated: int, observed: int) -> bool:
    gap = abs(estimated - observed)
    return gap >= FLOOR and gap > SHARE * max(estimated, observed)


def draw(rng: random.Random, directory: Path) -> tuple[Path, Path, dict]:
    gpus = rng.randint(1, 4)
    seats, layout, observed, caps = [], {}, {}, {}
    for number in range(rng.randint(1, 5)):
        name = f"s{number}"
        gpu = rng.randrange(gpus)
        layout[name] = gpu
        if rng.random() < 0.2:
            caps[name] = rng.randint(1, 12) * GiB
            seats.append(f"  - {{name: {name}, engine: fixed, memory_cap_bytes: {caps[name]}, pin: {gpu}}}")
            continue
        kv, length = rng.randint(12, 48) * 2**28, rng.choice([4096, 8192, 16384])
        seats.append(f"  - {{name: {name}, model: {MODELS / rng.choice(PICKS)}, port: {8000 + number}, kv_cache_memory_bytes: {kv}, "
                     f"max_model_len: {length}}}")
        if rng.random() < 0.6:
            ran_with = kv if rng.random() < 0.6 else rng.randint(12, 48) * 2**28
            ran_length = rng.choice([length, length, None, 2 * length])
            observed[name] = {"footprint_bytes": ran_with + rng.randint(1, 30 * 2**10) * 2**20, "source": f"test draw {number}", "samples": 1,
                              "kv_cache_memory_bytes": ran_with if rng.random() < 0.9 else None, "max_model_len": ran_length,
                              "observed_at": "2026-12-07T09:00:00Z", "at_plateau": False}
    used = [{"host": None, "index": index, "used_bytes": rng.randint(0, 90 * 2**10) * 2**20, "source": f"test smi {index}"}
            for index in range(gpus) if rng.random() < 0.8]
    gpu_lines = "\n".join(f"      - {{index: {index}, name: NVIDIA H200, total_bytes: 140GiB}}" for index in range(gpus))
    fleet = directory / "fleet.yaml"
    fleet.write_text(f"hosts:\n  - name: box\n    gpus:\n{gpu_lines}\npolicy:\n  vllm_version: \"0.32\"\nseats:\n" + "\n".join(seats)
                     + "\ncurrent_layout:\n" + "".join(f"  {name}: {gpu}\n" for name, gpu in layout.items()))
    document = {"kind": "seatplan.observed", "version": 1, "generated_at": "2026-12-07T09:00:00Z", "seats": observed, "gpus_used": used,
                "source": "adopt"}
    path = directory / "observed.json"
    path.write_text(json.dumps(document))
    return fleet, path, {"layout": layout, "observed": observed, "used": used, "caps": caps}


@pytest.mark.parametrize("seed", range(16))
def test_observed_beats_estimated_wherever_both_exist(tmp_path: Path, seed: int, capsys, monkeypatch):
    rng = random.Random(seed)
    fleet, observed_path, drawn = draw(rng, tmp_path)
    target = tmp_path / "plan.json"
    done = run_cli(capsys, monkeypatch, "plan", str(fleet), "--observed", str(observed_path), "-o", str(target), "--json")
    assert done.exit_code in (0, 3), done.stdout + done.stderr
    plan = json.loads(target.read_text())
    warnings = plan["warnings"]
    estimated: dict[str, int] = {}
    for seat in plan["seats"]:
        name, label = seat["name"], seat["observation"]
        if seat["engine"] == "fixed":
            assert label is None
            estimated[name] = drawn["caps"][name]
            continue
        estimated[name] = label["estimated_bytes"]
        seen = drawn["observed"].get(name)
        if seen is None:
            assert label["use"] == "estimated" and seat["footprint_basis"] == "estimate"
            assert seat["footprint_bytes"] == label["estimated_bytes"]
            assert not any(warning.startswith(f"seat {name}:") for warning in warnings)
            continue
        ran_with = seen["kv_cache_memory_bytes"] if seen["kv_cache_memory_bytes"] is not None else seat["kv_cache_memory_bytes"]
        # observed beats estimated: the non-KV part as seen, this plan's KV beside it
        assert seat["footprint_bytes"] == max(0, seen["footprint_bytes"] - ran_with) + seat["kv_cache_memory_bytes"], (seat, seen)
        assert seat["footprint_basis"] == "observed" and label["observed_bytes"] == seen["footprint_bytes"]
        changed = (seen["kv_cache_memory_bytes"] not in (None, seat["kv_cache_memory_bytes"])
                   or seen["max_model_len"] not in (None, seat["max_model_len"]))
        assert label["use"] == ("derived" if changed else "observed"), (label, seen, seat["max_model_len"])
        warned = [warning for warning in warnings if warning.startswith(f"seat {name}: estimated")]
        assert bool(warned) == differs(label["estimated_bytes"], seen["footprint_bytes"]), (warned, label, seen)
        if warned:
            assert f"observed {seen['footprint_bytes'] / GiB:.2f} GiB" in warned[0] and "The plan uses the figure" in warned[0]
    for gpu in drawn["used"]:
        on_it = [name for name, index in drawn["layout"].items() if index == gpu["index"]]
        expected = sum(estimated[name] for name in on_it)
        warned = [warning for warning in warnings if warning.startswith(f"GPU box:{gpu['index']}: estimated")]
        assert bool(warned) == differs(expected, gpu["used_bytes"]), (warned, expected, gpu)
        if warned:
            assert f"observed {gpu['used_bytes'] / GiB:.2f} GiB ({gpu['source']}" in warned[0]
    said = headline(read_plan(target))
    labels = [seat["observation"]["use"] for seat in plan["seats"] if seat["observation"] is not None]
    if labels and "estimated" not in labels:
        assert "from observed footprints (" in said
    elif labels and all(label == "estimated" for label in labels):
        assert "from estimated footprints, none observed (" in said
    elif labels:
        assert "from observed footprints where present (" in said
    for use in ("observed", "derived", "estimated"):
        assert (f"{labels.count(use)} {use}" in said) == (use in labels), said


def test_a_plan_without_observations_carries_no_label(tmp_path: Path, capsys, monkeypatch):
    fleet, _, _ = draw(random.Random(3), tmp_path)
    target = tmp_path / "plan.json"
    done = run_cli(capsys, monkeypatch, "plan", str(fleet), "-o", str(target), "--json")
    assert done.exit_code in (0, 3), done.stderr
    assert all(seat["observation"] is None for seat in json.loads(target.read_text())["seats"])
    assert "observed" not in headline(read_plan(target))
