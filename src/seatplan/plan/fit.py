"""``seatplan fit``: how much context and concurrency a model gets on a GPU of a given size.

The KV budget is what the GPU holds beyond the weights and the overhead estimate (the same
plateau footprint the planner uses, without the KV part); the answers are vLLM's own arithmetic
on that budget.
"""

from __future__ import annotations

from seatplan.documents.fleet import Policy
from seatplan.documents.plan import ExplanationLine, FitReport, PartKind
from seatplan.facts.models import ModelFacts
from seatplan.plan import footprint as fp
from seatplan.units import human_bytes


def largest_len_with_factor(facts: ModelFacts, kv_budget_bytes: int, upper_len: int, policy: Policy) -> int:
    """The longest ``max_model_len`` whose rule-sized KV (× factor, rounded up) still fits the budget; 0 if none."""
    low, high = 0, upper_len
    while low < high:
        middle = (low + high + 1) // 2
        if policy.rule_kv_bytes(facts.request_kv_bytes(middle), facts.min_kv_cache_bytes(middle)) <= kv_budget_bytes:
            low = middle
        else:
            high = middle - 1
    return low


def fit_model(
    facts: ModelFacts,
    *,
    gpu_memory_bytes: int,
    headroom_bytes: int,
    policy: Policy,
    limits: fp.EngineLimits,
    enforce_eager: bool,
) -> FitReport:
    profile = fp.load_overhead_model().profile_for(policy.vllm_version)
    tensor_parallel_size = facts.settings.tensor_parallel_size
    estimate = fp.vllm_footprint(
        shape=facts.shape,
        weights=fp.Weights(facts.weights_bytes, facts.weights_exact, facts.weights_source),
        tensor_parallel_size=tensor_parallel_size,
        kv_cache_memory_bytes=0,
        limits=limits,
        enforce_eager=enforce_eager,
        creep_allowance_bytes=policy.creep_allowance_bytes,
        profile=profile,
        vllm_version=policy.vllm_version,
    )
    parts = [part for part in estimate.parts if part.name is not PartKind.KV_CACHE]
    non_kv = sum(part.bytes for part in parts)
    budget = max(0, gpu_memory_bytes - headroom_bytes - non_kv)
    upper = max(facts.max_context_derived, facts.max_context_published or 0)
    published = facts.max_context_published or facts.max_context_derived
    largest = facts.max_model_len_fit(budget, upper_len=upper) if budget else 0
    with_factor = largest_len_with_factor(facts, budget, upper, policy)
    capacity = facts.capacity(budget, published)
    lines = [
        ExplanationLine(
            rule="kv_budget",
            inputs={"gpu_memory_bytes": gpu_memory_bytes, "headroom_bytes": headroom_bytes, "non_kv_bytes": non_kv},
            result=f"{budget:,} B ({human_bytes(budget)}) for the KV cache per GPU",
            note=f"GPU − headroom − weights and overhead estimate (profile {profile.name})",
        ),
        ExplanationLine(
            rule="largest_context",
            inputs={"kv_budget_bytes": budget, "upper_len": upper},
            result=f"max_model_len {largest:,}",
            note="vLLM's own estimate: the longest single request the budget holds" + (" (capped at the model's maximum)" if largest == upper else ""),
        ),
        ExplanationLine(
            rule="largest_context_with_factor",
            inputs={"kv_budget_bytes": budget, "factor": policy.kv_factor, "rounding_step_bytes": policy.rounding_step_bytes},
            result=f"max_model_len {with_factor:,}",
            note=f"the longest context whose KV sized by the plan's rule ({policy.kv_factor:g}× one request, rounded up) fits",
        ),
        ExplanationLine(
            rule="published_concurrency",
            inputs={"max_model_len": published, "kv_budget_bytes": budget},
            result=f"{capacity.max_concurrency:.2f}× concurrency, {capacity.kv_cache_tokens:,} tokens",
            note=capacity.log_line,
        ),
    ]
    return FitReport(
        model=facts.model,
        gpu_memory_bytes=gpu_memory_bytes,
        tensor_parallel_size=tensor_parallel_size,
        headroom_bytes=headroom_bytes,
        non_kv_bytes=non_kv,
        kv_budget_bytes=budget,
        footprint_parts=parts,
        max_context_derived=facts.max_context_derived,
        max_context_published=facts.max_context_published,
        largest_max_model_len=largest,
        largest_max_model_len_with_factor=with_factor,
        kv_factor=policy.kv_factor,
        published_context=published,
        published_kv_cache_tokens=capacity.kv_cache_tokens,
        published_max_concurrency=capacity.max_concurrency,
        published_fits_one_request=capacity.fits_one_request,
        explanation=lines,
    )


def fit_shortfall(report: FitReport, tensor_parallel_size: int) -> str | None:
    """Why the model cannot run on this GPU at all (``seatplan fit`` exits 3), with what would make it fit; None
    when the KV cache gets room for at least one request of some length."""
    if report.largest_max_model_len > 0:
        return None
    weights = sum(part.bytes for part in report.footprint_parts if part.name is PartKind.WEIGHTS)
    room = report.gpu_memory_bytes - report.headroom_bytes
    what = (f"the weights alone ({human_bytes(weights)} per GPU) exceed the {human_bytes(room)} this GPU gives the seat"
            if weights >= room else
            f"the weights and overhead ({human_bytes(report.non_kv_bytes)} per GPU) leave no room for the KV cache in {human_bytes(room)}")
    return (f"{report.model} does not fit: {what}; fix: a larger GPU, --tp {2 * tensor_parallel_size} (splits the weights), "
            "or a quantised checkpoint (FP8 weights take half of BF16's)")
