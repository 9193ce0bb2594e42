"""The sizing rules: context length, KV bytes, output cap and the in-flight check, one seat at a time.

Pure functions on a seat, its model facts, the policy and (optionally) its usage. Each decision
comes back with the explanation lines that show the rule, its numbers and the result, so
``seatplan explain`` can say why, not just what.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Literal

from seatplan import versions
from seatplan.documents.fleet import KvPin, Policy, SeatSpec
from seatplan.documents.plan import ExplanationLine
from seatplan.documents.usage import ModelUsage
from seatplan.errors import SeatplanError
from seatplan.facts.models import KvCapacity, ModelFacts, YarnOption
from seatplan.units import human_bytes


@dataclass
class ContextChoice:
    max_model_len: int
    yarn: YarnOption | None  # set only when YaRN is switched on for this seat
    lines: list[ExplanationLine] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    raise_kv_bytes: int = 0  # ``published``: what one max-length request costs beyond vLLM's default length


@dataclass
class KvChoice:
    kv_cache_memory_bytes: int
    capacity: KvCapacity
    lines: list[ExplanationLine] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    rule_bytes: int = 0  # what the rule gives, pinned or not
    source: Literal["rule", "operator"] = "rule"  # who decided the bytes (Policy.kv_pin)
    pin: KvPin | None = None  # the decision itself, its rule and arithmetic (the levers read it)


@dataclass
class CapChoice:
    max_new_tokens: int | None
    lines: list[ExplanationLine] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


# ----------------------------------------------------------------------------- context


def choose_context(seat: SeatSpec, facts: ModelFacts) -> ContextChoice:
    """``max_model_len``: as declared, the model's default, or raised to its published maximum.

    Beyond the length vLLM derives from the config only YaRN reaches, and only where the seat
    allows it: static YaRN rescales every position, which costs quality on short prompts.
    """
    declared = seat.max_model_len
    if declared == "published":
        target, source = published_target(seat, facts)
    elif declared == "fit":
        target, source = fit_target(seat, facts)
    elif declared is None:
        target, source = facts.max_context_default, "vLLM's default for this model"
    else:
        target, source = declared, "declared"
    choice = _reach(seat, facts, target, source)
    if declared == "published":
        line, choice.raise_kv_bytes = _raise_cost(facts, choice.max_model_len, source)
        choice.lines.append(line)
    choice.lines.append(_yarn_line(seat, facts, choice))
    return choice


def published_target(seat: SeatSpec, facts: ModelFacts) -> tuple[int, str]:
    """The length ``published`` raises to: the model's published context, never below vLLM's default;
    the YaRN-extended length when the seat allows YaRN and the config does not already apply it."""
    yarn = facts.yarn
    if seat.allow_yarn and yarn is not None and not yarn.enabled and yarn.extended_max_model_len > facts.max_context_default:
        return yarn.extended_max_model_len, f"published maximum with YaRN ×{yarn.factor:g}"
    published = facts.max_context_published
    if published is None:
        return facts.max_context_default, "vLLM's default (no published figure)"
    if published < facts.max_context_default:
        return facts.max_context_default, f"vLLM's default {facts.max_context_default:,} (above the published native {published:,})"
    return published, "published maximum"


def fit_target(seat: SeatSpec, facts: ModelFacts) -> tuple[int, str]:
    """``max_model_len: fit``: the longest context the pinned KV holds (vLLM's own search, as ``--max-model-len
    auto`` would find at boot), at most the length ``published`` would raise to."""
    pinned = seat.kv_cache_memory_bytes
    if pinned is None:
        raise SeatplanError("max_model_len: fit sizes the context from a pinned KV cache, and this seat pins none",
                            where=f"seat {seat.name}: max_model_len", fix="add kv_cache_memory_bytes (e.g. 20GiB) or give max_model_len as a token count")
    upper, _ = published_target(seat, facts)
    longest = facts.max_model_len_fit(pinned, upper_len=upper)
    if longest < 1:
        raise SeatplanError(f"pinned KV {human_bytes(pinned)} holds no context at all for {seat.model}",
                            where=f"seat {seat.name}: kv_cache_memory_bytes",
                            fix=f"pin at least {human_bytes(facts.min_kv_cache_bytes(1))}")
    return longest, f"the longest context the pinned {human_bytes(pinned)} holds (of {upper:,})"


def _reach(seat: SeatSpec, facts: ModelFacts, target: int, source: str) -> ContextChoice:
    derived = facts.max_context_derived
    inputs = {"requested": target, "source": source, "derived_max_model_len": derived}
    if target <= derived:
        return ContextChoice(target, None, [ExplanationLine(rule="context", inputs=inputs, result=f"max_model_len {target:,}",
            note=f"{source}, within what vLLM derives from the config")])
    yarn = facts.yarn
    reachable = yarn is not None and target <= yarn.extended_max_model_len
    if reachable and seat.allow_yarn:
        assert yarn is not None  # reachable implies it
        needed = smallest_yarn(facts, yarn, target)
        return ContextChoice(
            target,
            needed,
            [ExplanationLine(rule="context", inputs=inputs | {"yarn_factor": needed.factor}, result=f"max_model_len {target:,} with YaRN ×{needed.factor:g}",
                note=f"{target:,} ({source}) is beyond the {derived:,} vLLM derives from the config; allow_yarn is set, so YaRN is "
                     f"switched on at the smallest factor that reaches it")],
        )
    if seat.max_model_len == "published":
        why = "allow_yarn is off" if reachable else "no YaRN option reaches it"
        return ContextChoice(
            derived,
            None,
            [ExplanationLine(rule="context", inputs=inputs, result=f"max_model_len {derived:,}",
                note=f"the published {target:,} needs YaRN and {why}; staying at the derived maximum")],
            [f"{seat.name}: published context {target:,} needs YaRN ({why}); planned at {derived:,}"],
        )
    fix = "set allow_yarn: true for this seat" if reachable else f"lower max_model_len to at most {derived:,}"
    raise SeatplanError(f"max_model_len {target:,} is beyond the {derived:,} vLLM derives for {seat.model}", where=f"seat {seat.name}", fix=fix)


YARN_FACTOR_STEP = 100  # factors in hundredths: 1.53, not 1.52587890625


def smallest_yarn(facts: ModelFacts, yarn: YarnOption, target: int) -> YarnOption:
    """YaRN at the smallest factor (in hundredths) whose length, original × factor, reaches ``target``: vLLM builds
    the rotary cache for ``max_position_embeddings * scaling_factor`` positions and interpolates every frequency
    below the fast band by the factor (vllm/model_executor/layers/rotary_embedding/yarn_scaling_rope.py,
    ``_compute_inv_freq``, ``_compute_cos_sin_cache``), so a larger factor than the length needs stretches short
    prompts further for nothing. Qwen's model cards say the same: set the factor the length needs (2.0 for 65,536
    from a native 32,768). A factor the model's own config applies is kept as it is."""
    if yarn.enabled:
        return yarn
    factor = math.ceil(target * YARN_FACTOR_STEP / yarn.original_max_position_embeddings) / YARN_FACTOR_STEP
    while int(yarn.original_max_position_embeddings * factor) < target:  # a float just under the length
        factor = round(factor + 1 / YARN_FACTOR_STEP, 2)
    factor = min(factor, yarn.factor)
    extended = int(yarn.original_max_position_embeddings * factor)
    return yarn.model_copy(update={"factor": factor, "extended_max_model_len": extended,
                                   "extended_request_kv_bytes": facts.request_kv_bytes(extended)})


