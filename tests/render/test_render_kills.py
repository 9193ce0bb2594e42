"""A crash at any point leaves the target as it was or as the new write, never half-written.

`seatplan render` (a subprocess), `seatplan rollback` and a loop of `seatplan.fileio.atomic_write_text` are sent SIGKILL after a random
delay, many times; after each kill the target must be byte for byte the old or the new content. The number of
kills is ``SEATPLAN_KILLS`` (default 25 each), the random seed ``SEATPLAN_KILL_SEED``; the figures
(docs/reliability.md) are printed and, with ``SEATPLAN_RELIABILITY_JSON``, kept with the other reliability figures.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from kits.fuzz_targets import TALLY
from kits.parts import free_port, require
from kits.render import QWEN3_8B
from kits.rollout import ansible_installed, apply_args, build_plan_file, cpu_fleet, fake_launcher, localhost_inventory, render_args, run_seatplan, stop_engines
from seatplan.render import writer

pytestmark = pytest.mark.slow

KILLS = int(os.environ.get("SEATPLAN_KILLS", "25"))
SEED = int(os.environ.get("SEATPLAN_KILL_SEED", str(int(time.time()))))
WRITE_BYTES = 4 << 20  # large enough that a kill often lands inside the write


def tree(directory: Path) -> dict[str, bytes]:
    return {path.relative_to(directory).as_posix(): path.read_bytes() for path in sorted(directory.rglob("*")) if path.is_file()}


def render_command(plan: Path, directory: Path) -> list[str]:
    return [sys.executable, "-m", "seatplan.cli", "render", str(plan), "-o", str(directory), "--json"]


def killed_after(command: list[str], delay_s: float) -> bool:
    """Run ``command``, SIGKILL it (its whole process group) after ``delay_s``; True if it was still running then."""
    return run_or_kill(command, delay_s, check=False) is None


def run_or_kill(command: list[str], delay_s: float, *, check: bool = True) -> float | None:
    """Run ``command`` and SIGKILL it (its whole process group) after ``delay_s``: None if it was still running then,
    else how long it took (it ended before its kill, and must have succeeded: a quick failure is no run to time)."""
    started = time.monotonic()
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        process.wait(timeout=delay_s)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
        return None
    if check and process.returncode != 0:
        raise subprocess.CalledProcessError(process.returncode, command)
    return time.monotonic() - started


def timed(command: list[str]) -> float:
    started = time.monotonic()
    subprocess.run(command, check=True, capture_output=True)
    return time.monotonic() - started


@pytest.fixture
def two_plans(demo_plan_path, tmp_path) -> tuple[Path, Path]:
    """The demo plan and a copy with one seat moved to another port (its env file, vars, LiteLLM and rules change)."""
    first = tmp_path / "a.json"
    first.write_bytes(demo_plan_path.read_bytes())
    document = json.loads(first.read_text())
    vllm_seat = next(seat for seat in document["seats"] if seat["engine"] == "vllm")
    vllm_seat["port"] += 1000
    vllm_seat["launch"]["port"] += 1000
    second = tmp_path / "b.json"
    second.write_text(json.dumps(document, indent=2) + "\n")
    return first, second


def test_render_killed_at_random_points_leaves_the_old_or_the_new_render(two_plans, tmp_path):
    plans = dict(zip("ab", two_plans))
    references = {}
    for name, plan in plans.items():
        subprocess.run(render_command(plan, tmp_path / f"reference-{name}"), check=True, capture_output=True)
        references[name] = tree(tmp_path / f"reference-{name}")
    assert references["a"] != references["b"]
    target = tmp_path / "site" / "rendered"
    # The quickest of three warm runs: on a loaded machine one timing can be several times the next run's.
    duration_s = min(timed(render_command(plans[name], target)) for name in "aba")
    holds, rng = "a", random.Random(SEED)
    killed = mid_write = 0
    for _ in range(KILLS):
        other = "b" if holds == "a" else "a"
        staging_before = set(target.parent.glob(".rendered.*.render"))
        # a render spends most of its time importing; the delays reach from there to its end, and a render that
        # finished before its kill says the machine got quicker, so later delays shrink with it
        landed = killed_after(render_command(plans[other], target), rng.uniform(0.3, 1.0) * duration_s)
        killed += landed
        duration_s *= 1.0 if landed else 0.85
        mid_write += len(set(target.parent.glob(".rendered.*.render")) - staging_before)
        now = tree(target)
        assert now in (references[holds], references[other]), f"half-written render (seed {SEED})"
        holds = other if now == references[other] else holds
    TALLY[("kills during render", "killed while running")] += killed
    TALLY[("kills during render", "killed while writing")] += mid_write
    TALLY[("kills during render", "target half-written")] += 0
    print(f"render: {killed} of {KILLS} kills landed while it ran, {mid_write} while it wrote (seed {SEED})")
    assert killed > KILLS // 3  # the delays must mostly hit a running render, or the test proves nothing


def test_atomic_write_killed_at_random_points_leaves_the_old_or_the_new_file(tmp_path):
    target = tmp_path / "document.json"
    contents = [bytes([ord("a") + index]) * WRITE_BYTES for index in range(2)]
    target.write_bytes(contents[0])
    writer_loop = textwrap.dedent(f"""
        import sys
        from seatplan.fileio import atomic_write_text
        texts = ["a" * {WRITE_BYTES}, "b" * {WRITE_BYTES}]
        index = 0
        while True:
            index += 1
            atomic_write_text(sys.argv[1], texts[index % 2], backup=False)
        """)
    rng = random.Random(SEED)
    killed = 0
    for _ in range(KILLS):
        killed += killed_after([sys.executable, "-c", writer_loop, str(target)], rng.uniform(0.2, 0.6))
        assert target.read_bytes() in contents, f"half-written file (seed {SEED})"
    leftovers = list(tmp_path.glob(".document.json.*.tmp"))
    TALLY[("kills during atomic_write_text", "killed while running")] += killed
    TALLY[("kills during atomic_write_text", "temporary files left beside")] += len(leftovers)
    print(f"atomic_write_text: {killed} of {KILLS} kills survived; {len(leftovers)} temporary files left beside (seed {SEED})")
    assert killed == KILLS


def test_without_an_atomic_exchange_the_swap_still_keeps_a_whole_directory(tmp_path, monkeypatch):
    """Where renameat2 is missing, DIR is renamed aside and the new one renamed in (and put back on failure)."""
    monkeypatch.setattr(writer, "exchange_paths", lambda first, second: False)
    directory, staging = tmp_path / "rendered", tmp_path / "staging"
    for path, text in ((directory, "old"), (staging, "new")):
        path.mkdir()
        (path / "file").write_text(text)
    backup = writer.swap_in(staging, directory)
    assert (directory / "file").read_text() == "new" and backup is not None and (backup / "file").read_text() == "old"
    assert not staging.exists()


def test_two_renders_in_one_second_keep_both_backups(tmp_path):
    directory = tmp_path / "rendered"
    backups = []
    for text in ("one", "two", "three"):
        staging = tmp_path / f"staging-{text}"
        staging.mkdir()
        (staging / "file").write_text(text)
        backups.append(writer.swap_in(staging, directory))
    assert backups[0] is None and backups[1] != backups[2]
    assert sorted((backup / "file").read_text() for backup in backups[1:]) == ["one", "two"]


ROLLBACK_KILLS = max(3, KILLS // 5)  # each one is a whole ansible-playbook run


@pytest.mark.ansible
def test_rollback_killed_at_random_points_leaves_each_env_file_old_or_new(tmp_path, capsys, monkeypatch):
    """Rollback puts a backup its release record names back (bin/seatplan-release.py on the host: a copy beside the
    file renamed over it); killed (with its ansible-playbook) at
    random points, the host's env file is whole: the rolled-out one or the backup. Engines are not restarted
    (the restart command only hands back the PID record): the stand-ins started by the first apply keep answering /health."""
    require(ansible_installed(), "ansible-playbook (pip install ansible-core)")
    seats = {name: (QWEN3_8B, free_port()) for name in ("alpha", "beta")}
    plan = build_plan_file(cpu_fleet(tmp_path, seats, kv="256MiB", total="64GiB"), tmp_path / "plan.json")
    changed = build_plan_file(cpu_fleet(tmp_path, seats, kv="256MiB", total="64GiB", caps={"beta": 32}, name="fleet2.yaml"), tmp_path / "plan2.json")
    env_file = tmp_path / "host" / "env" / "beta.env"
    try:
        assert run_seatplan(capsys, monkeypatch, *render_args(tmp_path, plan, fake_launcher()))[0] == 0
        assert run_seatplan(capsys, monkeypatch, *apply_args(tmp_path, plan, "first"))[0] == 0
        old = env_file.read_bytes()
        # a "restart" that keeps the running engine: it hands back the PID record apply set aside for the new one
        keep = tmp_path / "keep.sh"
        keep.write_text(f'#!/bin/sh\nfor f in {tmp_path}/host/run/*.pid.before; do [ -e "$f" ] && mv -f "$f" "${{f%.before}}"; done; exit 0\n')
        keep.chmod(0o755)
        # rollback runs the commands the release record kept: the apply's, so the apply is given the keeping one for both
        no_restart = ("-e", f"seatplan_restart_command={keep}", "-e", f"seatplan_stop_command={keep}")
        code, out, err = run_seatplan(capsys, monkeypatch, *apply_args(tmp_path, changed, "two", *no_restart, "--fleet", str(tmp_path / "fleet2.yaml")))
        assert code == 0, out + err
        new = env_file.read_bytes()
        rollback = [sys.executable, "-m", "seatplan.cli", "rollback", str(tmp_path / "rendered"), "--before", "two", "--inventory",
                    str(localhost_inventory(tmp_path)), "-e", "seatplan_run_verify=false", *no_restart]
        duration_s = timed(rollback)
        assert env_file.read_bytes() == old
        rng, killed = random.Random(SEED), 0
        for _ in range(ROLLBACK_KILLS):
            env_file.write_bytes(new)  # as the rollout left it, and its release not yet undone
            for undone in (tmp_path / "host" / "releases" / "undone").glob("*.json"):
                undone.replace(tmp_path / "host" / "releases" / undone.name)
            ended_s = run_or_kill(rollback, rng.uniform(0.3, 1.0) * duration_s)
            killed += ended_s is None
            # a rollback that ended before its kill says the machine got quicker (the first one timed may have shared
            # the CPUs with other tests' work): later delays are drawn within the run just seen
            duration_s = duration_s if ended_s is None else ended_s
            assert env_file.read_bytes() in (old, new), f"half-written env file (seed {SEED})"
        TALLY[("kills during rollback", "killed while running")] += killed
        print(f"rollback: {killed} of {ROLLBACK_KILLS} kills landed while it ran (seed {SEED})")
        assert killed >= ROLLBACK_KILLS // 2
    finally:
        stop_engines(tmp_path)
