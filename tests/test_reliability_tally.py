"""scripts/test.sh's last lines: the whole run's reliability figures, summed from the two parts' carry files
(tests/kits/tally.py), a figure of 0 kept, and written to SEATPLAN_RELIABILITY_JSON."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from collections import Counter
from pathlib import Path

import kits.tally

TALLY_SCRIPT = Path(kits.tally.__file__)


def test_the_two_parts_figures_are_summed_with_every_zero_kept(tmp_path: Path, rng: random.Random):
    readers = ["spend-log CSV", "vLLM log", "fleet YAML", "Beszel database"]
    parts = [Counter({(reader, outcome): rng.randrange(0, 3000) for reader in rng.sample(readers, rng.randint(1, 4))
                      for outcome in rng.sample(["accepted", "refused", "crashed"], rng.randint(1, 3))}) for _ in range(2)]
    parts[rng.randrange(2)][("secrets scan", "secrets found")] = 0
    files = [tmp_path / "first.tally", tmp_path / "second.tally"]
    for part, path in zip(parts, files, strict=True):
        kits.tally.write(path, part)
    kept = tmp_path / "reliability.json"
    done = subprocess.run([sys.executable, str(TALLY_SCRIPT), *map(str, files)], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "SEATPLAN_RELIABILITY_JSON": str(kept)})
    assert done.returncode == 0, done.stderr
    whole: Counter[tuple[str, str]] = Counter()
    for part in parts:
        whole.update(part)
    expected = {reader: {outcome: count for (name, outcome), count in sorted(whole.items()) if name == reader}
                for reader in sorted({reader for reader, _ in whole})}
    assert json.loads(kept.read_text()) == expected
    assert "secrets scan                             secrets found 0" in done.stdout.splitlines()
    for reader, outcomes in expected.items():
        assert f"{reader:40} " + ", ".join(f"{outcome} {count:,}" for outcome, count in outcomes.items()) in done.stdout.splitlines()


def test_a_part_that_tallied_nothing_adds_nothing(tmp_path: Path):
    first, empty = tmp_path / "first.tally", tmp_path / "second.tally"
    kits.tally.write(first, Counter({("vLLM log", "accepted"): 7}))
    empty.write_text("")
    assert kits.tally.read(empty) == Counter()
    done = subprocess.run([sys.executable, str(TALLY_SCRIPT), str(first), str(empty)], capture_output=True, text=True, timeout=60,
                          env={key: value for key, value in os.environ.items() if key != "SEATPLAN_RELIABILITY_JSON"})
    assert done.returncode == 0 and f"{'vLLM log':40} accepted 7" in done.stdout.splitlines(), done.stdout + done.stderr
