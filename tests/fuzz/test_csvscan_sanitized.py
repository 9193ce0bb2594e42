"""The compiled CSV reader under AddressSanitizer + UndefinedBehaviorSanitizer, fuzzed by libFuzzer (clang).

csvscan_fuzz.c drives _csvscan.c the way csvscan.py does and checks every answer; any sanitizer report or failed
check is a crash. The corpus the run grows is then replayed through both readers: the compiled one must stop with
a reason or give DuckDB's report (targets.spend_csv). Bounded by ``SEATPLAN_FUZZ_SECONDS`` (default 20).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from kits import fuzz_targets as targets
from kits.parts import require
from kits.paths import FORMAT_FIXTURES, REPO_ROOT
from seatplan.usage.csvscan import slots_of
from seatplan.usage.queries import METADATA_KEYS

HERE = Path(__file__).parent
SECONDS = int(os.environ.get("SEATPLAN_FUZZ_SECONDS", "20"))
REPLAYED = 60  # corpus inputs read by both readers afterwards (DuckDB takes ~0.1 s a file)


def clang() -> str:
    found = shutil.which("clang") or next((shutil.which(f"clang-{v}") for v in range(30, 10, -1) if shutil.which(f"clang-{v}")), None)
    require(found is not None, "clang with libFuzzer (Debian: clang libclang-rt-dev)")
    return found  # type: ignore[return-value]


@pytest.fixture(scope="module")
def fuzzer(tmp_path_factory: pytest.TempPathFactory) -> Path:
    binary = tmp_path_factory.mktemp("csvscan-asan") / "csvscan_fuzz"
    build = subprocess.run([clang(), "-g", "-O1", "-std=c99", "-fsanitize=fuzzer,address,undefined", "-fno-sanitize-recover=all",
                            "-Wall", "-Wextra", str(HERE / "csvscan_fuzz.c"), "-o", str(binary)],
                           capture_output=True, text=True, cwd=REPO_ROOT)
    require(build.returncode == 0 or "cannot find" not in build.stderr, f"libFuzzer's runtime for clang ({build.stderr[-300:]})")
    assert build.returncode == 0, build.stderr
    return binary


def header_columns() -> list[str]:
    return targets.SPEND_CSV_HEADER.strip().split(",")


@pytest.mark.fuzz
@pytest.mark.timeout(SECONDS * 4 + REPLAYED * 10 + 120)
def test_csvscan_under_sanitizers_stops_with_a_reason_or_agrees_with_duckdb(fuzzer: Path, tmp_path: Path) -> None:
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    body = FORMAT_FIXTURES.joinpath("litellm_spend_logs.csv").read_bytes().split(b"\n", 1)[1]
    lines = body.split(b"\n")
    for number in range(8):
        (corpus / f"seed-{number}").write_bytes(bytes([number * 37 % 256]) + b"\n".join(lines[number * 3: number * 3 + 3]) + b"\n")
    for kept in sorted((HERE / "corpus" / "spend_csv").glob("*")):
        (corpus / f"kept-{kept.name}").write_bytes(b"\x07" + kept.read_bytes())
    environment = {**os.environ, "CSVSCAN_SLOTS": ",".join(map(str, slots_of(header_columns()))),
                   "CSVSCAN_KEYS": ",".join(METADATA_KEYS), "ASAN_OPTIONS": "detect_leaks=1:abort_on_error=1",
                   "UBSAN_OPTIONS": "print_stacktrace=1:halt_on_error=1"}
    # A fixed seed and run count: every machine tries a prefix of the same inputs (see test_fuzz_atheris.py).
    run = subprocess.run([str(fuzzer), f"-max_total_time={SECONDS}", "-seed=1", "-runs=1000000", "-rss_limit_mb=2048", "-max_len=4096", "-timeout=10",
                          f"-artifact_prefix={tmp_path}/", "-print_final_stats=1", str(corpus)],
                         capture_output=True, text=True, env=environment, timeout=SECONDS * 4 + 60)
    crashes = sorted(path.name for path in tmp_path.glob("crash-*")) + sorted(path.name for path in tmp_path.glob("timeout-*"))
    assert run.returncode == 0 and not crashes, f"{crashes}\n{run.stderr[-4000:]}"
    runs = re.search(r"Done (\d+) runs", run.stderr)
    assert runs, run.stderr[-2000:]
    targets.TALLY[("libFuzzer csvscan (ASan+UBSan)", "runs")] += int(runs.group(1))
    grown = sorted(corpus.iterdir(), key=lambda path: (path.stat().st_size, path.name))
    step = max(1, len(grown) // REPLAYED)
    for path in grown[::step][:REPLAYED]:
        targets.spend_csv(path.read_bytes()[1:])  # raises on a disagreement with DuckDB or a traceback
