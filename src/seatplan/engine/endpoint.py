"""Where an engine answers: its base URL, its health URL and the ``ADDRESS:PORT`` a scrape target gets.

An IPv6 address goes in brackets in a URL and in Prometheus' ``instance`` label (RFC 3986 §3.2.2);
``http://fd00::5:8000`` is no URL. Addresses come from the fleet file, so anything that is neither an IP
address nor a host name is refused rather than pasted into a URL, a playbook or a rule.
"""

from __future__ import annotations

import ipaddress
import re

from seatplan.errors import SeatplanError

DEFAULT_PORT = 8000  # vLLM's own default for --port: what an engine started without it listens on
# Host names: dot-separated labels of letters, digits, hyphens and underscores (Compose service names
# carry them); nothing that could end the host part of a URL or a YAML scalar.
_HOST_NAME = re.compile(r"^(?=.{1,253}\Z)[A-Za-z0-9_](?:[A-Za-z0-9_-]{0,61}[A-Za-z0-9_])?(?:\.[A-Za-z0-9_](?:[A-Za-z0-9_-]{0,61}[A-Za-z0-9_])?)*\.?\Z")


def url_host(address: str) -> str:
    """The address as the host part of a URL: an IPv6 address bracketed, an IPv4 address or a name as is."""
    bare = address[1:-1] if address.startswith("[") and address.endswith("]") else address
    try:
        parsed = ipaddress.ip_address(bare)
    except ValueError:
        if bare == address and _HOST_NAME.match(address):
            return address
        raise SeatplanError(
            f"{address!r} is neither an IP address nor a host name", where="hosts[].address",
            fix="write the host's IPv4 or IPv6 address (fd00::5) or its DNS name (gpu-a.lan)",
        ) from None
    # Written as the fleet file spells it: the scrape target and the rules must name it alike.
    return f"[{bare}]" if parsed.version == 6 else bare


def instance_label(address: str, port: int | None) -> str:
    """``ADDRESS:PORT`` as Prometheus writes a static target's ``instance`` label (``[fd00::5]:8000``)."""
    return f"{url_host(address)}:{DEFAULT_PORT if port is None else port}"


def base_url(address: str, port: int | None) -> str:
    return f"http://{instance_label(address, port)}"


def health_url(address: str, port: int | None) -> str:
    """vLLM's ``GET /health`` (200 once the engine serves)."""
    return f"{base_url(address, port)}/health"
