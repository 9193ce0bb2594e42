"""adopt's readers, one module per source: ``compose``, ``env_files``, ``systemd``, ``nvidia_smi``, ``litellm``, vLLM's
``--config`` (``vllm_config``), with what they share (``text``: bounded reads and YAML; ``dotenv``: KEY=value
files; ``commands``: wrappers around ``vllm serve``; ``compose_ports``; ``healthcheck``). The engines' own answers
are ``adopt.engines``'. Each turns unreadable input into a ``SeatplanError`` naming the file (and line) and the fix,
and keeps what it reads as written, for ``assemble`` to check.
"""

from __future__ import annotations

from pathlib import Path

from seatplan.adopt.evidence import Launch
from seatplan.adopt.readers.compose import read_compose
from seatplan.adopt.readers.env_files import read_env_dir
from seatplan.adopt.readers.systemd import read_units
from seatplan.adopt.readers.text import host_and_path

__all__ = ["read_launches"]


def read_launches(env_dirs: list[str], composes: list[str], systemd_dirs: list[str]) -> tuple[list[Launch], list[str]]:
    """``--systemd [HOST=]DIR`` (and the units found beside ``--env-dir``), ``--env-dir [HOST=]DIR`` and ``--compose
    [HOST=]FILE``: every engine they start, the host named where the files do not name it; and the readers' warnings."""
    launches: list[Launch] = []
    warnings: list[str] = []
    env_paths = [host_and_path(spec) for spec in env_dirs]
    read_by_units: set[Path] = set()
    unit_dirs = [(host_and_path(spec), "--systemd") for spec in systemd_dirs]
    unit_dirs += [((host, path), "--env-dir") for host, path in env_paths if path.is_dir() and any(path.glob("*.service"))]
    for (host, directory), option in unit_dirs:
        found, read, said = read_units(directory, [path for _, path in env_paths])
        read_by_units |= read
        warnings += said
        launches += _on_host(found, host, option)
    for host, directory in env_paths:
        found, said = read_env_dir(directory, read_by_units, units_found=bool(unit_dirs))
        warnings += said
        launches += _on_host(found, host, "--env-dir")
    for spec in composes:
        host, path = host_and_path(spec)
        found, said = read_compose(path)
        warnings += said
        launches += _on_host(found, host, "--compose")
    for launch in launches:
        warnings += launch.warnings
    return launches, warnings


def _on_host(launches: list[Launch], host: str | None, option: str) -> list[Launch]:
    for launch in launches:
        if launch.host is None and host is not None:
            launch.host, launch.host_note = host, f"{option} {host}=..."
    return launches
