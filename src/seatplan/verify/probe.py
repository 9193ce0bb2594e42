"""The only part of verify that talks HTTP: a bounded number of small requests per engine and gateway.

Per engine: ``/version``, ``/v1/models``, ``/metrics`` (three times), one short completion and two
one-token requests that measure the output cap. Through the gateway: ``/v1/models`` and one short
completion per served name. Nothing retries except the cap probe, which repeats (a few times at most) when
other traffic finished between its two ``/metrics`` reads.

Every request is bounded in everything a server controls:

- time: one deadline per request covers connecting, the status line and headers (a server that drips header
  bytes, or sends ``102 Processing`` forever, which httpcore skips one after another) and the body; httpx's own
  timeouts restart with every byte, so the deadline lives in the network layer (``seatplan.bounded_http``, httpx2);
- size: an answer longer than ``MAX_ANSWER_BYTES`` is dropped (h11 already refuses headers over 64 KiB);
- shape: JSON is read with bounded depth and finite numbers only (``jsontext.loads_bounded``), counts must be
  whole numbers within ``MAX_COUNT``, histogram sums finite;
- what is kept: texts are cut to ``SHOWN_CHARS`` (a 7 MB version string) and scrubbed of the secrets in play
  before the cut, so a cut cannot leave part of a key behind.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import httpx2

from seatplan.bounded_http import SHOWN_CHARS, BoundedClient, body_text
from seatplan.exposition import parse_exposition
from seatplan.jsontext import loads_bounded
from seatplan.output import clipped
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
# The largest count an engine may report (tokens, blocks, lengths): beyond it the answer is damage.
MAX_COUNT = 2**53


@dataclass(frozen=True)
class ProbeSettings:
    timeout_s: float = 30.0
    # Scrubbed from every text kept from an answer (the gateway key: a gateway may quote it back).
    secrets: tuple[str, ...] = ()


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


_ANSWER_ERRORS = (httpx2.HTTPError, ValueError, KeyError, TypeError, IndexError)


class Endpoint:
    """An OpenAI-style server (a vLLM engine or the gateway) with chat, falling back to text completions."""

    def __init__(self, client: BoundedClient) -> None:
        self.client = client
        self.chat = True

    def complete(self, model: str, extra: dict) -> dict:
        body = {"model": model, "temperature": 0, **extra}
        if self.chat:
            reply = self.client.fetch("POST", "/v1/chat/completions", json={**body, "messages": [{"role": "user", "content": PROMPT}]})
            if reply.status_code != 400 or "chat template" not in body_text(reply).lower():
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
        opened = BoundedClient(expectation.base_url, settings.timeout_s, settings.secrets)
    except httpx2.InvalidURL as error:  # an address from the fleet file that is no host
        seen.unreachable = clipped(f"InvalidURL: {error}", SHOWN_CHARS)
        return seen
    with opened as client:
        try:
            seen.version = client.shown(text_field(_object(client.json("GET", "/version"))["version"], "version"))
        except httpx2.TransportError as error:
            seen.unreachable = client.problem(error)
            return seen
        except _ANSWER_ERRORS as error:
            seen.version = client.problem(error)
        try:
            seen.served_max_model_len = {_served_name(card): count(card["max_model_len"], "max_model_len")
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


def _served_name(card: Any) -> str:
    """A model card's id as served, only cut to SHOWN_CHARS (longer than any served name a fleet file takes):
    it is compared with the plan's names, so the secrets are masked later, in what verify prints
    (``checks.redact``); masked here, a name sharing 8 characters with the gateway key read as not served."""
    return clipped(text_field(card["id"], "id"), SHOWN_CHARS)


def observe_gateway(url: str, key: str | None, served_names: list[str], settings: ProbeSettings) -> GatewayObservation:
    seen = GatewayObservation()
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    with BoundedClient(url.rstrip("/"), settings.timeout_s, settings.secrets, headers) as client:
        try:
            seen.listed = [_served_name(card) for card in _model_cards(client)]
        except _ANSWER_ERRORS as error:
            seen.list_problem = client.problem(error)
        endpoint = Endpoint(client)
        for name in served_names:
            try:
                seen.completion_tokens[name] = _usage(endpoint.complete(name, {"max_tokens": REPLY_MAX_TOKENS}), "completion_tokens")
            except _ANSWER_ERRORS as error:
                seen.completion_problems[name] = client.problem(error)
    return seen
