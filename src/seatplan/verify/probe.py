"""The only part of verify that talks HTTP: a bounded number of small requests per engine and gateway.

Per engine: ``/version``, ``/v1/models``, ``/metrics`` (three times), one short completion and two
one-token requests that measure the output cap. Through the gateway: ``/v1/models`` and one short
completion per served name. Nothing retries except the cap probe, which repeats (a few times at most) when
other traffic finished between its two ``/metrics`` reads.

Every request is bounded in everything a server controls:

- time: one deadline per request covers connecting, the status line and headers (a server that drips header
  bytes, or sends ``102 Processing`` forever, which httpcore skips one after another) and the body; httpx's own
  timeouts restart with every byte, so the deadline lives in the network layer (:class:`_DeadlineBackend`);
- size: an answer longer than ``MAX_ANSWER_BYTES`` is dropped (h11 already refuses headers over 64 KiB);
- shape: JSON is read with bounded depth and finite numbers only (``jsontext.loads_bounded``), counts must be
  whole numbers within ``MAX_COUNT``, histogram sums finite;
- what is kept: texts are cut to ``SHOWN_CHARS`` (a 7 MB version string) and scrubbed of the secrets in play
  before the cut, so a cut cannot leave part of a key behind.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import httpcore
import httpx

from seatplan.exposition import parse_exposition
from seatplan.jsontext import loads_bounded
from seatplan.output import clipped
from seatplan.secrets import scrub
from seatplan.verify.checks import (
    CapProbe,
    EngineObservation,
    GatewayObservation,
    cache_config_labels,
    ceiling_request,
    sample_total,
)
from seatplan.verify.expect import SeatExpectation

REPLY_MAX_TOKENS = 4
PROMPT = "Say hello."
MAX_TOKENS_METRIC = "vllm:request_params_max_tokens"
CAP_PROBE_ATTEMPTS = 3
# The cap probes force their first token and stop on it: one generated token, whatever the cap.
PROBE_TOKEN_ID = 0
# What verify keeps of a server's text (an error body, a version): enough to read, never a flood.
SHOWN_CHARS = 300
# The largest answer verify reads: a /metrics page of a busy engine is a few hundred KiB.
MAX_ANSWER_BYTES = 8 << 20
T = TypeVar("T")
# The largest count an engine may report (tokens, blocks, lengths): beyond it the answer is damage.
MAX_COUNT = 2**53


@dataclass(frozen=True)
class ProbeSettings:
    timeout_s: float = 30.0
    # Scrubbed from every text kept from an answer (the gateway key: a gateway may quote it back).
    secrets: tuple[str, ...] = ()


class _Deadline:
    """The instant the current request must be done by (None between requests)."""

    def __init__(self, limit_s: float) -> None:
        self.at: float | None = None
        self.limit_s = limit_s

    def run(self, step: Callable[[float | None], T], timeout_s: float | None, error: type[Exception]) -> T:
        """``step(timeout)`` given no more time than is left; ``error`` saying so once the deadline has passed."""
        if self.at is None:
            return step(timeout_s)
        remaining_s = self.at - time.monotonic()
        if remaining_s > 0:
            try:
                return step(remaining_s if timeout_s is None else min(timeout_s, remaining_s))
            except httpcore.TimeoutException:
                if time.monotonic() < self.at:
                    raise
        raise error(f"no complete answer within {self.limit_s:g} s")


class _DeadlineStream(httpcore.NetworkStream):
    """A socket whose every read and write waits no later than the request's deadline."""

    def __init__(self, stream: httpcore.NetworkStream, deadline: _Deadline) -> None:
        self._stream, self._deadline = stream, deadline

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return self._deadline.run(lambda left_s: self._stream.read(max_bytes, left_s), timeout, httpcore.ReadTimeout)

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self._deadline.run(lambda left_s: self._stream.write(buffer, left_s), timeout, httpcore.WriteTimeout)

    def close(self) -> None:
        self._stream.close()

    def start_tls(self, ssl_context: Any, server_hostname: str | None = None, timeout: float | None = None) -> httpcore.NetworkStream:
        secured = self._deadline.run(lambda left_s: self._stream.start_tls(ssl_context, server_hostname, left_s), timeout, httpcore.ConnectTimeout)
        return _DeadlineStream(secured, self._deadline)

    def get_extra_info(self, info: str) -> Any:
        return self._stream.get_extra_info(info)


class _DeadlineBackend(httpcore.NetworkBackend):
    def __init__(self, deadline: _Deadline) -> None:
        self._backend, self._deadline = httpcore.SyncBackend(), deadline

    def connect_tcp(self, host: str, port: int, timeout: float | None = None, local_address: str | None = None,
                    socket_options: Any = None) -> httpcore.NetworkStream:
        stream = self._deadline.run(lambda left_s: self._backend.connect_tcp(host, port, left_s, local_address, socket_options),
                                    timeout, httpcore.ConnectTimeout)
        return _DeadlineStream(stream, self._deadline)

    def connect_unix_socket(self, path: str, timeout: float | None = None, socket_options: Any = None) -> httpcore.NetworkStream:
        stream = self._deadline.run(lambda left_s: self._backend.connect_unix_socket(path, left_s, socket_options), timeout, httpcore.ConnectTimeout)
        return _DeadlineStream(stream, self._deadline)

    def sleep(self, seconds: float) -> None:
        self._backend.sleep(seconds)


