"""The plateau footprint: the fitted overhead estimate (OVERHEAD.md §5), keyed on the vLLM version."""

from __future__ import annotations

import pytest

from kits.plan import LLAMA_8B, MODELS, GiB, MiB
from seatplan.documents.observed import ObservedSeat
from seatplan.facts.api import load_model_facts
from seatplan.facts.models import EngineSettings
from seatplan.plan import footprint as fp

LARGE = fp.EngineLimits(1024, 8192, "test")


def estimate(facts, *, version="0.19", tp=1, kv=0, limits=LARGE, eager=False, creep=0):
    return fp.vllm_footprint(
        shape=facts.shape,
        weights=fp.Weights(facts.weights_bytes, facts.weights_exact, facts.weights_source),
        tensor_parallel_size=tp,
        kv_cache_memory_bytes=kv,
        limits=limits,
        enforce_eager=eager,
        creep_allowance_bytes=creep,
        profile=fp.load_overhead_model().profile_for(version),
        vllm_version=version,
    )


@pytest.fixture(scope="module")
def llama():
    return load_model_facts(str(LLAMA_8B), EngineSettings())


def parts(footprint) -> dict[str, int]:
    return {part.name: part.bytes for part in footprint.parts}


def test_worked_example_of_overhead_md(llama):
    # Llama-3.1-8B on v0.19: ACT = 15.4 B · 1024 rows · 128,256 vocab = 2,022,469,018 B (1.88 GiB);
    # graphs 0.42 + 0.015 · 32 layers = 0.90 GiB; context 0.76 GiB → 3.54 GiB beside weights and KV
    # (the data set measured 3.56 GiB).
    by_name = parts(estimate(llama, kv=5 * GiB, creep=512 * MiB))
    assert by_name["activation_peak"] == round(15.4 * 1024 * 128256)
    assert by_name["cuda_graphs"] == round(0.90 * GiB)
    assert by_name["cuda_context"] == round(0.76 * GiB)
    assert by_name["kv_cache"] == 5 * GiB and by_name["creep_allowance"] == 512 * MiB
    assert by_name["weights"] == llama.weights_bytes
    overhead = by_name["activation_peak"] + by_name["cuda_graphs"] + by_name["cuda_context"]
    assert abs(overhead / GiB - 3.54) < 0.01


def test_every_part_is_labelled(llama):
    footprint = estimate(llama, tp=2, kv=GiB, creep=MiB)
    bases = {part.name: part.basis for part in footprint.parts}
    assert bases == {
        "cuda_context": "estimate",
        "nccl_allreduce": "estimate",
        "weights": "exact" if llama.weights_exact else "estimate",
        "activation_peak": "estimate",
        "cuda_graphs": "estimate",
        "kv_cache": "exact",
        "creep_allowance": "policy",
    }
    assert footprint.basis == "estimate"
    assert all(part.inputs for part in footprint.parts)


def test_tensor_parallel_adds_nccl_buffers_dense_and_moe(llama):
    # v0.19 TP≥2: C_fixed 3.63 (dense) / 4.11 (MoE) against 0.76 for TP1 → +2.87 / +3.35 GiB
    assert "nccl_allreduce" not in parts(estimate(llama))
    assert parts(estimate(llama, tp=2))["nccl_allreduce"] == round(2.87 * GiB)
    moe = load_model_facts(str(MODELS / "Qwen--Qwen3-30B-A3B"), EngineSettings(tensor_parallel_size=2))
    assert parts(estimate(moe, tp=2))["nccl_allreduce"] == round(3.35 * GiB)


def test_activation_grows_with_batch_limits_not_with_context(llama):
    small = parts(estimate(llama, limits=fp.EngineLimits(256, 2048, "test")))["activation_peak"]
    assert small == round(15.4 * 256 * 128256)
    # a longer context changes the KV part only
    assert parts(estimate(llama, kv=1 * GiB))["activation_peak"] == parts(estimate(llama, kv=20 * GiB))["activation_peak"]
    # a small vocab with a big batch: the forward term (8.5 B · mnbt · intermediate) takes over
    llama2 = load_model_facts(str(MODELS / "fixture--llama-2-7b-awq"), EngineSettings())
    forward = parts(estimate(llama2, limits=fp.EngineLimits(256, 16384, "test")))["activation_peak"]
    assert forward == round(8.5 * 16384 * llama2.shape.intermediate_size)


def test_constants_are_keyed_on_the_vllm_version():
    model = fp.load_overhead_model()
    assert model.profile_for("0.19").sampler_bytes_per_row_vocab == 15.4
    assert model.profile_for("0.32").sampler_bytes_per_row_vocab == 15.4  # nearest measured version below
    assert model.profile_for("0.12").sampler_bytes_per_row_vocab == 38.5
    assert model.profile_for("0.8.5").sampler_bytes_per_row_vocab == 40.0
    assert "94 public" in model.provenance["data_set"]


def test_enforce_eager_drops_the_graphs(llama):
    graphs = next(part for part in estimate(llama, eager=True).parts if part.name == "cuda_graphs")
    assert graphs.bytes == 0 and graphs.basis == "exact"


def test_fixed_seat_costs_its_cap_and_observed_replaces_the_estimate():
    fixed = fp.fixed_footprint(6 * GiB)
    assert fixed.footprint_bytes == 6 * GiB and fixed.basis == "declared"
    seen = ObservedSeat(footprint_bytes=30 * GiB, source="beszel", samples=288)
    # ran with the same 10 GiB pin: non-KV 20 GiB; a new 12 GiB pin → 32 GiB
    assert fp.observed_footprint(seen, 12 * GiB, 10 * GiB).footprint_bytes == 32 * GiB
    same = fp.observed_footprint(seen, 10 * GiB, None)
    assert same.footprint_bytes == 30 * GiB and same.basis == "observed"
    assert [part.basis for part in same.parts] == ["observed", "exact"]


def test_version_keys_read_release_spellings():
    assert fp.version_key("v0.32.0") == (0, 32, 0)
    assert fp.version_key("0.29.1rc1.dev339") == (0, 29, 1)
    assert fp.version_key("0.10") < fp.version_key("0.10.2") < fp.version_key("0.11.1")
    assert fp.load_overhead_model().profile_for("v0.11.0").sampler_bytes_per_row_vocab == 38.5