def yarn_attention_scale(factor: float) -> float:
    """The scale YaRN puts on the rotary cos/sin (so on every attention logit) at ``factor``: vLLM's
    ``yarn_get_mscale`` (vllm/model_executor/layers/rotary_embedding/common.py), 0.1·ln(factor) + 1."""
    return 1.0 if factor <= 1 else 0.1 * math.log(factor) + 1.0


def _raise_cost(facts: ModelFacts, max_model_len: int, source: str) -> tuple[ExplanationLine, int]:
    """The KV one max-length request costs beyond vLLM's default length (0 when it costs none), and its line."""
    default, published = facts.max_context_default, facts.max_context_published
    before, after = facts.request_kv_bytes(default), facts.request_kv_bytes(max_model_len)
    if max_model_len != default:
        note = f"raising {default:,} → {max_model_len:,} tokens ({source})"
    elif published is None:
        note = f"the model publishes no context: vLLM's default, {default:,} tokens, stays; nothing to raise"
    elif published < default:
        note = f"vLLM's default, {default:,} tokens, is already above the published native {published:,}: nothing to raise"
    elif published > default:  # a published length the derived one cannot reach (it needs YaRN): the context line says why
        note = f"the published {published:,} is beyond reach here: vLLM's default, {default:,} tokens, stays; nothing raised"
    else:
        note = f"the published length is vLLM's default, {default:,} tokens: nothing to raise"
    return ExplanationLine(
        rule="published_raise",
        inputs={"default_max_model_len": default, "published_max_model_len": published, "max_model_len": max_model_len,
                "request_kv_bytes_default": before, "request_kv_bytes": after, "extra_request_kv_bytes": max(0, after - before)},
        result=f"+{human_bytes(after - before)} per max-length request" if after > before else "no extra KV per request",
        note=note,
    ), max(0, after - before)


