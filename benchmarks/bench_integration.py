"""Benchmark the live vLLM CPU test's moving parts: tiny-model builds and engine boots.

    .venv/bin/python benchmarks/bench_integration.py [--plans qwen3-dense-bf16,...|all] [--cold-build]

Times, on this machine: building one tiny model from scratch (``--cold-build``, into a temporary cache)
and from the cache; then, for each chosen boot plan, one full engine boot as the live test does it
(start, ``/health``, ``/metrics``, ``/v1/models``, ``/version``, probe request, stop), split into
"to /health" and the rest. The live suite boots every plan once, so its wall time is about the
sum of the boot column over ``--plans all`` plus seatplan's own checks. Target: the whole
integration suite under 12 minutes on 2 cores. Prints the figures and a markdown table.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))

from kits.boot_matrix import BOOT_PLANS  # noqa: E402
from kits.tiny_models import QWEN3_DENSE, tiny_model_dir  # noqa: E402
from kits.vllm_engine import boot_engine, vllm_installed, vllm_python, vllm_venv  # noqa: E402


def timed(action):
    started = time.perf_counter()
    value = action()
    return value, time.perf_counter() - started


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--plans", default="qwen3-dense-bf16", help="comma-separated plan names, or 'all'")
    parser.add_argument("--cold-build", action="store_true", help="also time a tiny-model build without cache")
    options = parser.parse_args()
    if not vllm_installed():
        raise SystemExit(f"no vLLM in {vllm_venv()}; run scripts/install-test-deps.sh")
    python = vllm_python()
    chosen = BOOT_PLANS if options.plans == "all" else [p for p in BOOT_PLANS if p.name in options.plans.split(",")]
    if not chosen:
        raise SystemExit(f"no plan named {options.plans}; known: {', '.join(p.name for p in BOOT_PLANS)}")

    rows: list[tuple[str, float, str]] = []
    if options.cold_build:
        with tempfile.TemporaryDirectory() as cold_cache:
            _, seconds = timed(lambda: tiny_model_dir(QWEN3_DENSE, python, Path(cold_cache)))
        rows.append(("tiny model build, cold (qwen3-dense)", seconds, ""))
    _, seconds = timed(lambda: tiny_model_dir(QWEN3_DENSE, python))
    rows.append(("tiny model build, cached (qwen3-dense)", seconds, ""))

    total_boot_s = 0.0
    with tempfile.TemporaryDirectory() as log_dir:
        for plan in chosen:
            model_dir = tiny_model_dir(plan.model, python)
            result, seconds = timed(lambda plan=plan, model_dir=model_dir: boot_engine(python, plan.engine_config(model_dir), Path(log_dir)))
            total_boot_s += seconds
            labels = result.cache_config_labels
            rows.append((f"boot {plan.name}", seconds,
                         f"to /health {result.boot_seconds:.1f} s; num_gpu_blocks {labels['num_gpu_blocks']}"))
    rows.append((f"all {len(chosen)} boots", total_boot_s, ""))

    for name, seconds, note in rows:
        print(f"{name}: {seconds:.1f} s {note}".rstrip())
    print()
    print("| step | seconds | note |")
    print("|---|---:|---|")
    for name, seconds, note in rows:
        print(f"| {name} | {seconds:.1f} | {note} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
