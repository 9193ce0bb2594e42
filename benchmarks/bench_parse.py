"""engine.parse on commands of many flags: in process, 100,000 ``--fN v`` flags through ``read_vllm_args``; and
``seatplan adopt --env-dir`` on an env file of 50,000 flags (700 KB, under adopt's 1 MiB cap) as a child process.

Issue 48: the reader scanned every flag seen for each new one (2k/4k/8k flags: 1.1/4.2/16.4 s in process);
linear now. Targets: 100,000 flags under 2 s of CPU in process, the 50,000-flag adopt under 10 s wall.

    .venv/bin/python benchmarks/bench_parse.py [--flags 100000] [--adopt-flags 50000]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from seatplan.engine.parse import read_vllm_args

TARGET_PARSE_S = 2.0
TARGET_ADOPT_S = 10.0


def flags(count: int) -> list[str]:
    return [word for index in range(count) for word in (f"--f{index}", "v")]


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--flags", type=int, default=100_000)
    parser.add_argument("--adopt-flags", type=int, default=50_000)
    options = parser.parse_args()
    rows = []
    for count in (2_000, 8_000, options.flags):
        words = ["/models/m", *flags(count)]
        start = time.process_time()
        read = read_vllm_args(words)
        spent = time.process_time() - start
        assert len(read.flags) == count
        rows.append((f"read_vllm_args, {count:,} flags (CPU)", spent, TARGET_PARSE_S if count == options.flags else None))
    with tempfile.TemporaryDirectory() as folder:
        env_dir = Path(folder) / "env"
        env_dir.mkdir()
        line = " ".join(["vllm", "serve", "/models/m", *flags(options.adopt_flags)])
        (env_dir / "big.env").write_text(f'VLLM_CMD="{line}"\nCUDA_VISIBLE_DEVICES=0\n')
        size = (env_dir / "big.env").stat().st_size
        start = time.perf_counter()
        done = subprocess.run([sys.executable, "-m", "seatplan.cli", "adopt", "--env-dir", str(env_dir), "-o",
                               str(Path(folder) / "fleet.yaml")], capture_output=True, text=True, env={**os.environ, "COLUMNS": "200"})
        wall = time.perf_counter() - start
        rows.append((f"seatplan adopt --env-dir, {options.adopt_flags:,} flags, {size / 1000:.0f} KB (wall, exit {done.returncode})",
                     wall, TARGET_ADOPT_S))
    print("| what | target | measured |\n|---|---|---|")
    missed = False
    for what, seconds, target in rows:
        print(f"| {what} | {'< ' + format(target, 'g') + ' s' if target else '–'} | {seconds:.3f} s |")
        missed |= target is not None and seconds > target
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
