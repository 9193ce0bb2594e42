"""A YAML file read with the line of every key and item: the general loader under the fleet file
(``documents.fleet_file``) and the files ``seatplan adopt`` reads.

PyYAML's composed node tree keeps a mark (line) for every key and item; :func:`read_yaml_lines` records them by
path (``("seats", 2, "max_model_len")``), so a schema's error locations and a reader's own checks can both be
reported as ``fleet.yaml:23: seats[2].max_model_length: ...`` (:func:`line_of`, :func:`format_path`). The document
is bounded before anything walks it (:func:`check_yaml_limits`: aliases of aliases, deep nesting). Public API:
``__all__``; what a file's keys mean is its reader's business, not this module's.
"""

from __future__ import annotations

from typing import Any

import yaml

from seatplan.errors import SeatplanError

__all__ = ["MAX_YAML_DEPTH", "MAX_YAML_NODES", "PathKey", "check_yaml_limits", "format_path", "line_of", "read_yaml_lines",
           "read_yaml_node"]

PathKey = tuple[str | int, ...]


def format_path(path: PathKey) -> str:
    text = ""
    for part in path:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text or "(top level)"


def line_of(lines: dict[PathKey, int], path: PathKey) -> int:
    """The line of ``path``, or of its nearest ancestor the file spells out."""
    for cut in range(len(path), -1, -1):
        if path[:cut] in lines:
            return lines[path[:cut]]
    return 1



def read_yaml_lines(text: str, display: str, what: str = "fleet file",
                    empty_fix: str = "declare hosts: and seats: (see docs/fleet.md)") -> tuple[Any, dict[PathKey, int]]:
    """YAML ``text`` → (the document, the line of every key and item by path), within the node and depth limits.

    ``display`` is the file name errors carry (``fleet.yaml:23``), ``what`` what people call the file. Every error is a
    ``SeatplanError`` at its line: not YAML, empty, too large once aliases expand, nested too deep, a key that is no
    plain name or given twice.
    """
    data, node = read_yaml_node(text, display, what, empty_fix)
    lines: dict[PathKey, int] = {}
    _collect_lines(node, (), lines, display)
    return data, lines


def read_yaml_node(text: str, display: str, what: str, empty_fix: str) -> tuple[Any, Any]:
    """YAML ``text`` → (the document, its composed root node), within the node and depth limits.

    The one YAML loader of the project: :func:`read_yaml_lines` records lines by path from the node, ``seatplan
    adopt``'s readers walk the node itself (a compose file's ``<<`` merge keys and anchors stay YAML's business:
    the constructor resolves them, the node keeps every mark). PyYAML's libyaml loader keeps the same marks and is
    several times faster. Every error is a ``SeatplanError`` naming ``display`` and, where YAML says, the line.
    """
    try:
        loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)(text)
        try:
            node = loader.get_single_node()
            if node is None:
                raise SeatplanError(f"the {what} is empty", where=display, fix=empty_fix)
            check_yaml_limits(node, display, what)
            return loader.construct_document(node), node
        finally:
            loader.dispose()
    except yaml.MarkedYAMLError as problem:
        mark = problem.problem_mark or problem.context_mark
        line = mark.line + 1 if mark else 1
        raise SeatplanError(f"the {what} is not valid YAML: {problem.problem or problem.context}",
                            where=f"{display}:{line}", fix="correct the YAML syntax at that line") from None
    except yaml.YAMLError as problem:  # the reader's errors (a control character, a bad encoding) carry no mark
        raise SeatplanError(f"the {what} is not valid YAML: {problem}", where=display, fix=f"save the {what} as plain UTF-8 YAML") from None


MAX_YAML_NODES = 100_000  # counted with every alias expanded, as the loader would build them
MAX_YAML_DEPTH = 64  # a fleet nests five levels deep


def check_yaml_limits(root: Any, display: str, what: str = "fleet file") -> None:
    """Refuse a composed YAML tree that expands past MAX_YAML_NODES or nests past MAX_YAML_DEPTH.

    Aliases share nodes in the composed tree, so a "billion laughs" file is small until something walks
    it; this walk counts every visit (as the constructor and the line collector would make) and stops at
    the limit, iteratively, so neither memory nor Python's stack grows with the input.
    """

    visits, stack = 0, [(root, 1)]
    while stack:
        node, depth = stack.pop()
        visits += 1
        if visits > MAX_YAML_NODES:
            raise SeatplanError(f"the {what} expands to more than {MAX_YAML_NODES:,} YAML nodes (aliases of aliases?)",
                                where=f"{display}:{node.start_mark.line + 1}",
                                fix="write the fleet out plainly; anchors and aliases may not multiply the document")
        if depth > MAX_YAML_DEPTH:
            raise SeatplanError(f"the {what} nests more than {MAX_YAML_DEPTH} levels deep",
                                where=f"{display}:{node.start_mark.line + 1}", fix=f"a {what} nests a few levels; check the brackets")
        if isinstance(node, yaml.MappingNode):
            stack.extend((child, depth + 1) for pair in node.value for child in pair)
        elif isinstance(node, yaml.SequenceNode):
            stack.extend((child, depth + 1) for child in node.value)


def _collect_lines(node: Any, path: PathKey, lines: dict[PathKey, int], display: str) -> None:
    lines.setdefault(path, node.start_mark.line + 1)
    if isinstance(node, yaml.MappingNode):
        seen: set[str] = set()
        for key_node, value_node in node.value:
            if not isinstance(key_node, yaml.ScalarNode):  # `{a: 1}: x` or `[a]: x`: YAML allows it, a fleet does not
                raise SeatplanError(f"{format_path(path)}: a key must be a plain name, not a mapping or a list",
                                    where=f"{display}:{key_node.start_mark.line + 1}", fix="write the key as a plain word")
            key = key_node.value
            if key in seen:
                raise SeatplanError(
                    f"{format_path(path + (key,))}: key given twice",
                    where=f"{display}:{key_node.start_mark.line + 1}",
                    fix="keep one of the two entries",
                )
            seen.add(key)
            lines[path + (key,)] = key_node.start_mark.line + 1
            _collect_lines(value_node, path + (key,), lines, display)
    elif isinstance(node, yaml.SequenceNode):
        for position, item in enumerate(node.value):
            lines[path + (position,)] = item.start_mark.line + 1
            _collect_lines(item, path + (position,), lines, display)
