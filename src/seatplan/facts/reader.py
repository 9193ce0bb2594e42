"""Find a model's files (a local directory or the Hugging Face cache) and read its JSON files.

Never touches the network: a Hugging Face id is looked up only in the local cache
(``$HF_HUB_CACHE``, else ``$HF_HOME/hub``, else ``~/.cache/huggingface/hub``).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from seatplan.errors import SeatplanError
from seatplan.fileio import check_input_file
from seatplan.hub_names import parse_hub_id
from seatplan.jsontext import JsonTooDeep, loads_bounded

MAX_JSON_BYTES = 64 << 20  # configs are kilobytes; a shard index a few MB


def hub_cache_dir() -> Path:
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"]).expanduser()
    if os.environ.get("HF_HOME"):
        return Path(os.environ["HF_HOME"]).expanduser() / "hub"
    return Path("~/.cache/huggingface/hub").expanduser()


def _snapshot_of(repo_dir: Path, model: str) -> Path:
    snapshots = repo_dir / "snapshots"
    ref = repo_dir / "refs" / "main"
    if ref.is_file():
        commit = ref.read_text(encoding="utf-8", errors="replace").strip()
        if commit and (snapshots / commit).is_dir():
            return snapshots / commit
    candidates = sorted((p for p in snapshots.glob("*") if (p / "config.json").exists()), key=lambda p: p.stat().st_mtime)
    if not candidates:
        raise SeatplanError(
            f"the Hugging Face cache has {model} but no snapshot with a config.json",
            where=str(snapshots),
            fix=f"download it on a machine with access: huggingface-cli download {model} config.json",
        )
    return candidates[-1]


def locate_model(model: str) -> Path:
    """A local directory (or its config.json), else ``ORG/NAME`` resolved in the local HF cache."""
    path = Path(model).expanduser()
    if path.is_file() and path.name == "config.json":
        return path.parent
    if path.is_dir():
        return path
    if path.is_file():
        raise SeatplanError("is a file, not a model directory", where=model,
                            fix="give the directory that holds the model's config.json (or that config.json itself)")
    if parse_hub_id(model) is not None:
        cache = hub_cache_dir()
        repo_dir = cache / ("models--" + model.replace("/", "--"))
        if repo_dir.is_dir():
            return _snapshot_of(repo_dir, model)
        raise SeatplanError(
            f"{model} is neither a local directory nor in the Hugging Face cache",
            where=str(repo_dir),
            fix="give the model's directory, or set HF_HUB_CACHE / HF_HOME to the cache that holds it",
        )
    # A relative path is taken from the working directory; the absolute one says where that was.
    raise SeatplanError(f"model directory {model} does not exist (looked for {path.resolve()})", where=model,
                        fix="give a directory with a config.json, or a Hugging Face id (ORG/NAME[@REVISION])")


def read_optional_json(path: Path) -> dict[str, Any] | None:
    """Like :func:`read_json`, but a missing file is None (a present, broken file is still an error)."""
    if not path.exists():
        return None
    return read_json(path)


def read_json(path: Path) -> dict[str, Any]:
    """Parse a JSON object file; every problem becomes a SeatplanError naming the file (and line)."""
    if not path.exists():
        raise SeatplanError(f"{path.name} is missing", where=str(path),
                            fix="the model directory needs the config.json from the model's repository")
    check_input_file(path, path.name)
    size = path.stat().st_size
    if size > MAX_JSON_BYTES:
        raise SeatplanError(f"{path.name} is {size} bytes, too large for a config file", where=str(path),
                            fix="check that this is the right file")
    try:
        document = loads_bounded(path.read_bytes().decode("utf-8"))
    except OSError as problem:
        raise SeatplanError(f"cannot read {path.name}: {problem.strerror}", where=str(path),
                            fix="check the file's permissions") from None
    except UnicodeDecodeError as problem:
        raise SeatplanError(f"{path.name} is not UTF-8 text ({problem.reason})", where=str(path),
                            fix="replace it with the original file") from None
    except JsonTooDeep:
        raise SeatplanError(f"{path.name} nests too deeply to be a config file", where=str(path),
                            fix="replace it with the original file from the model's repository") from None
    except json.JSONDecodeError as problem:
        raise SeatplanError(f"{path.name} is not valid JSON: {problem.msg}", where=f"{path}:{problem.lineno}:{problem.colno}",
                            fix="replace it with the original file from the model's repository") from None
    except ValueError as problem:  # NaN, Infinity, 1e400: no config value is meant to be one
        raise SeatplanError(f"{path.name} holds a number that is not finite ({problem})", where=str(path),
                            fix="replace it with the original file from the model's repository") from None
    if not isinstance(document, dict):
        raise SeatplanError(f"{path.name} must hold a JSON object, found {type(document).__name__}", where=str(path),
                            fix="replace it with the original file from the model's repository")
    return document
