#!/usr/bin/env python3
"""Write examples/kubernetes/: the demo fleet's plan (examples/demo/fleet.yaml) rendered with `--target kubernetes`, the
manifests docs/kubernetes.md walks through. Each seat's claim asks for the seat's footprint in bytes, as the plan says.

`make_kubernetes_example.py DIR` writes them to DIR instead; tests/render/test_render_kubernetes.py checks the shipped
files are what it writes, byte for byte, and that every claim's bytes are the plan's footprint.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path

from seatplan.cli import app

REPO = Path(__file__).resolve().parent.parent
OUT = Path(sys.argv[1]).resolve() if len(sys.argv) > 1 else REPO / "examples" / "kubernetes"


def seatplan(*args: str) -> None:
    try:
        app(list(args), standalone_mode=False)
    except SystemExit as done:
        if done.code:
            raise


def main() -> None:
    with tempfile.TemporaryDirectory() as scratch:
        plan = Path(scratch) / "plan.json"
        seatplan("plan", str(REPO / "examples" / "demo" / "fleet.yaml"), "-o", str(plan))
        seatplan("render", str(plan), "--target", "kubernetes", "-o", str(Path(scratch) / "rendered"))
        if OUT.exists():
            shutil.rmtree(OUT)
        shutil.copytree(Path(scratch) / "rendered" / "kubernetes", OUT)


if __name__ == "__main__":
    main()