def _yarn_line(seat: SeatSpec, facts: ModelFacts, choice: ContextChoice) -> ExplanationLine:
    yarn = choice.yarn or facts.yarn
    if yarn is None:
        return ExplanationLine(rule="yarn", inputs={"allow_yarn": seat.allow_yarn}, result="not applicable", note="the model has no YaRN extension option")
    if yarn.enabled:
        state, why = "on", " (the model's own config applies it)"
    elif choice.yarn is not None:
        state, why = "on", " (allowed and needed for this length)"
    elif not seat.allow_yarn:
        state, why = "off", " (allow_yarn is off; static YaRN hurts short prompts)"
    else:
        state, why = "off", " (not needed for this length)"
    return ExplanationLine(
        rule="yarn",
        inputs={
            "allow_yarn": seat.allow_yarn,
            "factor": yarn.factor,
            "original_max_position_embeddings": yarn.original_max_position_embeddings,
            "extended_max_model_len": yarn.extended_max_model_len,
            "extended_request_kv_bytes": yarn.extended_request_kv_bytes,
            "attention_scale": round(yarn_attention_scale(yarn.factor), 4),
        },
        result=f"YaRN {state}{why}" + (f", ×{yarn.factor:g}" if choice.yarn is not None and not yarn.enabled else ""),
        note=f"YaRN ×{yarn.factor:g} {'reaches' if choice.yarn is not None else 'would reach'} {yarn.extended_max_model_len:,} tokens from the native "
             f"{yarn.original_max_position_embeddings:,}; one such request needs {human_bytes(yarn.extended_request_kv_bytes)} of KV; the cost, on short "
             f"prompts too: the slow rotary frequencies interpolated ×{yarn.factor:g} and attention scaled by 0.1·ln({yarn.factor:g}) + 1 = "
             f"{yarn_attention_scale(yarn.factor):.3f}",
    )


def yarn_overrides(yarn: YarnOption, vllm_version: str) -> dict[str, object]:
    """The ``--hf-overrides`` that switch static YaRN on (``rope_parameters`` since vLLM 0.11.1)."""
    key = "rope_parameters" if versions.has("hf_overrides_rope_parameters", versions.release(vllm_version)) else "rope_scaling"
    return {key: {"rope_type": "yarn", "factor": yarn.factor, "original_max_position_embeddings": yarn.original_max_position_embeddings}}


# ----------------------------------------------------------------------------- KV bytes


