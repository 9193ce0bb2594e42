"""The LiteLLM gateway's own service in a compose file: how its container reaches the engines.

A gateway in a container reaches the host's published ports at ``host.docker.internal`` only where compose maps that
name (``extra_hosts: ["host.docker.internal:host-gateway"]``, Docker's name for the host's bridge address), and
``localhost`` is the host itself only with ``network_mode: host``; otherwise it names the container. The service is
the one whose image or command is LiteLLM's (``ghcr.io/berriai/litellm``, ``litellm --config``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from seatplan.adopt.readers.text import child, line_of, read_yaml

HOST_GATEWAY = "host-gateway"


@dataclass(frozen=True)
class GatewayContainer:
    source: str  # FILE:LINE of the service
    service: str
    host_gateway: bool  # extra_hosts maps host.docker.internal to host-gateway
    host_network: bool  # network_mode: host


def _words(value: object) -> list[str]:
    if isinstance(value, list):
        return [str(item) for item in value]
    return str(value).split() if isinstance(value, str) else []


def _maps_host_gateway(extra_hosts: object) -> bool:
    """``["host.docker.internal:host-gateway"]``, ``host.docker.internal=host-gateway`` or the mapping form."""
    if isinstance(extra_hosts, dict):
        return any(str(name) == "host.docker.internal" and str(value) == HOST_GATEWAY for name, value in extra_hosts.items())
    if isinstance(extra_hosts, list):
        for item in extra_hosts:
            name, _, value = str(item).replace("=", ":", 1).partition(":")
            if name.strip() == "host.docker.internal" and value.strip() == HOST_GATEWAY:
                return True
    return False


def read_gateway_container(path: Path) -> GatewayContainer | None:
    """The compose file's LiteLLM service, if it has one (the file's errors are read_compose's to report)."""
    raw, node = read_yaml(path, "compose file")
    services = raw.get("services") if isinstance(raw, dict) else None
    if not isinstance(services, dict):
        return None
    for name, service in services.items():
        if not isinstance(service, dict):
            continue
        words = [str(service.get("image", ""))] + _words(service.get("entrypoint")) + _words(service.get("command"))
        if not any("litellm" in word.lower() for word in words):
            continue
        where = f"{path}:{line_of(child(child(node, 'services'), str(name), key_node=True))}"
        return GatewayContainer(source=where, service=str(name), host_gateway=_maps_host_gateway(service.get("extra_hosts")),
                                host_network=str(service.get("network_mode", "")) == "host")
    return None
