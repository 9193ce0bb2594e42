"""The only part of verify that talks HTTP: a bounded number of small requests per engine and gateway.

Per engine: ``/version``, ``/v1/models``, ``/metrics`` (three times), one short completion and two
one-token requests that measure the output cap. Through the gateway: ``/v1/models`` and one short
completion per served name. Every request has a timeout, on the whole answer and not only between bytes
(a server trickling an endless body cannot hold verify), and an answer longer than ``MAX_ANSWER_BYTES`` is
dropped; nothing retries except the cap probe, which repeats (a few times at most) when other traffic
finished between its two ``/metrics`` reads.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import httpx

from seatplan.exposition import parse_exposition
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
ERROR_TEXT_CHARS = 300
# The largest answer verify reads: a /metrics page of a busy engine is a few hundred KiB.
MAX_ANSWER_BYTES = 8 << 20


@dataclass(frozen=True)
class ProbeSettings:
    timeout_s: float = 30.0


def _problem(error: Exception) -> str:
    if isinstance(error, httpx.HTTPStatusError):
        return f"HTTP {error.response.status_code} from {error.request.url.path}: {error.response.text[:ERROR_TEXT_CHARS]}"
    if isinstance(error, httpx.HTTPError):
        return f"{type(error).__name__}: {error}"[:ERROR_TEXT_CHARS]
    return f"unexpected answer ({type(error).__name__}: {error})"[:ERROR_TEXT_CHARS]


_ANSWER_ERRORS = (httpx.HTTPError, ValueError, KeyError, TypeError)


def fetch(client: httpx.Client, method: str, path: str, **request: object) -> httpx.Response:
    """One request, given the client's read timeout for the whole answer, and no more than MAX_ANSWER_BYTES of it."""
    limit_s = client.timeout.read or 30.0
    deadline = time.monotonic() + limit_s
    body = bytearray()
    with client.stream(method, path, **request) as response:  # type: ignore[arg-type]
        for chunk in response.iter_bytes():
            body += chunk
            if len(body) > MAX_ANSWER_BYTES:
                raise ValueError(f"{path} answered more than {MAX_ANSWER_BYTES:,} bytes")
            if time.monotonic() > deadline:
                raise httpx.ReadTimeout(f"{path} did not finish its answer within {limit_s:g} s", request=response.request)
    return httpx.Response(response.status_code, content=bytes(body), request=response.request)


class Endpoint:
    """An OpenAI-style server (a vLLM engine or the gateway) with chat, falling back to text completions."""

    def __init__(self, client: httpx.Client) -> None:
        self.client = client
        self.chat = True

    def complete(self, model: str, extra: dict) -> dict:
        body = {"model": model, "temperature": 0, **extra}
        if self.chat:
            reply = fetch(self.client, "POST", "/v1/chat/completions", json={**body, "messages": [{"role": "user", "content": PROMPT}]})
            if reply.status_code != 400 or "chat template" not in reply.text.lower():
                return reply.raise_for_status().json()
            self.chat = False  # a model without a chat template still answers text completions
        return fetch(self.client, "POST", "/v1/completions", json={**body, "prompt": PROMPT}).raise_for_status().json()


def observe_engine(expectation: SeatExpectation, settings: ProbeSettings) -> EngineObservation:
    seen = EngineObservation()
    with httpx.Client(base_url=expectation.base_url, timeout=settings.timeout_s, trust_env=False) as client:
        try:
            seen.version = str(fetch(client, "GET", "/version").raise_for_status().json()["version"])
        except httpx.TransportError as error:
            seen.unreachable = _problem(error)
            return seen
        except _ANSWER_ERRORS as error:
            seen.version = _problem(error)
        try:
            cards = fetch(client, "GET", "/v1/models").raise_for_status().json()["data"]
            seen.served_max_model_len = {str(card["id"]): int(card["max_model_len"]) for card in cards}
        except _ANSWER_ERRORS as error:
            seen.models_problem = _problem(error)
        try:
            seen.cache_labels = cache_config_labels(parse_exposition(fetch(client, "GET", "/metrics").raise_for_status().text.splitlines()))
        except _ANSWER_ERRORS as error:
            seen.metrics_problem = _problem(error)
        endpoint = Endpoint(client)
        try:
            reply = endpoint.complete(expectation.served_model_name, {"max_tokens": REPLY_MAX_TOKENS})
            seen.completion_tokens = int(reply["usage"]["completion_tokens"])
        except _ANSWER_ERRORS as error:
            seen.completion_problem = _problem(error)
        if expectation.max_new_tokens is not None and expectation.max_model_len is not None:
            seen.cap_default = cap_probe(endpoint, expectation.served_model_name, None)
            if seen.cap_default.prompt_tokens is not None:
                asked = ceiling_request(expectation.max_new_tokens, expectation.max_model_len, seen.cap_default.prompt_tokens)
                if asked is not None:
                    seen.cap_ceiling = cap_probe(endpoint, expectation.served_model_name, asked)
    return seen


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
            probe.prompt_tokens = int(reply["usage"]["prompt_tokens"])
            count_after, sum_after = _max_tokens_totals(endpoint.client, model)
            if count_after - count_before == 1:
                probe.effective_max_tokens = round(sum_after - sum_before)
                return probe
        probe.problem = f"other requests finished during each of {CAP_PROBE_ATTEMPTS} tries; rerun when the engine is quieter"
    except _ANSWER_ERRORS as error:
        probe.problem = _problem(error)
    return probe


def _max_tokens_totals(client: httpx.Client, model: str) -> tuple[float, float]:
    samples = parse_exposition(fetch(client, "GET", "/metrics").raise_for_status().text.splitlines())
    count = sample_total(samples, f"{MAX_TOKENS_METRIC}_count", model)
    total = sample_total(samples, f"{MAX_TOKENS_METRIC}_sum", model)
    if count == 0 and not any(sample.name == f"{MAX_TOKENS_METRIC}_count" for sample in samples):
        raise ValueError(f"/metrics has no {MAX_TOKENS_METRIC} histogram")
    return count, total


def observe_gateway(url: str, key: str | None, served_names: list[str], settings: ProbeSettings) -> GatewayObservation:
    seen = GatewayObservation()
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    with httpx.Client(base_url=url.rstrip("/"), headers=headers, timeout=settings.timeout_s, trust_env=False) as client:
        try:
            seen.listed = [str(card["id"]) for card in fetch(client, "GET", "/v1/models").raise_for_status().json()["data"]]
        except _ANSWER_ERRORS as error:
            seen.list_problem = _problem(error)
        endpoint = Endpoint(client)
        for name in served_names:
            try:
                reply = endpoint.complete(name, {"max_tokens": REPLY_MAX_TOKENS})
                seen.completion_tokens[name] = int(reply["usage"]["completion_tokens"])
            except _ANSWER_ERRORS as error:
                seen.completion_problems[name] = _problem(error)
    return seen
