"""docs/ARCHITECTURE.md's "Where each number is decided" table stays true: every function it names exists, and no
other module decides the same figure (defines a function of that name, or one of the former second deciders)."""

from __future__ import annotations

import ast
import importlib
import re
from pathlib import Path

from kits.paths import REPO_ROOT

ARCHITECTURE = REPO_ROOT / "docs" / "ARCHITECTURE.md"
SOURCE = REPO_ROOT / "src"

# Where a figure used to be decided a second time, now gone (issue 31): module → the names it no longer defines.
FORMER_DECIDERS = {
    "seatplan.plan.size_seat": {"usage_for", "allowed_gpus"},  # the usage entry; pin/avoid → GPUs
    "seatplan.observe.inputs": {"rule_arithmetic"},  # the KV rule's words for diagnose
    "seatplan.plan.footprint": {"engine_limits", "EngineLimits"},  # the batch limits
    "seatplan.adopt.assemble": {"VLLM_DEFAULT_PORT"},  # vLLM's default port
}


def table_names(text: str | None = None) -> list[str]:
    text = ARCHITECTURE.read_text(encoding="utf-8") if text is None else text
    section = text.split("## Where each number is decided", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| ") and not line.startswith("| figure") and "---" not in line]
    names = []
    for row in rows:
        cells = [cell.strip() for cell in row.strip("|").split("|")]
        found = re.findall(r"`([\w.]+)`", cells[-1])
        assert len(found) == 1, f"one deciding function per row: {row}"
        names.append(found[0])
    return names


def resolve(name: str) -> tuple[str, object]:
    """The module a dotted name lives in, and the object it names (a module-level function or a class's method)."""
    parts = name.split(".")
    for cut in range(len(parts) - 1, 0, -1):
        try:
            target: object = importlib.import_module(".".join(parts[:cut]))
        except ModuleNotFoundError:
            continue
        for part in parts[cut:]:
            target = getattr(target, part)
        return ".".join(parts[:cut]), target
    raise AssertionError(f"{name}: no such module")


def module_path(module: str) -> Path:
    base = SOURCE.joinpath(*module.split("."))
    return base / "__init__.py" if base.is_dir() else base.with_suffix(".py")


def definitions() -> dict[str, set[str]]:
    """Each module's top-level names: functions, classes and assignments (not what it imports)."""
    found: dict[str, set[str]] = {}
    for path in sorted((SOURCE / "seatplan").rglob("*.py")):
        module = ".".join(path.relative_to(SOURCE).with_suffix("").parts).removesuffix(".__init__")
        names: set[str] = set()
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names.add(node.name)
            elif isinstance(node, ast.Assign):
                names |= {target.id for target in node.targets if isinstance(target, ast.Name)}
        found[module] = names
    return found


def missing_deciders(names: list[str]) -> list[str]:
    """Each table name that does not import as a callable defined where the table says."""
    problems = []
    for name in names:
        try:
            module, target = resolve(name)
        except (AssertionError, AttributeError) as problem:
            problems.append(f"{name}: {problem}")
            continue
        if not callable(target):
            problems.append(f"{name}: not a function")
        elif getattr(target, "__module__", module) != module:
            problems.append(f"{name} is defined in {target.__module__}, not where the table says")
    return problems


def test_the_table_names_real_functions_defined_where_it_says():
    names = table_names()
    assert len(names) >= 20 and len(set(names)) == len(names)
    assert missing_deciders(names) == []
    # issue 51's rows: the KV mode, the utilisation render writes, the rollout order, observed footprints
    for row in ("seatplan.plan.size_seat.choose_kv_mode", "seatplan.engine.command.engine_command", "seatplan.plan.rollout.order_rollout",
                "seatplan.plan.footprint.observed_footprint", "seatplan.adopt.observed.observe"):
        assert row in names, row


def test_a_row_whose_function_is_missing_or_renamed_fails():
    """The name check bites: a renamed function, a gone module, a re-export named in another module's place."""
    text = ARCHITECTURE.read_text(encoding="utf-8")
    renamed = text.replace("`seatplan.plan.size_seat.choose_kv_mode`", "`seatplan.plan.size_seat.decide_kv_mode`")
    gone = text.replace("`seatplan.plan.rollout.order_rollout`", "`seatplan.plan.rollouts.order_rollout`")
    moved = text.replace("`seatplan.engine.command.engine_command`", "`seatplan.render.engines.engine_command`")  # imported there
    for edited, name in ((renamed, "seatplan.plan.size_seat.decide_kv_mode"), (gone, "seatplan.plan.rollouts.order_rollout"),
                         (moved, "seatplan.render.engines.engine_command")):
        problems = missing_deciders(table_names(edited))
        assert len(problems) == 1 and problems[0].startswith(name), problems


def second_deciders(defined: dict[str, set[str]]) -> list[str]:
    """Each table name some other module defines too (by the function's name, or its class's)."""
    problems = []
    for name in table_names():
        module, _ = resolve(name)
        top = name[len(module) + 1:].split(".")[0]  # the function, or the class holding the method
        leaf = name.rsplit(".", 1)[1]
        others = sorted(other for other, names in defined.items() if other != module and (leaf in names or top in names))
        problems += [f"{name}: {', '.join(others)} define(s) {leaf} too"] if others else []
    return problems


def test_no_other_module_defines_a_decider_of_the_same_name():
    assert second_deciders(definitions()) == []


def test_the_former_second_deciders_are_gone():
    defined = definitions()
    for module, names in FORMER_DECIDERS.items():
        assert not names & defined[module], f"{module} defines {sorted(names & defined[module])} again"


def test_the_checks_bite():
    """A second module defining a decider's name is found (the check can fail)."""
    defined = definitions()
    defined["seatplan.usage.summary"] = defined["seatplan.usage.summary"] | {"usage_of_seat"}
    assert second_deciders(defined) == ["seatplan.documents.usage.usage_of_seat: seatplan.usage.summary define(s) usage_of_seat too"]


def input_reads(path: Path) -> list[int]:
    """Lines where code reads data out of an explanation's (or a footprint part's) ``inputs``: ``x.inputs[...]``,
    ``x.inputs.get(...)``, ``key in x.inputs``. Printing them whole for people (``.items()``) is what they are for."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Attribute) and node.value.attr == "inputs":
            found.append(node.lineno)
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get"
              and isinstance(node.func.value, ast.Attribute) and node.func.value.attr == "inputs"):
            found.append(node.lineno)
        elif isinstance(node, ast.Compare) and any(isinstance(op, (ast.In, ast.NotIn)) for op in node.ops) and any(
                isinstance(side, ast.Attribute) and side.attr == "inputs" for side in node.comparators):
            found.append(node.lineno)
    return found


def test_no_stage_reads_data_out_of_explanations():
    """(The check bites: main before issue 31 read them in plan/contexts.py:21-22, plan/show.py:124, plan/footprint.py:168.)"""
    reads = {str(path.relative_to(SOURCE)): lines for path in sorted((SOURCE / "seatplan").rglob("*.py"))
             if (lines := input_reads(path))}
    assert reads == {}, "read the typed field instead (explanations are for people): " + repr(reads)


def named_module_paths(text: str) -> list[str]:
    """Every ``stage/module.py`` or ``stage/package/`` the page names with its folder (a bare ``local.py`` is read in its row's context)."""
    return sorted({name.removeprefix("src/seatplan/") for name in re.findall(r"`((?:src/seatplan/)?[a-z_]+/[a-z_/]*(?:\.py|/))`", text)
                   if not name.startswith(("tests/", "vllm/"))})


def test_every_module_the_page_names_exists():
    text = ARCHITECTURE.read_text(encoding="utf-8")
    named = named_module_paths(text)
    assert len(named) > 40, "the page should name the modules of every stage"
    source = REPO_ROOT / "src" / "seatplan"
    assert [name for name in named if not (source / name).exists()] == []
    assert named_module_paths("`adopt/files.py` and `report/figures/`") == ["adopt/files.py", "report/figures/"]
