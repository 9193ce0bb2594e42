"""The layout's rules, read from the source: no import circle, and no stage reaching into another's internals.

Stages are the packages facts, usage, observe, plan, render, verify, report and adopt. Each declares its
public API in its ``__init__``'s ``__all__``: the modules another part of seatplan may import (``cli`` in every
stage, which ``seatplan.cli`` registers; ``facts.api`` and ``facts.models``). A stage may import
``seatplan.documents``, the root helpers (``errors``, ``units``, ``versions``, ``engine`` …) and another
stage's public modules only, and of a public module that has an ``__all__`` only the names it lists.
``documents`` and the root helpers import no stage but that public API. Every import counts, those inside a
function and those under ``if TYPE_CHECKING:`` too: a lazy import is no way round a circle, and a circle of
type-only imports is still two modules that cannot be read one without the other.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

SOURCE = Path(__file__).resolve().parents[1] / "src"
PACKAGE = SOURCE / "seatplan"
STAGES = frozenset({"facts", "usage", "observe", "plan", "render", "verify", "report", "adopt"})


def module_name(path: Path) -> str:
    parts = path.relative_to(SOURCE).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def all_modules() -> dict[str, Path]:
    return {module_name(path): path for path in sorted(PACKAGE.rglob("*.py"))}


MODULES = all_modules()


def declared_in(module: str) -> set[str] | None:
    """The names a module's ``__all__`` lists; None without one."""
    for node in ast.parse(MODULES[module].read_text(encoding="utf-8")).body:
        if isinstance(node, ast.Assign) and any(isinstance(target, ast.Name) and target.id == "__all__" for target in node.targets):
            return {element.value for element in node.value.elts}  # type: ignore[attr-defined]
    return None


def public_api() -> frozenset[str]:
    """Each stage's public modules, as its ``__init__`` declares them."""
    return frozenset(f"seatplan.{stage}.{name}" for stage in STAGES for name in declared_in(f"seatplan.{stage}") or ())


def imports_of(name: str, path: Path) -> list[tuple[str, list[str], int]]:
    """``(module, imported names, line)`` of every import in the file, resolved to a seatplan module."""
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    found: list[tuple[str, list[str], int]] = []
    tree = ast.parse(path.read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(alias.name, [], node.lineno) for alias in node.names if alias.name.startswith("seatplan")]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                base = ".".join(anchor[: len(anchor) - node.level + 1] + ([base] if base else []))
            if not base.startswith("seatplan"):
                continue
            submodules = [alias.name for alias in node.names if f"{base}.{alias.name}" in MODULES]
            found += [(f"{base}.{sub}", [], node.lineno) for sub in submodules]
            names = [alias.name for alias in node.names if alias.name not in submodules]
            if names or not submodules:
                found.append((base, names, node.lineno))
    return found


def stage_of(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[1] in STAGES else None


def graph() -> dict[str, set[str]]:
    edges: dict[str, set[str]] = {name: set() for name in MODULES}
    for name, path in MODULES.items():
        for target, _, _ in imports_of(name, path):
            if target in MODULES and target != name:
                edges[name].add(target)
    return edges


def circles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Every strongly connected component of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(edges[node]):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(edges):
        if node not in index:
            visit(node)
    return found


def packages_of(module: str) -> set[str]:
    """A module imports its parent packages' ``__init__`` too; that is no edge of its own making."""
    parts = module.split(".")
    return {".".join(parts[:end]) for end in range(1, len(parts))}


def module_circles() -> list[list[str]]:
    # Importing a package runs its __init__; an __init__ importing its own submodules is how a package
    # declares its API, not a circle between the modules.
    trimmed = {name: {target for target in targets if target not in packages_of(name)} for name, targets in graph().items()}
    return circles(trimmed)


def test_no_import_circle():
    assert module_circles() == []


def crossings() -> list[str]:
    problems = []
    public = public_api()
    for name, path in MODULES.items():
        own = stage_of(name)
        for target, names, line in imports_of(name, path):
            other = stage_of(target)
            if other is None or other == own:
                continue
            where = f"{path.relative_to(SOURCE)}:{line} imports {target}"
            if target not in public:
                problems.append(f"{where}, an internal module of the {other} stage")
                continue
            declared = declared_in(target)
            problems += [f"{where}.{item}, which its __all__ does not declare" for item in names if declared is not None and item not in declared]
    return problems


def test_no_stage_imports_another_stages_internals():
    assert crossings() == []


def test_every_stage_declares_its_public_api():
    for stage in sorted(STAGES):
        declared = declared_in(f"seatplan.{stage}")
        assert declared is not None and "cli" in declared, f"seatplan/{stage}/__init__.py declares no __all__ with its cli"
        missing = sorted(name for name in declared if f"seatplan.{stage}.{name}" not in MODULES)
        assert not missing, f"seatplan.{stage} declares modules it does not have: {missing}"


def test_the_rules_bite(tmp_path, monkeypatch):
    """A circle and an internal import written into a copy of the tree are found (the checks can fail)."""
    copy = tmp_path / "src"
    for path in MODULES.values():
        target = copy / path.relative_to(SOURCE)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(path.read_text(encoding="utf-8"), encoding="utf-8")
    (copy / "seatplan" / "units.py").write_text((copy / "seatplan" / "units.py").read_text() + "\nfrom seatplan import fileio\n")
    fileio = copy / "seatplan" / "fileio.py"
    fileio.write_text(fileio.read_text() + "\nfrom seatplan.units import GiB\nfrom seatplan.plan.sizing import choose_context\n")
    monkeypatch.setattr(sys.modules[__name__], "SOURCE", copy)
    monkeypatch.setattr(sys.modules[__name__], "PACKAGE", copy / "seatplan")
    modules = {module_name(path): path for path in sorted((copy / "seatplan").rglob("*.py"))}
    monkeypatch.setattr(sys.modules[__name__], "MODULES", modules)
    assert any({"seatplan.fileio", "seatplan.units"} <= set(circle) for circle in module_circles())
    with pytest.raises(AssertionError):
        test_no_stage_imports_another_stages_internals()
    # A root helper's import is judged like a stage's: the plan's sizing is no public API.
    assert any("fileio.py" in problem and "seatplan.plan.sizing" in problem for problem in crossings())
    # A circle of imports under TYPE_CHECKING is a circle too.
    versions = copy / "seatplan" / "versions.py"
    versions.write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from seatplan.hub_names import parse_hub_id\n" + versions.read_text())
    hub = copy / "seatplan" / "hub_names.py"
    hub.write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from seatplan.versions import release\n" + hub.read_text())
    assert any({"seatplan.hub_names", "seatplan.versions"} <= set(circle) for circle in module_circles())
