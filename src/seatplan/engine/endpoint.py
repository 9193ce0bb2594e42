"""Where an engine answers: its base URL, its health URL and the ``ADDRESS:PORT`` a scrape target gets.

An IPv6 address goes in brackets in a URL and in Prometheus' ``instance`` label (RFC 3986 §3.2.2);
``http://fd00::5:8000`` is no URL. Addresses come from the fleet file, so anything that is neither an IP
address nor a host name is refused rather than pasted into a URL, a playbook or a rule.
"""

from __future__ import annotations

import ipaddress

from seatplan.encode import address_problem, kubernetes_name
from seatplan.errors import SeatplanError

# vLLM's own default for --port, what an engine started without it listens on (vLLM 0.32
# vllm/entrypoints/launchers/cli_args.py:285 `port: int = 8000`): the one place seatplan writes it
DEFAULT_PORT = 8000


def url_host(address: str) -> str:
    """The address as the host part of a URL: an IPv6 address bracketed, an IPv4 address or a name as is.

    What an address may be is ``encode.address_problem``'s rule, the one the fleet file is checked by."""
    bare = address[1:-1] if address.startswith("[") and address.endswith("]") else address
    problem = address_problem(bare)
    if problem is None and bare != address:
        problem = None if _is_ipv6(bare) else f"address {address!r}: only an IPv6 address goes in brackets"
    if problem is not None:
        raise SeatplanError(problem, where="hosts[].address",
                            fix="write the host's IPv4 or IPv6 address (fd00::5) or its DNS name (gpu-a.lan)")
    # Written as the fleet file spells it: the scrape target and the rules must name it alike.
    return f"[{bare}]" if _is_ipv6(bare) else bare


def _is_ipv6(address: str) -> bool:
    try:
        return ipaddress.ip_address(address).version == 6
    except ValueError:
        return False


def instance_label(address: str, port: int | None) -> str:
    """``ADDRESS:PORT`` as Prometheus writes a static target's ``instance`` label (``[fd00::5]:8000``)."""
    return f"{url_host(address)}:{DEFAULT_PORT if port is None else port}"


def service_address(seat: str, namespace: str) -> str:
    """The seat's Kubernetes Service as cluster DNS names it (render --target kubernetes makes it; verify --namespace asks it)."""
    return f"{kubernetes_name(seat)}.{namespace}.svc"


def base_url(address: str, port: int | None) -> str:
    return f"http://{instance_label(address, port)}"


def health_url(address: str, port: int | None) -> str:
    """vLLM's ``GET /health`` (200 once the engine serves)."""
    return f"{base_url(address, port)}/health"


WILDCARD_ADDRESSES = ("0.0.0.0", "::")


def listens_everywhere(bind_host: str | None) -> bool:
    """An engine without ``--host``, or bound to a wildcard address, answers on every interface."""
    return bind_host is None or bind_host.strip("[]") in WILDCARD_ADDRESSES


def local_address(address: str, bind_host: str | None) -> str:
    """Where the engine's own host reaches it: the address it is bound to, unless that is every interface."""
    return address if listens_everywhere(bind_host) else (bind_host or address).strip("[]")


def published_port(bind_host: str | None, port: int) -> str:
    """Compose's ``ports:`` entry: ``ADDR:PORT:PORT`` (IPv6 bracketed) when bound to one address, else ``PORT:PORT``."""
    if listens_everywhere(bind_host):
        return f"{port}:{port}"
    address = (bind_host or "").strip("[]")
    return f"[{address}]:{port}:{port}" if ":" in address else f"{address}:{port}:{port}"
