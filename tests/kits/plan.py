"""Helpers for the plan-stage tests: small fleets written to a temporary directory, and the CLI run in-process."""

from __future__ import annotations

import random
import textwrap
from functools import cache
from pathlib import Path

from kits.paths import MODEL_FIXTURES as MODELS

LLAMA_8B = MODELS / "meta-llama--Llama-3.1-8B-Instruct"
QWEN3_8B = MODELS / "Qwen--Qwen3-8B"
PHI_35 = MODELS / "microsoft--Phi-3.5-mini-instruct"
GiB = 1 << 30
MiB = 1 << 20


def write_fleet(directory: Path, text: str, name: str = "fleet.yaml") -> Path:
    path = directory / name
    path.write_text(textwrap.dedent(text).lstrip("\n"), encoding="utf-8")
    return path


def one_host(gpus: int = 2, total: str = "80GiB", keep_clear: tuple[int, ...] = ()) -> str:
    lines = ["hosts:", "  - name: box", "    gpus:"]
    for index in range(gpus):
        clear = ", keep_clear: true" if index in keep_clear else ""
        lines.append(f"      - {{index: {index}, name: H100, total_bytes: {total}{clear}}}")
    return "\n".join(lines) + "\n"




# ----------------------------------------------------------------------------- random fleets (issue 32)

RANDOM_MODELS = ("Qwen--Qwen3-0.6B", "Qwen--Qwen3-4B", "Qwen--Qwen3-8B", "Qwen--Qwen3-14B", "Qwen--Qwen3-30B-A3B", "Qwen--Qwen3-32B-FP8",
                 "meta-llama--Llama-3.1-8B-Instruct", "meta-llama--Llama-3.2-3B-Instruct", "microsoft--Phi-3.5-mini-instruct",
                 "THUDM--glm-4-9b", "google--gemma-3-27b-it", "Qwen--Qwen2.5-7B-Instruct", "openai--gpt-oss-20b", "mistralai--Mistral-7B-v0.1")
# CUDA's totals of common cards (nvidia-smi memory.total − reserved, rounded to the MiB): 24, 48, 80, 96 and 141 GB
RANDOM_GPU_TOTALS = ("23.64GiB", "44.39GiB", "79.19GiB", "95.59GiB", "139.8GiB")


@cache
def random_model_facts(model: str, tensor_parallel_size: int = 1, kv_cache_dtype: str = "auto"):  # -> ModelFacts
    """The facts stage's figures for ``model`` (the derived length, YaRN, the smallest KV a length boots with)."""
    from seatplan.facts.api import load_model_facts  # noqa: PLC0415 (at call time: the seatplan under test)
    from seatplan.facts.models import EngineSettings  # noqa: PLC0415

    return load_model_facts(str(MODELS / model), EngineSettings(tensor_parallel_size=tensor_parallel_size, kv_cache_dtype=kv_cache_dtype))


