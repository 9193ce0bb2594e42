"""vLLM's ``--config FILE.yaml``: the arguments an engine reads from a YAML file, spliced into its command as vLLM does.

The file is looked for where the command names it, then beside the file that holds the command (a copy taken
from the GPU host); read with the fleet loader's limits. vLLM's own rules turn it into words
(``engine.parse.config_file_args``, ``with_config``).
"""

from __future__ import annotations

from pathlib import Path

from seatplan.adopt.readers.text import read_yaml
from seatplan.engine.parse import config_file_args, with_config
from seatplan.errors import SeatplanError


def config_path(given: str, beside: Path) -> Path | None:
    for candidate in (Path(given), beside / given, beside / Path(given).name):
        if candidate.is_file():
            return candidate
    return None


def spliced(args: list[str], beside: Path, where: str) -> tuple[list[str], str]:
    """``args`` with its ``--config FILE`` read in (``--config=FILE`` too), and a note naming the file; unchanged without one."""
    words = [part for word in args for part in (word.split("=", 1) if word.startswith("--config=") else [word])]
    if "--config" not in words:
        return args, ""
    index = words.index("--config")
    if index + 1 >= len(words):
        raise SeatplanError("--config names no file", where=where, fix="give vLLM's --config FILE.yaml, as the engine starts")
    given = words[index + 1]
    if not given.endswith((".yaml", ".yml")):
        raise SeatplanError(f"--config {given[:80]!r}: vLLM reads only a .yaml or .yml file here", where=where, fix="give the YAML file the engine reads")
    path = config_path(given, beside)
    if path is None:
        raise SeatplanError(f"--config {given[:80]!r}: no such file here or beside {beside}", where=where,
                            fix="copy the engine's config file beside the file that starts it (as on the GPU host), then adopt again")
    data, _ = read_yaml(path, "vLLM config file")
    if not isinstance(data, dict):
        raise SeatplanError("the vLLM config file is no mapping of flag: value", where=str(path), fix="write it as vLLM reads it: `max-model-len: 32768` lines")
    return with_config(words, config_file_args(data)), f"{path} (--config)"
