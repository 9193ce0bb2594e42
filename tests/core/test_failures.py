"""Failures that say what to do: each refusal or warning names the figure to write and the lever that buys room,
on the shipped model configs (examples/demo/models) through the real CLI."""

from __future__ import annotations

import json
import os
import random
import re
import stat
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from kits.cli import run_cli
from kits.night import FLEET, NIGHT
from kits.paths import REPO_ROOT

MODELS = FLEET.parent / "models"
QWEN_MOE = MODELS / "Qwen--Qwen3-30B-A3B-Instruct-2507"
PICKS = [QWEN_MOE, MODELS / "Qwen--Qwen3-8B", MODELS / "meta-llama--Llama-3.1-8B-Instruct", MODELS / "google--gemma-3-27b-it",
         MODELS / "mistralai--Mistral-7B-v0.1", MODELS / "openai--gpt-oss-20b"]


def fleet(directory: Path, seats: str, gpu: str = "{index: 0, name: RTX PRO 6000 Blackwell, total_bytes: 95.59GiB}",
          gpus: int = 1) -> Path:
    lines = "\n".join(f"      - {gpu.replace('index: 0', f'index: {index}')}" for index in range(gpus))
    path = directory / "fleet.yaml"
    path.write_text(f"hosts:\n  - name: box\n    gpus:\n{lines}\nseats:\n{seats}")
    return path


def seat(name: str, model: Path, port: int | None = 8000, **fields: object) -> str:
    text = f"  - name: {name}\n    model: {model}\n" + (f"    port: {port}\n" if port is not None else "")
    return text + "".join(f"    {key}: {value}\n" for key, value in fields.items())