def random_seat_lines(draw: random.Random, number: int, gpus_per_host: int) -> tuple[str, list[str]]:
    """One seat of a random fleet: a fixed seat, or a vLLM seat with a random model, context, pin, factor, dtype,
    TP, cap and YaRN; its YAML lines and its name. A pin is drawn at 1 to 6 times the smallest KV its length boots
    with, so the fleet is one an operator could write (a pin too small is refused, tests/core/test_failures.py)."""
    if draw.random() < 0.15:
        name = f"fixed-{number}"
        return name, [f"  - {{name: {name}, engine: fixed, memory_cap_bytes: {draw.choice(['2GiB', '6GiB', '13GiB', '512MiB'])}}}"]
    model = draw.choice(RANDOM_MODELS)
    tp = 2 if gpus_per_host >= 2 and draw.random() < 0.15 else 1
    dtype = "fp8" if draw.random() < 0.2 else "auto"
    facts = random_model_facts(model, tp, dtype)
    derived, yarn = facts.max_context_derived, facts.yarn is not None and not facts.yarn.enabled
    name = f"{model.split('--')[1].lower()}-{number}"
    lines = [f"  - name: {name}", f"    model: {MODELS / model}", f"    port: {8000 + number}"]
    context, length = draw.random(), derived
    if yarn and draw.random() < 0.25:
        lines.append("    allow_yarn: true")
        length = draw.randint(derived + 1, facts.yarn.extended_max_model_len)
        lines.append(f"    max_model_len: {length}")
    elif context < 0.3:
        lines.append("    max_model_len: published")
    elif context < 0.85:
        length = draw.randint(256, derived)
        lines.append(f"    max_model_len: {length}")
    if draw.random() < 0.3 and "allow_yarn: true" not in lines[-2:]:
        least = facts.min_kv_cache_bytes(length)
        lines.append(f"    kv_cache_memory_bytes: {-(-int(least * draw.uniform(1.0, 6.0)) // (256 * MiB)) * 256}MiB")
    if draw.random() < 0.25:
        lines.append(f"    kv_factor: {round(draw.uniform(1.0, 3.0), 2)}")
    if dtype == "fp8":
        lines.append("    kv_cache_dtype: fp8")
    if tp == 2:
        lines.append("    tensor_parallel_size: 2")
    if draw.random() < 0.3:
        lines.append(f"    max_new_tokens: {draw.choice([1024, 4096, 8192, 32768])}")
    return name, lines


def random_fleet(draw: random.Random, directory: Path, *, current: bool = True) -> Path:
    """A fleet drawn over what users write: 1-2 hosts of 1-5 GPUs of common sizes (reserved memory, a GPU kept
    clear), a random policy (factor, step, headroom, move cost), 1-9 seats of the fixture models with random
    contexts, pins, factors, fp8 KV, TP 2, caps and YaRN, and a random current_layout."""
    hosts = draw.randint(1, 2)
    gpus_per_host = draw.randint(1, 5)
    lines = ["hosts:"]
    refs = []
    for host in range(hosts):
        lines += [f"  - name: h{host}", "    gpus:"]
        total = draw.choice(RANDOM_GPU_TOTALS)
        for index in range(gpus_per_host):
            extra = f", reserved_bytes: {draw.randint(1, 2048)}MiB" if draw.random() < 0.2 else ""
            clear = index == gpus_per_host - 1 and gpus_per_host > 2 and draw.random() < 0.3
            lines.append(f"      - {{index: {index}, name: GPU, total_bytes: {total}{extra}{', keep_clear: true' if clear else ''}}}")
            refs += [] if clear else [f"h{host}:{index}"]
    lines += ["policy:", f"  kv_factor: {round(draw.uniform(1.0, 2.0), 2)}",
              f"  rounding_step_bytes: {draw.choice(['0', '256MiB', '512MiB', '1GiB'])}",
              f"  headroom_bytes: {draw.choice(['0', '512MiB', '1GiB', '2GiB'])}",
              f"  move_cost_bytes: {draw.choice(['0', '256MiB', '1GiB', '3GiB'])}", "seats:"]
    names = []
    for number in range(draw.randint(1, 9)):
        name, seat_lines = random_seat_lines(draw, number, gpus_per_host)
        names.append((name, any("tensor_parallel_size: 2" in line for line in seat_lines)))
        lines += seat_lines
    if current and refs:
        placed = [(name, tp) for name, tp in names if draw.random() < 0.8]
        if placed:
            lines.append("current_layout:")
            for name, tp in placed:
                if tp:
                    host = draw.randrange(hosts)
                    pair = draw.sample(range(gpus_per_host), 2)
                    lines.append(f"  {name}: [h{host}:{pair[0]}, h{host}:{pair[1]}]")
                else:
                    lines.append(f"  {name}: {draw.choice(refs)}")
    path = directory / "fleet.yaml"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path
