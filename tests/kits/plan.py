"""Helpers for the plan-stage tests: small fleets written to a temporary directory, and the CLI run in-process."""

from __future__ import annotations

import textwrap
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


