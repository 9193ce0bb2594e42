"""``seatplan adopt --gpus-from-host`` runs nvidia-smi here and reads what it prints.

No nvidia-smi exists on the development machine and no GPU is lent to these tests, so the nvidia-smi run is a
STAND-IN: an executable ``nvidia-smi`` put first on PATH that records its arguments and prints a CSV in the
format nvidia-smi prints for this query (header ``index, name, uuid, memory.total [MiB], …``, fields
separated by ", ", values with " MiB", ``[N/A]`` where it cannot tell: tests/fixtures/formats/FORMATS.md 3.2;
examples/adopt/speech/nvidia-smi.csv is one such output). What is checked is adopt's side: the query it runs
(the one docs/adopt.md names), that random GPU lists come back exactly as from ``--nvidia-smi CSV`` with the same
text, and that each way nvidia-smi fails (missing, a non-zero exit, garbage, a hang) ends in error:/fix:, exit 2,
nothing written.
"""

from __future__ import annotations

import os
import random
import re
import stat
from pathlib import Path

import pytest
import yaml

from kits.cli import run_cli
from kits.paths import REPO_ROOT

QUERY = ["--query-gpu=index,name,uuid,memory.total,memory.reserved,memory.used", "--format=csv"]  # as docs/adopt.md names it
GPUS = (("NVIDIA H100 80GB HBM3", 81559), ("NVIDIA H200", 143771), ("NVIDIA A100-SXM4-40GB", 40960),
        ("NVIDIA GeForce RTX 4090", 24564), ("NVIDIA RTX 6000 Ada Generation", 49140), ("NVIDIA L4", 23034))
SAMPLE = REPO_ROOT / "examples" / "adopt" / "speech" / "nvidia-smi.csv"
# what nvidia-smi prints when it cannot reach the driver
DRIVER_DOWN = ("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make sure that the latest NVIDIA "
               "driver is installed and running.")


def smi_output(rng: random.Random) -> str:
    """One reading of 1-8 GPUs, as ``nvidia-smi --query-gpu=... --format=csv`` prints it."""
    lines = ["index, name, uuid, memory.total [MiB], memory.reserved [MiB], memory.used [MiB]"]
    name, total = rng.choice(GPUS)
    for index in range(rng.randint(1, 8)):
        uuid = f"GPU-{rng.getrandbits(32):08x}-{rng.getrandbits(16):04x}-{rng.getrandbits(16):04x}-{rng.getrandbits(16):04x}-{rng.getrandbits(48):012x}"
        used = "[N/A]" if rng.random() < 0.1 else f"{rng.randint(0, total - 600)} MiB"
        lines.append(f"{index}, {name}, {uuid}, {total} MiB, {rng.choice((551, 551, 527, 0))} MiB, {used}")
    return "\n".join(lines) + "\n"


def stand_in(directory: Path, script: str) -> Path:
    """An executable ``nvidia-smi`` (the stand-in) in its own PATH directory; it writes its arguments to args.txt."""
    bin_dir = directory / "bin"
    bin_dir.mkdir(exist_ok=True)
    program = bin_dir / "nvidia-smi"
    program.write_text(f"#!/bin/sh\nprintf '%s\\n' \"$@\" > '{directory / 'args.txt'}'\n{script}\n")
    program.chmod(program.stat().st_mode | stat.S_IXUSR)
    return bin_dir


@pytest.fixture
def compose(tmp_path: Path) -> Path:
    path = tmp_path / "compose.yaml"
    path.write_text(yaml.safe_dump({"services": {"engine": {
        "image": "vllm/vllm-openai:v0.32.0", "command": ["--model", "m", "--served-model-name", "engine"], "ports": ["8001:8000"],
        "deploy": {"resources": {"reservations": {"devices": [{"capabilities": ["gpu"], "device_ids": ["0"]}]}}}}}}))
    return path


@pytest.mark.parametrize("source", ["random", "sample"])
def test_gpus_from_host_read_as_the_same_csv_given_with_nvidia_smi(source, rng, tmp_path, compose, capsys, monkeypatch):
    text = smi_output(rng) if source == "random" else SAMPLE.read_text()
    (tmp_path / "smi.csv").write_text(text)
    bin_dir = stand_in(tmp_path, f"cat '{tmp_path / 'smi.csv'}'")
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    from_host = run_cli(capsys, monkeypatch, "adopt", "--compose", str(compose), "--gpus-from-host", "-o", str(tmp_path / "host.yaml"), "--json")
    assert from_host.exit_code == 0, from_host.stderr
    assert (tmp_path / "args.txt").read_text().splitlines() == QUERY
    from_file = run_cli(capsys, monkeypatch, "adopt", "--compose", str(compose), "--nvidia-smi", str(tmp_path / "smi.csv"),
                        "-o", str(tmp_path / "file.yaml"), "--json")
    assert from_file.exit_code == 0, from_file.stderr
    host, file = (yaml.safe_load((tmp_path / name).read_text()) for name in ("host.yaml", "file.yaml"))
    assert host == file  # the values; only the comments differ (where they came from)
    gpus = host["hosts"][0]["gpus"]
    rows = [row.split(", ") for row in text.splitlines()[1:]]
    assert [(gpu["index"], gpu["name"], gpu["total_bytes"]) for gpu in gpus] == [
        (int(row[0]), row[1], (int(row[3].split()[0]) - int(row[4].split()[0])) * 2**20) for row in rows]
    assert "nvidia-smi on this host" in (tmp_path / "host.yaml").read_text()


FAILURES = {
    "not on PATH": (None, "cannot run nvidia-smi", "on PATH"),
    "driver down": (f'echo "{DRIVER_DOWN}"; exit 9', "exited with status 9: NVIDIA-SMI has failed", "check the NVIDIA driver"),
    "silent failure": ("exit 6", "exited with status 6: no message", "check the NVIDIA driver"),
    "garbage": ("head -c 3000 /dev/urandom | tr -d '\\000'", "nvidia-smi", "--query-gpu="),
    "not UTF-8": ("printf 'index, name\\n\\377\\376\\n'", "nvidia-smi", "--query-gpu="),
    "another query": ("echo 'timestamp, index, memory.used [MiB]'; echo '2026/11/27 09:58:00.211, 0, 1 MiB'", "lacks", "--query-gpu="),
    "no GPU": ("echo 'No devices were found'", "nvidia-smi", "--query-gpu="),
    "hangs": ("exec sleep 600", "did not answer within 1 s", "--timeout"),
}


@pytest.mark.parametrize("case", sorted(FAILURES))
def test_each_way_nvidia_smi_fails_is_an_error_with_the_fix(case, tmp_path, compose, capsys, monkeypatch):
    script, said, fix = FAILURES[case]
    empty = tmp_path / "empty"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty) if script is None else f"{stand_in(tmp_path, script)}{os.pathsep}{os.environ['PATH']}")
    out = tmp_path / "fleet.yaml"
    done = run_cli(capsys, monkeypatch, "adopt", "--compose", str(compose), "--gpus-from-host", "--timeout", "1", "-o", str(out))
    assert done.exit_code == 2, done.stdout + done.stderr
    error = re.search(r"^error: (.*)$", done.stderr, re.M)
    fix_line = re.search(r"^fix: (.*)$", done.stderr, re.M)
    assert error and fix_line, done.stderr
    assert said in error[1] and fix in fix_line[1] and "--nvidia-smi" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr and not out.exists()
