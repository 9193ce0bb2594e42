"""The adopted fleet as YAML text, every value followed by a comment saying where it came from.

Scalars and keys are written by PyYAML's safe dumper (quoted wherever YAML needs it), so no string read
from an engine or a file can open a new key or document; comments are cut to one printable ASCII line.
The text is then read back by the fleet loader (``documents.fleet_file``) before anything is written.
"""

from __future__ import annotations

from typing import Any

import yaml

from seatplan.adopt.assemble import Noted, Tree
from seatplan.secrets import without_credentials

COMMENT_CHARS = 240
HEADER = (
    "# Written by `seatplan adopt` from what runs today; each value says where it came from.\n"
    "# Fill every TODO (plan refuses the file until then), then: seatplan plan fleet.yaml -o plan.json\n"
    "# policy: seatplan's defaults but for vllm_version (adopt cannot see the rules that sized today's pins)\n"
)


def scalar(value: Any) -> str:
    """One value on one line: ``yaml.safe_dump`` in flow style, without the document end marker."""
    if isinstance(value, str):
        value = without_credentials(value)  # an engine's or a file's URL is stored without its user:password
    text = _dumped(value, style=None)
    if "\n" in text:
        # A line break or other control in a string makes PyYAML choose a multi-line quoted scalar; the
        # double-quoted style escapes every one of them and stays on one line.
        text = _dumped(value, style='"')
    return text


def _dumped(value: Any, style: str | None) -> str:
    text = yaml.safe_dump(value, default_flow_style=True, default_style=style, width=1 << 30, allow_unicode=False, explicit_end=False)
    return text.removesuffix("\n").removesuffix("\n...").strip()


def comment(note: str) -> str:
    cleaned = "".join(char if " " <= char <= "~" else "?" for char in without_credentials(note))
    return cleaned[:COMMENT_CHARS].rstrip()


def _noted(key: str, noted: Noted, indent: str, first: str) -> list[str]:
    if noted.value is None:
        return [f"{indent}{first}# {comment(key.strip('()'))}: {comment(noted.note)}"]
    return [f"{indent}{first}{scalar(key)}: {scalar(noted.value)}  # {comment(noted.note)}"]


def _mapping(tree: Tree, indent: str, first: str = "") -> list[str]:
    lines: list[str] = []
    for key, value in tree.items():
        lead, first = first, ""
        pad = indent if not lead else indent[: len(indent) - len(lead)]
        if isinstance(value, Noted):
            lines += _noted(key, value, pad, lead)
        elif isinstance(value, dict):
            lines.append(f"{pad}{lead}{scalar(key)}:")
            lines += _mapping(value, indent + "  ")
        else:
            lines.append(f"{pad}{lead}{scalar(key)}:")
            for item in value:
                lines += _mapping(item, indent + "    ", "  - ")
    return lines


def fleet_text(tree: Tree) -> str:
    return HEADER + "\n".join(_mapping(tree, "")) + "\n"
