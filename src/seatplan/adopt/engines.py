"""The only part of adopt that talks HTTP: three small GETs per engine, bounded as verify bounds its probes.

``/v1/models`` (served names, the model as started, ``max_model_len``), ``/version`` and ``/metrics``
(``vllm:cache_config_info``). Each answer is read through ``seatplan.bounded_http`` (a deadline on the whole
answer and a size cap) and JSON with bounded depth; an engine that does not answer is a warning, not an error:
the files may still say what it runs. The engines are asked in parallel and the whole run ends by ``--timeout``
(:func:`probe_engines`): forty dead ``api_base``s take one timeout, not forty.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

import httpx2

from seatplan.adopt.evidence import EngineSeen
from seatplan.bounded_http import SHOWN_CHARS, BoundedClient
from seatplan.errors import SeatplanError
from seatplan.exposition import parse_exposition
from seatplan.secrets import without_credentials

MAX_CARDS = 64  # one engine serves one model (a few names at most)
MAX_PARALLEL = 64  # engines asked at once; more wait their turn, within the same overall deadline


def checked_base_url(url: str, where: str) -> str:
    """An engine's base URL: http(s), a host, no credentials, query or fragment; ``/v1`` and a trailing slash dropped."""
    shown = without_credentials(url)[:100]  # a user or password is never echoed
    try:
        parsed = httpx2.URL(url.strip())
    except (httpx2.InvalidURL, TypeError, ValueError):
        raise SeatplanError(f"{shown!r} is not a URL", where=where, fix="give the engine as http://HOST:PORT") from None
    if (parsed.scheme not in ("http", "https") or not parsed.host or parsed.userinfo or parsed.query or parsed.fragment
            or not 0 < (parsed.port or 80) < 65536):
        raise SeatplanError(f"{shown!r} is not an engine URL" + (" (it carries a user or password, which adopt never sends or shows)" if parsed.userinfo else ""), where=where,
                            fix="give the engine as http://HOST:PORT (no user, password, query or fragment)")
    path = parsed.path.rstrip("/").removesuffix("/v1")
    return str(parsed.copy_with(path=path or "/")).rstrip("/")


_ANSWER_ERRORS = (httpx2.HTTPError, ValueError, KeyError, TypeError, SeatplanError)


def _short(error: Exception) -> str:
    text = error.message if isinstance(error, SeatplanError) else f"{type(error).__name__}: {error}"
    return text[:SHOWN_CHARS]


def probe_engines(wanted: dict[str, str], timeout_s: float) -> list[EngineSeen]:
    """Every engine of ``wanted`` (base URL → where it was named) asked at once, each request within ``timeout_s``
    and the whole run too: a request still waiting when ``timeout_s`` has passed since the start is cut off."""
    until = time.monotonic() + timeout_s
    if not wanted:
        return []
    with ThreadPoolExecutor(max_workers=min(len(wanted), MAX_PARALLEL), thread_name_prefix="adopt-probe") as pool:
        return list(pool.map(lambda item: probe_engine(item[0], item[1], timeout_s, until), wanted.items()))


def probe_engine(base_url: str, source: str, timeout_s: float, until: float | None = None) -> EngineSeen:
    seen = EngineSeen(base_url=base_url, source=source)
    with BoundedClient(base_url, timeout_s, until=until) as client:
        try:
            document = client.json("GET", "/v1/models")
            cards = document["data"] if isinstance(document, dict) else None
            if not isinstance(cards, list):
                raise ValueError("/v1/models has no data list")
            seen.models = [card for card in cards[:MAX_CARDS] if isinstance(card, dict)]
            if len(cards) > MAX_CARDS:
                seen.problems.append(f"/v1/models lists {len(cards):,} models; adopt read the first {MAX_CARDS} "
                                     "(one engine serves one model under a few names)")
        except httpx2.TransportError as error:
            seen.problems.append(f"not reachable ({_short(error)})")
            return seen
        except _ANSWER_ERRORS as error:
            seen.problems.append(f"/v1/models: {_short(error)}")
        try:
            version = client.json("GET", "/version")
            seen.version = str(version["version"])[:40] if isinstance(version, dict) else None
        except _ANSWER_ERRORS as error:
            seen.problems.append(f"/version: {_short(error)}")
        try:
            text = client.fetch("GET", "/metrics").raise_for_status().text
            seen.cache_labels = next((sample.labels for sample in parse_exposition(text.splitlines()) if sample.name == "vllm:cache_config_info"), None)
        except _ANSWER_ERRORS as error:
            seen.problems.append(f"/metrics: {_short(error)}")
    return seen
