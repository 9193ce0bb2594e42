"""A small, bounded mutation run over the functions whose numbers matter most (docs/testing.md).

    .venv/bin/python scripts/mutation.py [--budget-s 900] [--only NAME] [--json out.json]

mutmut 3 copies the whole project and runs the whole suite per mutant, which on a 2-core shared machine does not
finish; this script mutates one named function at a time (comparison operators, arithmetic operators, integer
constants, ceil/floor, min/max), runs only the tests that cover it, and prints every mutant that survives. The
source file is restored after each mutant, also on Ctrl-C. Run it on a copy of the repository so other test runs
never import a mutant:

    git worktree add --detach /tmp/seatplan-mutation && cp src/seatplan/usage/*.so /tmp/seatplan-mutation/src/seatplan/usage/
    .venv/bin/python /tmp/seatplan-mutation/scripts/mutation.py --json mutation.json
    git worktree remove --force /tmp/seatplan-mutation
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src" / "seatplan"

BITE_TESTS = "tests/harden/test_mutants_bite.py"  # written for this run's survivors; run against every target
# (file, dotted function name, tests that cover it)
TARGETS = [
    ("facts/kv_specs.py", "SlidingWindowSpec.blocks_per_request",
     ["tests/harden/test_mutants_bite.py", "tests/facts/test_facts_vllm_vectors.py"]),
    ("facts/kv_specs.py", "ChunkedLocalAttentionSpec.blocks_per_request", ["tests/facts/test_facts_vllm_vectors.py",
                                                                           "tests/facts/test_facts_layer_kinds.py"]),
    ("facts/kv_specs.py", "FullAttentionSpec.blocks_per_request", ["tests/facts/test_facts_vllm_vectors.py"]),
    ("facts/kv_cache.py", "hybrid_block_size", ["tests/facts/test_facts_vllm_vectors.py", "tests/facts/test_facts_layer_kinds.py"]),
    ("plan/sizing.py", "choose_kv_bytes", ["tests/harden/test_mutants_bite.py", "tests/plan/test_sizing.py"]),
    ("documents/fleet.py", "Policy.rule_kv_bytes", ["tests/harden/test_mutants_bite.py", "tests/plan/test_sizing.py"]),
    ("plan/placement/problem.py", "Problem.worst_spare", ["tests/plan/test_placement.py"]),
    ("plan/placement/problem.py", "Problem.fits", ["tests/plan/test_placement.py"]),
    ("usage/sweep.py", "runaway_threshold_tokens", ["tests/usage/test_usage_sweep.py"]),
    ("usage/sweep.py", "nearest_rank", ["tests/usage/test_usage_sweep.py"]),
    ("usage/sweep.py", "peak_inflight", ["tests/usage/test_usage_sweep.py"]),
    ("observe/detect.py", "_segment", ["tests/harden/test_mutants_bite.py", "tests/observe/test_detect.py"]),
    ("observe/detect.py", "_place", ["tests/harden/test_mutants_bite.py", "tests/observe/test_detect.py"]),
    ("observe/detect.py", "_steps", ["tests/harden/test_mutants_bite.py", "tests/observe/test_detect.py"]),
]

SWAP_COMPARE = {ast.Lt: ast.LtE, ast.LtE: ast.Lt, ast.Gt: ast.GtE, ast.GtE: ast.Gt, ast.Eq: ast.NotEq, ast.NotEq: ast.Eq}
SWAP_BINOP = {ast.Add: ast.Sub, ast.Sub: ast.Add, ast.Mult: ast.FloorDiv, ast.FloorDiv: ast.Mult, ast.Div: ast.Mult,
              ast.Mod: ast.FloorDiv}
SWAP_NAME = {"ceil": "floor", "floor": "ceil", "min": "max", "max": "min", "cdiv": "_floordiv"}


@dataclass
class Mutant:
    target: str
    line: int
    description: str
    killed: bool | None = None


def find_function(tree: ast.Module, dotted: str) -> ast.AST:
    node: ast.AST = tree
    for part in dotted.split("."):
        node = next(child for child in ast.iter_child_nodes(node)
                    if isinstance(child, (ast.FunctionDef, ast.ClassDef)) and child.name == part)
    return node


def candidates(function: ast.AST) -> list[tuple[ast.AST, str]]:
    """Every mutation point inside the function, in a stable order, with what it would change."""
    found = []
    for node in ast.walk(function):
        if isinstance(node, ast.Compare):
            for position, op in enumerate(node.ops):
                if type(op) in SWAP_COMPARE:
                    found.append((node, f"compare:{position}:{type(op).__name__}->{SWAP_COMPARE[type(op)].__name__}"))
        elif isinstance(node, ast.BinOp) and type(node.op) in SWAP_BINOP:
            found.append((node, f"binop:{type(node.op).__name__}->{SWAP_BINOP[type(node.op)].__name__}"))
        elif isinstance(node, ast.Constant) and type(node.value) is int:
            found.append((node, f"constant:{node.value}->{node.value + 1}"))
        elif isinstance(node, ast.Constant) and type(node.value) is float:
            found.append((node, f"constant:{node.value}->{node.value * 2}"))
        elif isinstance(node, ast.Attribute) and node.attr in SWAP_NAME:
            found.append((node, f"name:{node.attr}->{SWAP_NAME[node.attr]}"))
        elif isinstance(node, ast.Name) and node.id in SWAP_NAME:
            found.append((node, f"name:{node.id}->{SWAP_NAME[node.id]}"))
    return sorted(found, key=lambda item: (item[0].lineno, item[0].col_offset, item[1]))


def mutate(source: str, dotted: str, number: int) -> tuple[str, int, str]:
    tree = ast.parse(source)
    node, description = candidates(find_function(tree, dotted))[number]
    kind, _, change = description.partition(":")
    if kind == "compare":
        position = int(change.split(":")[0])
        node.ops[position] = SWAP_COMPARE[type(node.ops[position])]()
    elif kind == "binop":
        node.op = SWAP_BINOP[type(node.op)]()
    elif kind == "constant":
        node.value = node.value + 1 if type(node.value) is int else node.value * 2
    elif kind == "name" and isinstance(node, ast.Attribute):
        node.attr = SWAP_NAME[node.attr]
    else:
        node.id = SWAP_NAME[node.id]
    text = ast.unparse(tree)
    if "_floordiv" in description:
        text += "\n\ndef _floordiv(a, b):\n    return a // b\n"
    return text, node.lineno, description


def run_tests(tests: list[str], timeout_s: float) -> bool:
    """True when the tests fail (the mutant is killed)."""
    try:
        # PYTHONPATH first: a copy of the repository (see the docstring) mutates its own src, not the installed one.
        finished = subprocess.run([sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", "-m", "not postgres",
                                   "--timeout", str(int(timeout_s)), *tests], cwd=ROOT, capture_output=True,
                                  timeout=timeout_s + 30, env={**os.environ, "PYTHONPATH": str(ROOT / "src")})
    except subprocess.TimeoutExpired:
        return True
    return finished.returncode != 0


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--budget-s", type=float, default=900.0)
    parser.add_argument("--only", default=None, help="run only targets whose name contains this")
    parser.add_argument("--json", type=Path, default=None)
    arguments = parser.parse_args()
    deadline = time.monotonic() + arguments.budget_s
    results: list[Mutant] = []
    for file_name, dotted, own_tests in TARGETS:
        tests = sorted({BITE_TESTS, *own_tests})
        if arguments.only and arguments.only not in f"{file_name}:{dotted}":
            continue
        path = SRC / file_name
        original = path.read_text()
        count = len(candidates(find_function(ast.parse(original), dotted)))
        for number in range(count):
            if time.monotonic() > deadline:
                break
            text, line, description = mutate(original, dotted, number)
            mutant = Mutant(f"{file_name}:{dotted}", line, description)
            try:
                path.write_text(text)
                mutant.killed = run_tests(tests, 300)
            finally:
                path.write_text(original)
            results.append(mutant)
            print(f"{'killed  ' if mutant.killed else 'SURVIVED'} {mutant.target} line {line} {description}", flush=True)
    survived = [m for m in results if not m.killed]
    print(f"\n{len(results)} mutants, {len(results) - len(survived)} killed, {len(survived)} survived")
    if arguments.json:
        arguments.json.write_text(json.dumps([m.__dict__ for m in results], indent=2) + "\n")


if __name__ == "__main__":
    main()