def choose_kv_bytes(seat: SeatSpec, facts: ModelFacts, max_model_len: int, policy: Policy) -> KvChoice:
    """KV bytes as :meth:`Policy.kv_pin` decides them (one max-length request × factor, rounded up to the policy
    step; an operator pin wins), refused where vLLM would not start with them; its capacity at ``max_model_len``."""
    request_bytes = facts.request_kv_bytes(max_model_len)
    minimum_bytes = facts.min_kv_cache_bytes(max_model_len)
    pin = policy.kv_pin(seat, request_bytes, minimum_bytes)
    inputs = {
        "max_model_len": max_model_len,
        "request_kv_bytes": request_bytes,
        "min_kv_cache_bytes": minimum_bytes,
        "factor": pin.factor,
        "factor_source": pin.factor_source,
        "rounding_step_bytes": pin.rounding_step_bytes,
        "kv_cache_dtype": seat.kv_cache_dtype,
    }
    kv_bytes, rule_bytes = pin.kv_cache_memory_bytes, pin.rule_bytes
    lines: list[ExplanationLine] = []
    if pin.source == "operator":
        if not pin.holds_one_request:
            longest = facts.max_model_len_fit(kv_bytes, upper_len=max_model_len)
            shorter = (f"set max_model_len: {longest} (the longest context the pin holds; max_model_len: fit asks for it), or "
                       if longest > 0 else "")
            raise SeatplanError(
                f"pinned KV {human_bytes(kv_bytes)} ({kv_bytes:,} B) cannot hold one {max_model_len:,}-token request; vLLM needs at least {minimum_bytes:,} B",
                where=f"seat {seat.name}: kv_cache_memory_bytes",
                fix=f"{shorter}pin at least {human_bytes(minimum_bytes)}",
            )
        lines.append(
            ExplanationLine(
                rule="kv_bytes",
                inputs=inputs | {"pinned_bytes": kv_bytes, "rule_bytes": rule_bytes},
                result=f"{kv_bytes:,} B ({human_bytes(kv_bytes)}), operator pin",
                note=f"the pin, {kv_bytes / request_bytes:.2f}× one request of {request_bytes:,} B, wins over the rule, which would give "
                     f"{rule_bytes:,} B ({human_bytes(rule_bytes)}) = {rule_bytes / request_bytes:.2f}× one request"
                     + ("" if f"{rule_bytes / request_bytes:.2f}" == f"{pin.factor:.2f}"
                        else f" ({pin.factor:g}×, rounded up to {human_bytes(pin.rounding_step_bytes)})"),
            )
        )
    else:
        lines.append(ExplanationLine(rule="kv_bytes", inputs=inputs, result=f"{kv_bytes:,} B ({human_bytes(kv_bytes)})", note=pin.arithmetic()))
    capacity = facts.capacity(kv_bytes, max_model_len)
    lines.append(
        ExplanationLine(
            rule="kv_capacity",
            inputs={"kv_cache_memory_bytes": kv_bytes, "bytes_per_block": facts.bytes_per_block, "block_size": facts.block_size, "max_model_len": max_model_len},
            result=f"{capacity.num_blocks:,} blocks, {capacity.kv_cache_tokens:,} tokens, {capacity.max_concurrency:.2f}× concurrency at {max_model_len:,}",
            note=capacity.log_line,
        )
    )
    return KvChoice(kv_bytes, capacity, lines, rule_bytes=rule_bytes, source=pin.source, pin=pin)


# ----------------------------------------------------------------------------- output cap