class BoundedClient:
    """An httpx client whose every request has one deadline, a size cap and no proxy from the environment."""

    def __init__(self, base_url: str, settings: ProbeSettings, headers: dict[str, str] | None = None) -> None:
        self.deadline = _Deadline(settings.timeout_s)
        self.secrets = settings.secrets
        transport = httpx.HTTPTransport()
        # httpx offers no per-request deadline and no way to hand its transport a network backend: the pool is
        # rebuilt around one (httpx 0.28 keeps it in ``_pool``; the settings are httpx's defaults).
        transport._pool = httpcore.ConnectionPool(network_backend=_DeadlineBackend(self.deadline))
        self.client = httpx.Client(base_url=base_url, headers={**(headers or {}), "Accept-Encoding": "identity"},
                                   timeout=settings.timeout_s, transport=transport, trust_env=False)

    def __enter__(self) -> BoundedClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.client.close()

    def fetch(self, method: str, path: str, **request: Any) -> httpx.Response:
        """One request, done within the deadline, and no more than MAX_ANSWER_BYTES of its answer."""
        self.deadline.at = time.monotonic() + self.deadline.limit_s
        body = bytearray()
        try:
            with self.client.stream(method, path, **request) as response:
                for chunk in response.iter_raw():
                    body += chunk
                    if len(body) > MAX_ANSWER_BYTES:
                        raise ValueError(f"{path} answered more than {MAX_ANSWER_BYTES:,} bytes")
        finally:
            self.deadline.at = None
        return httpx.Response(response.status_code, headers={"content-type": response.headers.get("content-type", "")},
                              content=bytes(body), request=response.request)

    def json(self, method: str, path: str, **request: Any) -> Any:
        """The JSON answer of a request that must succeed (2xx), read with bounded depth and finite numbers."""
        return loads_bounded(self.fetch(method, path, **request).raise_for_status().content)

    def problem(self, error: Exception) -> str:
        """What went wrong, as verify shows it: scrubbed of the secrets, then cut to SHOWN_CHARS."""
        if isinstance(error, httpx.HTTPStatusError):
            text = f"HTTP {error.response.status_code} from {error.request.url.path}: {_body_text(error.response)}"
        elif isinstance(error, httpx.HTTPError):
            text = f"{type(error).__name__}: {error}"
        else:
            text = f"unexpected answer ({type(error).__name__}: {error})"
        return self.shown(text)

    def shown(self, text: str) -> str:
        """``text`` as verify keeps it: the secrets hidden first, in a window wide enough that a key straddling
        the cut is hidden whole (a cut must not leave part of one), then cut to SHOWN_CHARS."""
        window = SHOWN_CHARS + 8 * max((len(secret) for secret in self.secrets), default=0)
        return clipped(scrub(text[:window], *self.secrets), SHOWN_CHARS, cut_before_chars=max(len(text) - window, 0))


# The most of an answer's body decoded for a message or a test of its wording (what is shown is far less).
BODY_TEXT_BYTES = 64 << 10


def _body_text(response: httpx.Response) -> str:
    return response.content[:BODY_TEXT_BYTES].decode("utf-8", errors="replace")


