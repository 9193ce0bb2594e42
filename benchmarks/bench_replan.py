"""Engines restarted by a one-seat edit on the demo fleet (issue 18): what a small change costs on a live box.

For every vLLM seat of examples/demo/fleet.yaml and each of two edits (its context halved; its KV pinned
1 GiB higher), the fleet is replanned from the previous plan (``--current``), both plans are rendered, and
the env files whose bytes differ are counted: apply restarts exactly those engines. Reported against the
same edits replanned without a current layout and with ``move_cost_bytes: 0``, which is how the issue saw
8 of 8 engines change.

Run: .venv/bin/python benchmarks/bench_replan.py [--json]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

import yaml

from seatplan.documents.fleet_file import load_fleet
from seatplan.documents.plan import Plan
from seatplan.plan.current import read_current
from seatplan.plan.planner import build_plan
from seatplan.render.bundle import render_files
from seatplan.render.settings import RenderSettings

REPO = Path(__file__).resolve().parents[1]
DEMO = REPO / "examples" / "demo" / "fleet.yaml"
GiB = 1 << 30


def demo_document() -> dict:
    document = yaml.safe_load(DEMO.read_text())
    for seat in document["seats"]:
        if "model" in seat and not Path(seat["model"]).is_absolute():
            seat["model"] = str(DEMO.parent / seat["model"])
    return document


def plan_of(document: dict, directory: Path, name: str, current: Path | None) -> Plan:
    path = directory / f"{name}.yaml"
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    loaded = load_fleet(path)
    return build_plan(loaded, current=read_current(current, loaded.fleet) if current else None)


def edits(document: dict, plan: Plan) -> list[tuple[str, str, dict]]:
    found = []
    for position, seat in enumerate(document["seats"]):
        if seat.get("engine", "vllm") != "vllm":
            continue
        planned = plan.seat(seat["name"])
        if planned.max_model_len and planned.max_model_len >= 4096:
            shorter = yaml.safe_load(yaml.safe_dump(document))
            shorter["seats"][position]["max_model_len"] = planned.max_model_len // 2
            found.append((seat["name"], "context halved", shorter))
        larger = yaml.safe_load(yaml.safe_dump(document))
        larger["seats"][position]["kv_cache_memory_bytes"] = planned.kv_cache_memory_bytes + GiB
        found.append((seat["name"], "KV pinned 1 GiB higher", larger))
    return found


def restarted(before: Plan, after: Plan) -> list[str]:
    settings = RenderSettings()
    old, new = render_files(before, settings, ["env"]), render_files(after, settings, ["env"])
    return sorted(path[len("env/"):-len(".env")] for path in old.keys() | new.keys() if old.get(path) != new.get(path))


def measure(blind: bool) -> list[dict]:
    """``blind``: no current layout and no move cost (the behaviour the issue reported)."""
    document = demo_document()
    document.pop("current_layout", None)
    if blind:
        document.setdefault("policy", {})["move_cost_bytes"] = 0
    rows = []
    with tempfile.TemporaryDirectory() as scratch:
        directory = Path(scratch)
        base = plan_of(document, directory, "base", None)
        base_path = directory / "base.json"
        base_path.write_text(base.model_dump_json())
        for number, (seat, edit, edited) in enumerate(edits(document, base)):
            after = plan_of(edited, directory, f"edit-{number}", None if blind else base_path)
            engines = restarted(base, after)
            rows.append({"seat": seat, "edit": edit, "restarted": engines, "moves": after.moves,
                         "engines": sum(1 for item in after.seats if item.engine == "vllm")})
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--json", action="store_true")
    arguments = parser.parse_args()
    results = {"with --current and the default move cost": measure(blind=False), "without a current layout, move cost 0": measure(blind=True)}
    if arguments.json:
        json.dump(results, sys.stdout, indent=2)
        return
    for title, rows in results.items():
        print(f"{title}:")
        for row in rows:
            print(f"  {row['seat']:<14} {row['edit']:<23} restarts {len(row['restarted'])} of {row['engines']} "
                  f"({', '.join(row['restarted']) or '-'}), {row['moves']} move(s)")
        counts = [len(row["restarted"]) for row in rows]
        print(f"  edits {len(rows)}: engines restarted per edit: mean {sum(counts) / len(counts):.2f}, max {max(counts)}; "
              f"edits restarting only the edited seat: {sum(row['restarted'] == [row['seat']] for row in rows)}")


if __name__ == "__main__":
    main()