def cap_step(tokens: float) -> int:
    """The next power-of-two-ish step at or above ``tokens``: 1024, 1536, 2048, 3072, 4096, ..."""
    target = max(1, math.ceil(tokens))
    power = 1 << max(0, (target - 1).bit_length() - 1)
    for candidate in (power, power + power // 2, power * 2):
        if candidate >= target:
            return candidate
    return power * 2


def propose_output_cap(completion_tokens: float, margin: float, max_model_len: int) -> int:
    """A cap from the completion tail: tail × margin, rounded up to a step, never above the context."""
    return min(cap_step(completion_tokens * margin), max_model_len)


def completion_tail(usage: ModelUsage) -> tuple[float, str] | None:
    """The highest completion percentile that is not a runaway reply (p99, else p90, else p50).

    With a few runaways among few calls the p99 (even the p90) *is* a runaway; sizing a cap from
    it would wave the runaways through.
    """
    runaway_floor = usage.runaway_threshold_tokens
    if runaway_floor is None and usage.runaways:
        runaway_floor = min(runaway.max_completion_tokens for runaway in usage.runaways)
    for label, value in (("p99", usage.completion_tokens_p99), ("p90", usage.completion_tokens_p90), ("p50", usage.completion_tokens_p50)):
        if value and (runaway_floor is None or value < runaway_floor):
            return value, label
    return None


def choose_output_cap(seat: SeatSpec, max_model_len: int, usage: ModelUsage | None, policy: Policy) -> CapChoice:
    """The declared cap wins; without one, usage data propose one from the completion tail."""
    choice = CapChoice(seat.max_new_tokens)
    tail = completion_tail(usage) if usage is not None else None
    proposal = None
    if usage is not None and tail is not None:
        tokens, label = tail
        proposal = propose_output_cap(tokens, policy.output_cap_margin, max_model_len)
        choice.lines.append(
            ExplanationLine(
                rule="output_cap_proposal",
                inputs={
                    "completion_tokens_tail": tokens,
                    "percentile": label,
                    "completion_tokens_p99": usage.completion_tokens_p99,
                    "margin": policy.output_cap_margin,
                    "max_model_len": max_model_len,
                    "calls": usage.calls,
                },
                result=f"proposed cap {proposal:,} tokens",
                note=f"{label} completion {tokens:,.0f} × {policy.output_cap_margin:g}, rounded up to a power-of-two step"
                + ("" if label == "p99" else f" ({'the p99 is' if label == 'p90' else 'the p99 and p90 are'} runaway replies)"),
            )
        )
    if seat.max_new_tokens is not None:
        choice.lines.append(ExplanationLine(rule="output_cap", inputs={"declared": seat.max_new_tokens}, result=f"cap {seat.max_new_tokens:,} tokens (declared)",
            note="emitted as --override-generation-config; it is the default and the ceiling of every reply"))
        if tail is not None and seat.max_new_tokens < tail[0]:
            choice.warnings.append(f"{seat.name}: declared cap {seat.max_new_tokens:,} is below the {tail[1]} completion {tail[0]:,.0f}: ordinary replies would be cut")
        if seat.max_new_tokens > max_model_len:
            choice.warnings.append(f"{seat.name}: cap {seat.max_new_tokens:,} is above max_model_len {max_model_len:,}; vLLM clamps replies to the context anyway")
    elif proposal is not None:
        choice.max_new_tokens = proposal
        choice.lines.append(ExplanationLine(rule="output_cap", inputs={"proposed": proposal}, result=f"cap {proposal:,} tokens (from usage)",
            note="no declared cap; the proposal from the completion tail is applied"))
    else:
        choice.lines.append(ExplanationLine(rule="output_cap", inputs={}, result="no cap",
            note="none declared and no usage data: a request without max_tokens may fill the whole context"))
    choice.warnings += runaway_warnings(seat.name, choice.max_new_tokens, usage)
    return choice


def runaway_warnings(seat_name: str, cap: int | None, usage: ModelUsage | None) -> list[str]:
    if usage is None:
        return []
    warnings = []
    for runaway in usage.runaways:
        who = runaway.key_alias or runaway.team or "an unnamed key"
        stopped = f"the cap {cap:,} stops them" if cap is not None and cap < runaway.max_completion_tokens else "no cap stops them"
        warnings.append(f"{seat_name}: {runaway.count} runaway repl{'y' if runaway.count == 1 else 'ies'} from {who} (up to {runaway.max_completion_tokens:,} tokens); {stopped}")
    return warnings


# ----------------------------------------------------------------------------- in-flight tokens


def inflight_check(seat_name: str, capacity: KvCapacity, usage: ModelUsage | None) -> tuple[list[ExplanationLine], list[str]]:
    """Can the seat's KV hold the in-flight tokens its traffic was seen to reach?"""
    if usage is None or usage.peak_inflight_tokens is None:
        return [], []
    normal_peak = usage.peak_inflight_tokens_without_runaways if usage.peak_inflight_tokens_without_runaways is not None else usage.peak_inflight_tokens
    kv_tokens = capacity.kv_cache_tokens
    line = ExplanationLine(
        rule="inflight",
        inputs={"kv_cache_tokens": kv_tokens, "peak_inflight_tokens": usage.peak_inflight_tokens,
            "peak_inflight_tokens_without_runaways": normal_peak, "peak_inflight_requests": usage.peak_inflight_requests},
        result="holds the observed peak" if kv_tokens >= usage.peak_inflight_tokens
            else ("holds the peak without runaways" if kv_tokens >= normal_peak else "too small for the observed peak"),
        note="KV tokens as vLLM reports them (concurrency × max_model_len), against the peak of prompt + completion tokens in flight",
    )
    warnings = []
    if kv_tokens < normal_peak:
        warnings.append(f"{seat_name}: KV holds {kv_tokens:,} tokens but traffic reached {normal_peak:,} in flight (without runaways); requests will queue or be preempted")
    elif kv_tokens < usage.peak_inflight_tokens:
        warnings.append(f"{seat_name}: KV holds {kv_tokens:,} tokens; the peak {usage.peak_inflight_tokens:,} in flight was reached only with runaway replies")
    return [line], warnings
