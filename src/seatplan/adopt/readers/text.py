"""Reading a deployment's files: bounded, UTF-8, YAML through the project's one loader (documents.yaml_lines).

Every reader of adopt reads through here, so a hostile file cannot make adopt build a huge document, and each
error names the file and line.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import yaml

from seatplan.documents.yaml_lines import read_yaml_node
from seatplan.errors import SeatplanError
from seatplan.fileio import read_bounded_bytes, special_kind

MAX_FILE_BYTES = 1 << 20  # a LiteLLM config, a compose file, a unit or an env file is a few kilobytes
GPU_KEYS = ("CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES")
# The kernel's trees: a file there is the running process's or the kernel's (/proc/self/environ is adopt's own
# environment, not what systemd or compose would read on the GPU host), never an operator's env file.
KERNEL_TREES = (Path("/proc"), Path("/sys"), Path("/dev"))


def env_file_refusal(path: Path) -> str | None:
    """Why ``path`` is not read as an env file (``EnvironmentFile=``, ``env_file:``, an ``--env-dir`` file, the
    ``.env`` beside a compose file), worded to follow its name; None when it is a regular file outside the
    kernel's trees, or missing (the caller says so in its own words). A symlink is judged by where it leads too."""
    try:
        seen = [Path(os.path.abspath(path)), path.resolve()]
    except (OSError, RuntimeError):  # a symlink loop
        return "is a symlink that leads nowhere"
    for candidate in seen:
        tree = next((tree for tree in KERNEL_TREES if candidate == tree or tree in candidate.parents), None)
        if tree is not None:
            return f"is under {tree}, the kernel's files, not an env file"
    try:
        kind = special_kind(path.stat().st_mode)
    except (OSError, ValueError):
        return None
    return None if kind is None else f"is {kind}, not a regular file"


def read_text(path: Path, what: str, fix: str) -> str:
    raw = read_bounded_bytes(path, what, fix, MAX_FILE_BYTES, too_large_fix=f"check that this is the {what}")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as problem:
        line = raw.count(b"\n", 0, problem.start) + 1
        raise SeatplanError(f"the {what} is not UTF-8 text ({problem.reason})", where=f"{path}:{line}", fix="save it as UTF-8") from None


def read_yaml(path: Path, what: str) -> tuple[Any, Any]:
    """The document and its composed node (for line numbers), read by the project's one YAML loader."""
    return read_yaml_node(read_text(path, what, f"give the path of the {what}"), str(path), what, f"give the path of the {what}")


def child(node: Any, key: str, *, key_node: bool = False) -> Any:
    """The value node under ``key`` (or the key's own node, whose line is where the entry starts)."""
    if isinstance(node, yaml.MappingNode):
        for name_node, value_node in node.value:
            if isinstance(name_node, yaml.ScalarNode) and name_node.value == key:
                return name_node if key_node else value_node
    return None


def line_of(node: Any) -> int:
    return int(node.start_mark.line) + 1 if node is not None else 1



def host_and_path(spec: str) -> tuple[str | None, Path]:
    """``PATH`` or ``HOST=PATH`` (as ``seatplan diagnose`` takes them): the host a file came from, when it does not say."""
    host, equals, path = spec.partition("=")
    if not equals or "/" in host or not host:
        return None, Path(spec)
    return host, Path(path)


def gpu_list(text: str) -> list[str]:
    """``0,1`` or ``GPU-…,GPU-…`` as CUDA_VISIBLE_DEVICES and device_ids write them: a set, in order (``0,0,0`` is GPU 0)."""
    return list(dict.fromkeys(part.strip() for part in text.split(",") if part.strip()))