@pytest.mark.parametrize("seed", range(4))
def test_a_pin_too_small_names_the_longest_context_and_fit_asks_for_it(tmp_path: Path, seed: int, capsys, monkeypatch):
    draw = random.Random(seed)
    model = draw.choice(PICKS)
    longest_kv = json.loads(run_cli(capsys, monkeypatch, "model", str(model), "--json").stdout)["min_kv_cache_bytes"]
    pin = draw.randint(longest_kv // 50, longest_kv - 1)  # somewhere below what the published context needs
    facts = json.loads(run_cli(capsys, monkeypatch, "model", str(model), "--kv-cache-memory-bytes", str(pin), "--json").stdout)
    refused = run_cli(capsys, monkeypatch, "plan", str(fleet(tmp_path, seat("s", model, max_model_len="published", kv_cache_memory_bytes=pin))))
    assert refused.exit_code == 2
    named = re.search(r"set max_model_len: (\d+) \(the longest context the pin holds; max_model_len: fit asks for it\)", refused.stderr)
    assert named, refused.stderr
    assert int(named.group(1)) == facts["max_model_len_fit"]  # vLLM's own search, as `seatplan model` reports it
    fitted = run_cli(capsys, monkeypatch, "plan", str(fleet(tmp_path, seat("s", model, max_model_len="fit", kv_cache_memory_bytes=pin))), "--json")
    assert fitted.exit_code == 0, fitted.stderr
    planned = json.loads(fitted.stdout)["seats"][0]
    assert planned["max_model_len"] == facts["max_model_len_fit"] and planned["kv_cache_memory_bytes"] == pin
    one_more = run_cli(capsys, monkeypatch, "plan", str(fleet(tmp_path, seat("s", model, max_model_len=planned["max_model_len"] + 16,
                                                                                   kv_cache_memory_bytes=pin))))
    assert one_more.exit_code == 2 and "cannot hold one" in one_more.stderr  # the named length is the longest


def test_fit_without_a_pin_says_what_to_add(tmp_path: Path, capsys, monkeypatch):
    done = run_cli(capsys, monkeypatch, "plan", str(fleet(tmp_path, seat("s", QWEN_MOE, max_model_len="fit"))))
    assert done.exit_code == 2 and "fix: add kv_cache_memory_bytes" in done.stderr


def test_a_decimal_gpu_size_is_refused_at_its_line_with_cuda_s_total_as_the_fix(tmp_path: Path, capsys, monkeypatch):
    """issue 32: `96GB` was a warning without file:line and exit 0, and its fix (nvidia-smi's memory.total) was not
    docs/adopt.md's (total − reserved). Now an error at its line, nothing written, the fix the one adopt.md gives."""
    labelled = fleet(tmp_path, seat("s", MODELS / "Qwen--Qwen3-8B"), gpu="{index: 0, name: RTX PRO 6000 Blackwell, total_bytes: 96GB}")
    line = next(number for number, text in enumerate(labelled.read_text().splitlines(), start=1) if "96GB" in text)
    target = tmp_path / "plan.json"
    done = run_cli(capsys, monkeypatch, "plan", str(labelled), "-o", str(target))
    text = " ".join(done.stderr.split())
    assert done.exit_code == 2 and not target.exists(), done.stderr
    assert f"error: {labelled}:{line}: box:0: total_bytes 96GB is 89.41 GiB" in text and "reports 95.59 GiB" in text
    assert "memory.total − memory.reserved" in text and "docs/adopt.md" in text
    adopt_doc = (REPO_ROOT / "docs" / "adopt.md").read_text()
    assert "The total written is `memory.total − memory.reserved`" in adopt_doc  # the advice is the one adopt.md gives
    exact = fleet(tmp_path, seat("s", MODELS / "Qwen--Qwen3-8B"), gpu="{index: 0, name: RTX PRO 6000 Blackwell, total_bytes: 97887MiB}")
    assert run_cli(capsys, monkeypatch, "plan", str(exact), "--json").exit_code == 0


@pytest.mark.parametrize("seed", range(4))
def test_a_vllm_seat_without_a_port_is_refused_by_plan_naming_its_line(tmp_path: Path, seed: int, capsys, monkeypatch):
    """A port-less vLLM seat stops ``plan`` (exit 2, bad input) at its own line, every such seat named, nothing
    written; a fixed seat needs no port (seatplan neither starts nor reaches it)."""
    draw = random.Random(seed)
    count = draw.randint(2, 6)
    ports = draw.sample(range(1024, 65536), count)
    portless = sorted(draw.sample(range(count), draw.randint(1, count)))
    seats = "  - {name: speech, engine: fixed, memory_cap_bytes: 2GiB}\n" + "".join(
        seat(f"s{number}", draw.choice(PICKS), port=None if number in portless else ports[number], max_model_len=4096) for number in range(count))
    path = fleet(tmp_path, seats, gpus=count)
    lines = path.read_text().splitlines()
    seat_lines = [lines.index(f"  - name: s{number}") + 1 for number in portless]
    target = tmp_path / "plan.json"
    done = run_cli(capsys, monkeypatch, "plan", str(path), "-o", str(target))
    assert done.exit_code == 2, done.stdout + done.stderr
    text = " ".join(done.stderr.split())
    assert f"error: {path}:{seat_lines[0]}: seats[{portless[0] + 1}]: seat s{portless[0]} has no port" in text
    for number, line in zip(portless[1:], seat_lines[1:]):
        assert f"{path}:{line}: seats[{number + 1}]: seat s{number} has no port" in text
    free = min(port for port in range(8000, 65536) if port not in {ports[number] for number in range(count) if number not in portless})
    assert f"fix: add port: {free} to seat s{portless[0]}" in text
    assert not target.exists() and sorted(item.name for item in tmp_path.iterdir()) == ["fleet.yaml"]


def test_an_estimate_from_another_gpu_class_says_so(tmp_path: Path, capsys, monkeypatch):
    for name, warned in (("RTX PRO 6000 Blackwell", True), ("NVIDIA H100 80GB HBM3", False)):
        path = fleet(tmp_path, seat("s", MODELS / "Qwen--Qwen3-8B"), gpu=f"{{index: 0, name: {name}, total_bytes: 79GiB}}")
        warnings = json.loads(run_cli(capsys, monkeypatch, "plan", str(path), "--json").stdout)["warnings"]
        said = [warning for warning in warnings if "measured on H100" in warning]
        assert bool(said) == warned, warnings
        if warned:
            assert f"on {name} they are extrapolated" in said[0]


@pytest.mark.parametrize("seed", range(3))
def test_an_estimate_on_gpus_the_fleet_does_not_name_says_the_fleet_gives_none(tmp_path: Path, seed: int, capsys, monkeypatch):
    """issue 46: a GPU with no name (an adopted box whose nvidia-smi CSV had no name column) made the warning read
    "measured on H100; on  they are extrapolated". Each GPU without a name is named by its reference instead, and
    a named class is still named; a fleet of H100s alone warns of neither."""
    draw = random.Random(seed)
    kinds = [draw.choice(["", "RTX PRO 6000 Blackwell", "NVIDIA H100 80GB HBM3"]) for _ in range(draw.randint(2, 5))]
    gpus = "\n".join(f"      - {{index: {index}, {f'name: {name}, ' if name else ''}total_bytes: 95GiB}}" for index, name in enumerate(kinds))
    seats = "".join(seat(f"s{index}", MODELS / "Qwen--Qwen3-8B", port=8000 + index, pin=index, max_model_len=4096) for index in range(len(kinds)))
    path = tmp_path / "fleet.yaml"
    path.write_text(f"hosts:\n  - name: box\n    gpus:\n{gpus}\nseats:\n{seats}")
    warnings = json.loads(run_cli(capsys, monkeypatch, "plan", str(path), "--json").stdout)["warnings"]
    said = [warning for warning in warnings if "measured on H100" in warning]
    assert not any("on  " in warning for warning in said), said
    unnamed = [f"box:{index}" for index, name in enumerate(kinds) if not name]
    blackwell = "RTX PRO 6000 Blackwell" in kinds
    assert len(said) == bool(unnamed) + blackwell, (kinds, said)
    if unnamed:
        assert any(f"the fleet gives no GPU model for {', '.join(unnamed)} (hosts[].gpus[].name)" in warning for warning in said), said
    if blackwell:
        assert any("on RTX PRO 6000 Blackwell they are extrapolated" in warning for warning in said), said


@pytest.mark.parametrize("gpu_gib", [8, 24, 40])
def test_fit_exits_3_when_the_weights_alone_exceed_the_gpu(gpu_gib: int, capsys, monkeypatch):
    report = json.loads(run_cli(capsys, monkeypatch, "fit", str(QWEN_MOE), "--gpu-memory", f"{gpu_gib}GiB", "--json").stdout)
    weights = next(part["bytes"] for part in report["footprint_parts"] if part["name"] == "weights")
    done = run_cli(capsys, monkeypatch, "fit", str(QWEN_MOE), "--gpu-memory", f"{gpu_gib}GiB")
    assert weights > gpu_gib * 2**30 and done.exit_code == 3
    assert f"the weights alone ({weights / 2**30:.2f} GiB per GPU) exceed the {gpu_gib:.2f} GiB" in done.stderr and "--tp 2" in done.stderr
    roomy = run_cli(capsys, monkeypatch, "fit", str(QWEN_MOE), "--gpu-memory", "96GiB")
    assert roomy.exit_code == 0 and "does not fit" not in roomy.stderr


def test_a_fleet_that_does_not_fit_shows_its_footprints_and_levers(tmp_path: Path, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "100")
    path = fleet(tmp_path, seat("big", QWEN_MOE, max_model_len="published"), gpu="{index: 0, name: H100, total_bytes: 79.19GiB}")
    done = run_cli(capsys, monkeypatch, "plan", str(path))
    assert done.exit_code == 3
    out = " ".join(done.stdout.split())
    assert "Footprint per GPU of each seat" in out and "What would make room" in out
    for lever in ("max_num_seqs: 256 (from 1,024)", "kv_cache_dtype: fp8", "max_model_len: 131072", "tensor_parallel_size: 2"):
        assert lever in out
    # the fp8 lever's figure is what planning with fp8 KV takes off the footprint
    (tmp_path / "fp8").mkdir()
    fp8 = run_cli(capsys, monkeypatch, "plan", str(fleet(tmp_path / "fp8", seat("big", QWEN_MOE, max_model_len="published", kv_cache_dtype="fp8"),
                                                           gpu="{index: 0, name: H100, total_bytes: 79.19GiB}")), "--json")
    before = json.loads(run_cli(capsys, monkeypatch, "plan", str(path), "--json").stdout)["seats"][0]
    after = json.loads(fp8.stdout)["seats"][0]
    freed = (before["footprint_bytes"] - after["footprint_bytes"]) / 2**30
    assert f"{freed:.2f}~" in out


@pytest.mark.parametrize("umask", [0o022, 0o027, 0o077])
def test_written_files_follow_the_umask(tmp_path: Path, umask: int, capsys, monkeypatch):
    previous = os.umask(umask)
    try:
        plan = tmp_path / "plan.json"
        assert run_cli(capsys, monkeypatch, "plan", str(FLEET), "-o", str(plan), "--json").exit_code == 0
        rendered = tmp_path / "rollout"
        assert run_cli(capsys, monkeypatch, "render", str(plan), "-o", str(rendered), "--json").exit_code == 0
    finally:
        os.umask(previous)
    assert stat.S_IMODE(plan.stat().st_mode) == 0o666 & ~umask
    assert stat.S_IMODE(rendered.stat().st_mode) == 0o777 & ~umask
    for path in rendered.rglob("*"):
        expected = (0o777 if path.is_dir() or path.suffix == ".sh" else 0o666) & ~umask
        assert stat.S_IMODE(path.stat().st_mode) == expected, path


@pytest.mark.parametrize("seed", range(3))
def test_days_on_an_export_count_back_from_its_last_request_or_until(seed: int, capsys, monkeypatch):
    draw = random.Random(seed)
    days = round(draw.uniform(0.25, 6.5), 2)
    export = str(NIGHT / "spend-logs.csv")
    whole = json.loads(run_cli(capsys, monkeypatch, "usage", "--from", export, "--json").stdout)
    last = datetime.fromisoformat(whole["window"]["last_request_at"])
    counted = json.loads(run_cli(capsys, monkeypatch, "usage", "--from", export, "--days", str(days), "--json").stdout)
    until = datetime.fromisoformat(counted["window"]["until"])
    assert until == last + timedelta(microseconds=1)  # the last request is in the window
    assert datetime.fromisoformat(counted["window"]["since"]) == until - timedelta(days=days)
    assert counted["window"]["days_counted_back_from"].startswith("the export's last request")
    same = json.loads(run_cli(capsys, monkeypatch, "usage", "--from", export, "--since", counted["window"]["since"],
                              "--until", counted["window"]["until"], "--json").stdout)
    assert same["overall"]["calls"] == counted["overall"]["calls"] > 0
    end = (last - timedelta(hours=draw.randint(1, 48))).replace(microsecond=0)
    bounded = json.loads(run_cli(capsys, monkeypatch, "usage", "--from", export, "--days", str(days), "--until", end.isoformat(), "--json").stdout)
    assert datetime.fromisoformat(bounded["window"]["since"]) == end - timedelta(days=days)
    assert bounded["window"]["days_counted_back_from"] == f"--until {end.isoformat()}"
    monkeypatch.setenv("COLUMNS", "100")
    shown = " ".join(run_cli(capsys, monkeypatch, "usage", "--from", export, "--days", str(days)).stdout.split())
    assert f"{until - timedelta(days=days):%Y-%m-%d %H:%M:%S} .. {until:%Y-%m-%d %H:%M:%S} UTC, --days back from the export's last request" in shown
    assert "start .. end" not in shown
