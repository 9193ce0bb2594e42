"""Compare what the engines and the gateway showed with what the plan expects (pure: no I/O).

Each comparison becomes one :class:`Check` row ``{seat, check, expected, seen, ok}``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from seatplan import versions
from seatplan.exposition import Sample
from seatplan.numeric_options import MAX_DEVICE_MEMORY_BYTES
from seatplan.output import clipped
from seatplan.secrets import scrub
from seatplan.units import whole_number
from seatplan.verify.expect import SeatExpectation
from seatplan.verify.models import Check, Value

GATEWAY = "gateway"
LABEL_SHOWN_CHARS = 40


@dataclass
class CapProbe:
    """One tiny request (one generated token) and the ``max_tokens`` vLLM gave it, read from the
    ``vllm:request_params_max_tokens`` histogram before and after."""

    requested_max_tokens: int | None
    prompt_tokens: int | None = None
    effective_max_tokens: int | None = None
    problem: str | None = None


@dataclass
class EngineObservation:
    unreachable: str | None = None
    version: str | None = None
    served_max_model_len: dict[str, int] = field(default_factory=dict)
    models_problem: str | None = None
    cache_labels: dict[str, str] | None = None
    metrics_problem: str | None = None
    completion_tokens: int | None = None
    completion_problem: str | None = None
    cap_default: CapProbe | None = None
    cap_ceiling: CapProbe | None = None


@dataclass
class GatewayObservation:
    listed: list[str] | None = None
    list_problem: str | None = None
    completion_tokens: dict[str, int] = field(default_factory=dict)
    completion_problems: dict[str, str] = field(default_factory=dict)


# The label vLLM adds to tell the engines (data-parallel ranks) of one server apart: vllm/v1/metrics/loggers.py
# (0.32.0) ``log_metrics_info`` sets ``metrics_info["engine"] = str(engine_index)`` for each engine, the rest of
# the labels are the one cache config's ``metrics_info()``.
ENGINE_LABEL = "engine"


def cache_config_labels(samples: list[Sample]) -> dict[str, str] | None:
    """The labels of ``vllm:cache_config_info``, or None when the gauge is absent.

    Every engine of a server reports the same cache config (only the ``engine`` label differs); two samples that
    disagree on anything else are no figure to check against, and raise ValueError naming the first label."""
    found = [sample.labels for sample in samples if sample.name == "vllm:cache_config_info"]
    if not found:
        return None
    first = {key: value for key, value in found[0].items() if key != ENGINE_LABEL}
    for labels in found[1:]:
        other = {key: value for key, value in labels.items() if key != ENGINE_LABEL}
        if other != first:
            differing = sorted(key for key in first.keys() | other.keys() if first.get(key) != other.get(key))
            shown = [clipped(str(labels.get(differing[0])), LABEL_SHOWN_CHARS) for labels in (first, other)]
            raise ValueError(f"two vllm:cache_config_info samples disagree on {differing[0]} ({shown[0]} and {shown[1]})")
    return found[0]


def sample_total(samples: list[Sample], name: str, model_name: str) -> float:
    """The sum of one metric over the engines (data-parallel ranks) serving ``model_name``."""
    return sum(sample.value for sample in samples if sample.name == name and sample.labels.get("model_name") == model_name)


def version_matches(planned: str, running: str | None) -> bool:
    """``0.32`` is matched by ``0.32.0`` and ``0.32.1``; ``0.10.2`` only by ``0.10.2`` (and its builds)."""
    want = versions.try_release(planned)
    seen = versions.try_release(running)
    return bool(want and seen and seen[: len(want)] == want)


def _check(seat: str, name: str, expected: Value, seen: Value, ok: bool | None = None) -> Check:
    return Check(seat=seat, check=name, expected=expected, seen=seen, ok=(expected == seen) if ok is None else ok)


def engine_checks(expectation: SeatExpectation, planned_version: str, seen: EngineObservation) -> list[Check]:
    seat = expectation.seat
    if seen.unreachable is not None:
        return [_check(seat, "reachable", expectation.base_url, seen.unreachable, ok=False)]
    running = versions.try_release(seen.version) or versions.release(planned_version)
    checks = [_check(seat, "version", planned_version, seen.version, ok=version_matches(planned_version, seen.version))]
    checks.append(_max_model_len_check(expectation, seen))
    checks += _kv_checks(expectation, seen, running)
    checks.append(_completion_check(seat, seen.completion_tokens, seen.completion_problem))
    checks += _cap_checks(expectation, seen, running)
    return checks


def _max_model_len_check(expectation: SeatExpectation, seen: EngineObservation) -> Check:
    name = expectation.served_model_name
    if name in seen.served_max_model_len:
        return _check(expectation.seat, "max_model_len", expectation.max_model_len, seen.served_max_model_len[name])
    observed = seen.models_problem or f"{name} not served (serves: {', '.join(sorted(seen.served_max_model_len)) or 'nothing'})"
    return _check(expectation.seat, "max_model_len", expectation.max_model_len, observed, ok=False)


# The largest figure a cache_config_info label may give: the KV bytes of the largest device there is, and at most one
# block per KiB of it (a block holds at least a layer's K and V for one token).
LABEL_MAXIMUM = {"kv_cache_memory_bytes": MAX_DEVICE_MEMORY_BYTES, "num_gpu_blocks": MAX_DEVICE_MEMORY_BYTES >> 10}


def _label_int(labels: dict[str, str], key: str) -> int | str:
    """A whole-number label (``num_gpu_blocks="1234"``; older vLLM wrote ``1234.0``), else what is wrong with it."""
    value = labels.get(key)
    if value in (None, "None"):
        return f"no {key} label"
    number = whole_number(value, maximum=LABEL_MAXIMUM.get(key, MAX_DEVICE_MEMORY_BYTES), point_zero=True)
    if number is None:
        return (f"{key} label '{clipped(str(value), LABEL_SHOWN_CHARS)}' is not a whole number in ASCII digits "
                f"from 0 to {LABEL_MAXIMUM.get(key, MAX_DEVICE_MEMORY_BYTES):,}")
    return number


def _kv_checks(expectation: SeatExpectation, seen: EngineObservation, running: versions.Version) -> list[Check]:
    seat = expectation.seat
    labels = seen.cache_labels
    if labels is None:
        return [_check(seat, "num_gpu_blocks", expectation.kv.num_gpu_blocks if expectation.kv else None,
                       seen.metrics_problem or "no vllm:cache_config_info in /metrics", ok=False)]
    checks: list[Check] = []
    if expectation.kv is None:
        checks.append(_check(seat, "num_gpu_blocks", f"no prediction: {expectation.kv_problem}",
                             _label_int(labels, "num_gpu_blocks"), ok=False))
    else:
        checks.append(_check(seat, "block_size", expectation.kv.block_size, _label_int(labels, "block_size")))
        checks.append(_check(seat, "num_gpu_blocks", expectation.kv.num_gpu_blocks, _label_int(labels, "num_gpu_blocks")))
        if versions.has("metric_kv_cache_size_labels", running):
            checks.append(_check(seat, "kv_cache_size_tokens", expectation.kv.kv_cache_size_tokens,
                                 _label_int(labels, "kv_cache_size_tokens")))
    if versions.has("metric_kv_cache_memory_bytes_label", running):
        checks.append(_check(seat, "kv_cache_memory_bytes", expectation.kv_cache_memory_bytes,
                             _label_int(labels, "kv_cache_memory_bytes")))
    return checks


def _completion_check(seat: str, tokens: int | None, problem: str | None, name: str = "completion") -> Check:
    if tokens is not None and tokens >= 1:
        return _check(seat, name, "a reply", f"{tokens} tokens", ok=True)
    return _check(seat, name, "a reply", problem or "no tokens", ok=False)


def default_cap_expected(cap: int, max_model_len: int, prompt_tokens: int) -> int:
    """``max_tokens`` vLLM gives a request that sends none: the cap, or what is left of the context."""
    return min(cap, max_model_len - prompt_tokens)


def ceiling_request(cap: int, max_model_len: int, prompt_tokens: int) -> int | None:
    """The explicit ``max_tokens`` that tests the ceiling (one above the cap), None when the context ends first."""
    asked = cap + 1
    return asked if asked <= max_model_len - prompt_tokens else None


def ceiling_expected(cap: int, asked: int, running: versions.Version) -> int:
    return cap if versions.has("override_cap_is_ceiling", running) else asked


def _cap_checks(expectation: SeatExpectation, seen: EngineObservation, running: versions.Version) -> list[Check]:
    seat, cap, length = expectation.seat, expectation.max_new_tokens, expectation.max_model_len
    if cap is None or length is None:
        return []
    checks = []
    for name, probe in (("output_cap_default", seen.cap_default), ("output_cap_ceiling", seen.cap_ceiling)):
        if probe is None:
            continue
        if probe.problem is not None or probe.effective_max_tokens is None or probe.prompt_tokens is None:
            checks.append(_check(seat, name, cap, probe.problem or "not measured", ok=False))
        elif probe.requested_max_tokens is None:
            checks.append(_check(seat, name, default_cap_expected(cap, length, probe.prompt_tokens), probe.effective_max_tokens))
        else:
            checks.append(_check(seat, name, ceiling_expected(cap, probe.requested_max_tokens, running), probe.effective_max_tokens))
    return checks


def gateway_checks(expectations: list[SeatExpectation], seen: GatewayObservation) -> list[Check]:
    checks: list[Check] = []
    for expectation in expectations:
        name = expectation.served_model_name
        if seen.listed is None:
            listed: Value = seen.list_problem or "no model list"
        else:
            listed = name if name in seen.listed else f"not listed (lists: {', '.join(seen.listed) or 'nothing'})"
        checks.append(_check(expectation.seat, "gateway_lists", name, listed))
        checks.append(_completion_check(expectation.seat, seen.completion_tokens.get(name),
                                        seen.completion_problems.get(name), name="gateway_completion"))
    return checks


def redact(checks: list[Check], secrets: list[str]) -> list[Check]:
    """Every text the checks carry with the secrets masked (an error body may echo a key back)."""
    secrets = [secret for secret in secrets if secret]

    def clean(value: Value) -> Value:
        return scrub(value, *secrets) if isinstance(value, str) else value

    return [check.model_copy(update={"expected": clean(check.expected), "seen": clean(check.seen)}) for check in checks]