def count(value: Any, what: str) -> int:
    """A count an engine reports (tokens, lengths): a whole JSON number from 0 to MAX_COUNT, else ValueError."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value:
        raise ValueError(f"{what} is not a number")
    if isinstance(value, float) and not value.is_integer():
        raise ValueError(f"{what} {value:g} is not a whole number")
    if not 0 <= value <= MAX_COUNT:
        raise ValueError(f"{what} is outside 0 to {MAX_COUNT:,}")
    return int(value)


def text_field(value: Any, what: str) -> str:
    if not isinstance(value, str):
        raise ValueError(f"{what} is not a string")
    return value


_ANSWER_ERRORS = (httpx.HTTPError, ValueError, KeyError, TypeError, IndexError)


class Endpoint:
    """An OpenAI-style server (a vLLM engine or the gateway) with chat, falling back to text completions."""

    def __init__(self, client: BoundedClient) -> None:
        self.client = client
        self.chat = True

    def complete(self, model: str, extra: dict) -> dict:
        body = {"model": model, "temperature": 0, **extra}
        if self.chat:
            reply = self.client.fetch("POST", "/v1/chat/completions", json={**body, "messages": [{"role": "user", "content": PROMPT}]})
            if reply.status_code != 400 or "chat template" not in _body_text(reply).lower():
                return _object(loads_bounded(reply.raise_for_status().content))
            self.chat = False  # a model without a chat template still answers text completions
        return _object(self.client.json("POST", "/v1/completions", json={**body, "prompt": PROMPT}))


def _object(document: Any) -> dict:
    if not isinstance(document, dict):
        raise ValueError("the answer is no JSON object")
    return document


def _usage(reply: dict, field: str) -> int:
    return count(_object(reply["usage"])[field], f"usage.{field}")


def _model_cards(client: BoundedClient) -> list[dict]:
    cards = _object(client.json("GET", "/v1/models"))["data"]
    if not isinstance(cards, list):
        raise ValueError("/v1/models data is no list")
    return [_object(card) for card in cards]


def observe_engine(expectation: SeatExpectation, settings: ProbeSettings) -> EngineObservation:
    seen = EngineObservation()
    try:
        opened = BoundedClient(expectation.base_url, settings)
    except httpx.InvalidURL as error:  # an address from the fleet file that is no host
        seen.unreachable = clipped(f"InvalidURL: {error}", SHOWN_CHARS)
        return seen
    with opened as client:
        try:
            seen.version = client.shown(text_field(_object(client.json("GET", "/version"))["version"], "version"))
        except httpx.TransportError as error:
            seen.unreachable = client.problem(error)
            return seen
        except _ANSWER_ERRORS as error:
            seen.version = client.problem(error)
        try:
            seen.served_max_model_len = {client.shown(text_field(card["id"], "id")): count(card["max_model_len"], "max_model_len")
                                         for card in _model_cards(client)}
        except _ANSWER_ERRORS as error:
            seen.models_problem = client.problem(error)
        try:
            seen.cache_labels = cache_config_labels(_metrics(client))
        except _ANSWER_ERRORS as error:
            seen.metrics_problem = client.problem(error)
        endpoint = Endpoint(client)
        try:
            seen.completion_tokens = _usage(endpoint.complete(expectation.served_model_name, {"max_tokens": REPLY_MAX_TOKENS}), "completion_tokens")
        except _ANSWER_ERRORS as error:
            seen.completion_problem = client.problem(error)
        if expectation.max_new_tokens is not None and expectation.max_model_len is not None:
            seen.cap_default = cap_probe(endpoint, expectation.served_model_name, None)
            if seen.cap_default.prompt_tokens is not None:
                asked = ceiling_request(expectation.max_new_tokens, expectation.max_model_len, seen.cap_default.prompt_tokens)
                if asked is not None:
                    seen.cap_ceiling = cap_probe(endpoint, expectation.served_model_name, asked)
    return seen


def _metrics(client: BoundedClient) -> list:
    return parse_exposition(client.fetch("GET", "/metrics").raise_for_status().text.splitlines())


def cap_probe(endpoint: Endpoint, model: str, max_tokens: int | None) -> CapProbe:
    """The ``max_tokens`` vLLM gives one request (``None``: the request sends none), read as the step of the
    ``vllm:request_params_max_tokens`` histogram's sum while its count steps by exactly one."""
    probe = CapProbe(requested_max_tokens=max_tokens)
    extra: dict = {"logit_bias": {str(PROBE_TOKEN_ID): 100}, "stop_token_ids": [PROBE_TOKEN_ID]}
    if max_tokens is not None:
        extra["max_tokens"] = max_tokens
    try:
        for _ in range(CAP_PROBE_ATTEMPTS):
            count_before, sum_before = _max_tokens_totals(endpoint.client, model)
            reply = endpoint.complete(model, extra)
            probe.prompt_tokens = _usage(reply, "prompt_tokens")
            count_after, sum_after = _max_tokens_totals(endpoint.client, model)
            if count_after - count_before == 1:
                probe.effective_max_tokens = count(round(sum_after - sum_before), f"the step of {MAX_TOKENS_METRIC}_sum")
                return probe
        probe.problem = f"other requests finished during each of {CAP_PROBE_ATTEMPTS} tries; rerun when the engine is quieter"
    except _ANSWER_ERRORS as error:
        probe.problem = endpoint.client.problem(error)
    return probe


def _max_tokens_totals(client: BoundedClient, model: str) -> tuple[float, float]:
    samples = _metrics(client)
    total_count = sample_total(samples, f"{MAX_TOKENS_METRIC}_count", model)
    total = sample_total(samples, f"{MAX_TOKENS_METRIC}_sum", model)
    if total_count == 0 and not any(sample.name == f"{MAX_TOKENS_METRIC}_count" for sample in samples):
        raise ValueError(f"/metrics has no {MAX_TOKENS_METRIC} histogram")
    if not (math.isfinite(total_count) and math.isfinite(total)):
        raise ValueError(f"/metrics gives {MAX_TOKENS_METRIC} a count or sum that is not a finite number")
    return total_count, total


def observe_gateway(url: str, key: str | None, served_names: list[str], settings: ProbeSettings) -> GatewayObservation:
    seen = GatewayObservation()
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    with BoundedClient(url.rstrip("/"), settings, headers) as client:
        try:
            seen.listed = [client.shown(text_field(card["id"], "id")) for card in _model_cards(client)]
        except _ANSWER_ERRORS as error:
            seen.list_problem = client.problem(error)
        endpoint = Endpoint(client)
        for name in served_names:
            try:
                seen.completion_tokens[name] = _usage(endpoint.complete(name, {"max_tokens": REPLY_MAX_TOKENS}), "completion_tokens")
            except _ANSWER_ERRORS as error:
                seen.completion_problems[name] = client.problem(error)
    return seen
