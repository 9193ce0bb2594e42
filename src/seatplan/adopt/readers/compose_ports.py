"""Compose ``ports:`` in every syntax the Compose Specification gives (services.ports): the short one
(``"8000"``, ``"8006:8000"``, ``"127.0.0.1:8006:8000"``, ``"[::1]:8006:8000"``, ``"8006-8007:8000-8001"``,
``"8000/udp"``, a bare number) and the long one (``{target: 8000, published: "8006", host_ip: …, protocol: …}``,
``published`` a range too). One reader for engines, fixed seats and health checks."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from seatplan.engine.endpoint import DEFAULT_PORT
from seatplan.engine.parse import read_vllm_args
from seatplan.errors import SeatplanError

_RANGE = re.compile(r"([0-9]{1,5})(?:-([0-9]{1,5}))?", re.ASCII)
_FIX = "write ports as compose takes them: \"HOST:CONTAINER\" (each 1 to 65535) or {target: N, published: N}"


@dataclass(frozen=True)
class PortMapping:
    container: int
    host: int | None  # None: compose picks a free port on the host (none named, or a host range for one port)
    address: str | None  # the host address it is bound to; None: every one
    protocol: str  # tcp | udp
    written: str  # as the file wrote it (for notes)


def _range(text: str, where: str, entry: str) -> list[int]:
    match = _RANGE.fullmatch(text.strip())
    if not match:
        raise SeatplanError(f"port {entry[:60]!r}: {text[:20]!r} is no port or range", where=where, fix=_FIX)
    low, high = int(match[1]), int(match[2] or match[1])
    if not 0 < low <= high < 65536 or high - low > 1024:
        raise SeatplanError(f"port {entry[:60]!r} publishes no TCP port range from 1 to 65535", where=where, fix=_FIX)
    return list(range(low, high + 1))


def _pairs(host: list[int] | None, container: list[int], address: str | None, protocol: str, written: str) -> list[PortMapping]:
    if host is not None and len(host) == len(container):
        return [PortMapping(target, published, address, protocol, written) for published, target in zip(host, container)]
    # a host range for one container port: compose takes a free one of the range, which the file does not say
    return [PortMapping(target, None, address, protocol, written) for target in container]


def read_ports(ports: Any, where: str) -> list[PortMapping]:
    if ports is None:
        return []
    if not isinstance(ports, list):
        raise SeatplanError("ports is not a list", where=where, fix=_FIX)
    mappings: list[PortMapping] = []
    for entry in ports:
        if isinstance(entry, dict):
            mappings += _long(entry, where)
        elif isinstance(entry, (int, str)) and not isinstance(entry, bool):
            mappings += _short(str(entry), where)
        else:
            raise SeatplanError(f"port {str(entry)[:60]!r} is neither a string nor a mapping", where=where, fix=_FIX)
    return mappings


def _short(text: str, where: str) -> list[PortMapping]:
    body, _, protocol = text.strip().partition("/")
    address: str | None = None
    if body.startswith("["):  # [IPv6]:HOST:CONTAINER
        address, _, body = body[1:].partition("]")
        body = body.removeprefix(":")
    parts = body.split(":")
    if len(parts) == 3:
        address, parts = parts[0], parts[1:]
    if len(parts) > 2:
        raise SeatplanError(f"port {text[:60]!r} is not [IP:]HOST:CONTAINER", where=where, fix=_FIX)
    container = _range(parts[-1], where, text)
    host = _range(parts[0], where, text) if len(parts) == 2 and parts[0] else None
    return _pairs(host, container, None if address in (None, "", "0.0.0.0", "::") else address, protocol or "tcp", text)


def _long(entry: dict, where: str) -> list[PortMapping]:
    target, published = entry.get("target"), entry.get("published")
    written = ", ".join(f"{key}: {value}" for key, value in entry.items())[:80]
    if target is None or isinstance(target, bool) or not isinstance(target, (int, str)):
        raise SeatplanError(f"port {{{written}}} has no target (the container's port)", where=where, fix=_FIX)
    container = _range(str(target), where, written)
    host = _range(str(published), where, written) if published is not None and str(published) != "" else None
    address = entry.get("host_ip")
    return _pairs(host, container, None if address in (None, "", "0.0.0.0", "::") else str(address), str(entry.get("protocol") or "tcp"), written)


def published_port(mappings: list[PortMapping], args: list[str], where: str) -> tuple[int | None, str]:
    """The host port compose publishes the engine's ``--port`` (vLLM's default 8000) on (None where it publishes
    none), and why it is not known where compose picks it."""
    try:
        container = read_vllm_args(args).whole("--port") or DEFAULT_PORT
    except ValueError:
        container = DEFAULT_PORT  # the flag's own warning comes from the seat's arguments
    for mapping in mappings:
        if mapping.container == container and mapping.protocol == "tcp":
            if mapping.host is None:
                return None, (f"{where}: ports {mapping.written!r}: compose picks the host port for container port {container} "
                              "(no host port, or a range, is named), so the port the engine is reached on is not in the file")
            return mapping.host, ""
    return None, ""
