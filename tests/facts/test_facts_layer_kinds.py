"""Layer kinds beyond plain full attention, the CPU engine's own rules, TP replication and KV dtypes.

The CPU cases are the tiny models the live test boots (tests/kits/tiny_models.py); the expected
figures are derived by hand from VLLM.md part 1's rules (block 128, MLA 16 on the reference backend and
128 with AMX, Mamba block rounding to 128 with an fp32 SSM state, max_num_batched_tokens 2048 without
async scheduling). The real vLLM 0.32.0 CPU engine (an AMX Xeon, booted by tests/integration, MLA both
unpinned = AMX_MLA and pinned with --attention-backend CPU_MLA) reported exactly these block sizes, block
counts and token figures for every case here.
"""

from __future__ import annotations

import pytest

from kits.facts import facts, write_config
from seatplan.errors import SeatplanError
from seatplan.facts.api import cpu_has_amx, cpu_has_avx512_bf16
from seatplan.facts.kv_specs import ChunkedLocalAttentionSpec, MambaSpec

COMMON = {"vocab_size": 512, "tie_word_embeddings": False, "max_position_embeddings": 8192, "torch_dtype": "bfloat16"}

QWEN3_NEXT_TINY = {**COMMON, "architectures": ["Qwen3NextForCausalLM"], "model_type": "qwen3_next", "hidden_size": 256,
                   "intermediate_size": 512, "num_hidden_layers": 4, "num_attention_heads": 4, "num_key_value_heads": 2,
                   "head_dim": 256, "full_attention_interval": 4, "linear_conv_kernel_dim": 4, "linear_key_head_dim": 128,
                   "linear_value_head_dim": 128, "linear_num_key_heads": 16, "linear_num_value_heads": 32,
                   "num_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 64,
                   "shared_expert_intermediate_size": 64}
NEMOTRON_TINY = {**COMMON, "architectures": ["NemotronHForCausalLM"], "model_type": "nemotron_h", "hidden_size": 256,
                 "intermediate_size": 512, "hybrid_override_pattern": "M-M*-", "num_attention_heads": 8,
                 "num_key_value_heads": 8, "head_dim": 128, "mamba_num_heads": 128, "mamba_head_dim": 64,
                 "ssm_state_size": 128, "n_groups": 8, "conv_kernel": 4, "expand": 2}
DEEPSEEK_TINY = {**COMMON, "architectures": ["DeepseekV3ForCausalLM"], "model_type": "deepseek_v3", "hidden_size": 256,
                 "intermediate_size": 512, "moe_intermediate_size": 64, "num_hidden_layers": 3, "num_attention_heads": 4,
                 "num_key_value_heads": 4, "kv_lora_rank": 512, "q_lora_rank": 192, "qk_rope_head_dim": 64,
                 "qk_nope_head_dim": 128, "v_head_dim": 128, "n_routed_experts": 4, "n_shared_experts": 1,
                 "num_experts_per_tok": 2, "first_k_dense_replace": 1}
QWEN3_DENSE_TINY = {**COMMON, "architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "hidden_size": 256,
                    "intermediate_size": 512, "num_hidden_layers": 3, "num_attention_heads": 8, "num_key_value_heads": 8,
                    "head_dim": 128}
QWEN3_MOE_TINY = {**COMMON, "architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe", "hidden_size": 256,
                  "intermediate_size": 512, "moe_intermediate_size": 64, "num_hidden_layers": 4, "num_attention_heads": 8,
                  "num_key_value_heads": 4, "head_dim": 128, "num_experts": 8, "num_experts_per_tok": 2,
                  "decoder_sparse_step": 1, "mlp_only_layers": []}
GEMMA3_TINY = {**COMMON, "architectures": ["Gemma3ForCausalLM"], "model_type": "gemma3_text", "hidden_size": 256,
               "intermediate_size": 512, "num_hidden_layers": 13, "num_attention_heads": 16, "num_key_value_heads": 16,
               "head_dim": 128, "sliding_window": 1024, "sliding_window_pattern": 6, "tie_word_embeddings": True}
GPT_OSS_TINY = {**COMMON, "architectures": ["GptOssForCausalLM"], "model_type": "gpt_oss", "hidden_size": 256,
                "intermediate_size": 256, "num_hidden_layers": 4, "num_attention_heads": 8, "num_key_value_heads": 8,
                "head_dim": 64, "sliding_window": 128,
                "layer_types": ["sliding_attention", "full_attention", "sliding_attention", "full_attention"],
                "num_local_experts": 4, "num_experts_per_tok": 2}


@pytest.mark.parametrize(
    "config, settings, budget, length, block_size, expected",
    [
        # 3 layers x 128 x 2 x 8 x 128 x 2 B = 1,572,864 B per block (fp8: half)
        (QWEN3_DENSE_TINY, {}, 50_000_123, 3000, 128, (31, 3_875)),
        (QWEN3_DENSE_TINY, {"kv_cache_dtype": "fp8", "prefix_caching": False}, 50_000_123, 3001, 128, (63, 7_877)),
        (QWEN3_MOE_TINY, {}, 77_777_777, 2500, 128, (74, 9_250)),
        # attention 2048 B/token; GDN state 8192x3x2 + 32x128x128x4 = 2,146,304 B → block 128 x 9 = 1152
        (QWEN3_NEXT_TINY, {"prefix_caching": True, "cpu_avx512_bf16": True}, 100_000_007, 3000, 1152, (42, 14_000)),
        (QWEN3_NEXT_TINY, {"prefix_caching": False, "cpu_avx512_bf16": True}, 100_000_007, 3000, 1152, (42, 21_000)),
        # without AVX512-BF16 the SSM state stays bfloat16: 8192x3x2 + 32x128x128x2 = 1,097,728 B → block 128 x 5 = 640;
        # the 2-core CI machine's vLLM 0.32.0 reported 76 blocks for both
        (QWEN3_NEXT_TINY, {"prefix_caching": True, "cpu_avx512_bf16": False}, 100_000_007, 3000, 640, (76, 20_727)),
        (QWEN3_NEXT_TINY, {"prefix_caching": False, "cpu_avx512_bf16": False}, 100_000_007, 3000, 640, (76, 28_500)),
        # Mamba2 state 10240x3x2 + 128x64x128x4 = 4,255,744 B vs 4096 B/token → block 1152; 3 blocks per
        # Mamba2 layer with prefix caching (one is the chunk checkpoint), 1 without
        (NEMOTRON_TINY, {"prefix_caching": True}, 100_000_007, 3000, 1152, (21, 7_000)),
        (NEMOTRON_TINY, {"prefix_caching": False}, 100_000_007, 2222, 1152, (21, 11_665)),
        # MLA on CPU: the reference backend forces block 16 (page 16 x 576 x 2) ...
        (DEEPSEEK_TINY, {"cpu_amx": False}, 50_000_123, 3000, 16, (904, 14_425)),
        (DEEPSEEK_TINY, {"cpu_amx": False, "kv_cache_dtype": "fp8"}, 30_000_001, 2999, 16, (1085, 17_308)),
        # ... AMX_MLA keeps 128; these two are what vLLM 0.32.0 reported on an AMX Xeon
        (DEEPSEEK_TINY, {"cpu_amx": True}, 50_000_123, 3000, 128, (113, 14_125)),
        # --attention-backend CPU_MLA pins the reference backend even on AMX hardware
        (DEEPSEEK_TINY, {"cpu_amx": True, "attention_backend": "CPU_MLA"}, 50_000_123, 3000, 16, (904, 14_425)),
        (DEEPSEEK_TINY, {"cpu_amx": True, "kv_cache_dtype": "fp8"}, 30_000_001, 2999, 128, (135, 16_869)),
        # 11 sliding + 2 full → groups of 2 (6 sliding + 1 full, 1 padding layer); window 1023 + 2048 > 1500
        (GEMMA3_TINY, {}, 200_000_123, 1500, 128, (95, 1_583)),
        (GPT_OSS_TINY, {}, 50_000_123, 3000, 128, (95, 6_785)),
    ],
    ids=["qwen3-dense", "qwen3-dense-fp8-noprefix", "qwen3-moe", "qwen3-next-prefix", "qwen3-next-noprefix", "qwen3-next-prefix-no-avx512-bf16",
         "qwen3-next-noprefix-no-avx512-bf16", "nemotron-prefix", "nemotron-noprefix", "mla-reference",
         "mla-reference-fp8", "mla-amx", "mla-pinned-cpu-mla", "mla-amx-fp8", "gemma3", "gpt-oss"],
)
def test_cpu_engine_rules(tmp_path, config, settings, budget, length, block_size, expected):
    model = facts(write_config(tmp_path / "model", config), device="cpu", **settings)
    capacity = model.capacity(budget, length)
    assert model.block_size == block_size
    assert (capacity.num_blocks, capacity.kv_cache_tokens) == expected
    assert capacity.fits_one_request


def test_cpu_ssm_state_is_fp32_with_avx512_bf16_and_otherwise_follows_the_model(tmp_path):
    directory = write_config(tmp_path / "next", QWEN3_NEXT_TINY)
    assert facts(directory, device="cpu", cpu_avx512_bf16=True).state_bytes_per_request == 3 * (8192 * 3 * 2 + 32 * 128 * 128 * 4)
    assert facts(directory, device="cpu", cpu_avx512_bf16=False).state_bytes_per_request == 3 * (8192 * 3 * 2 + 32 * 128 * 128 * 2)
    gpu = facts(directory)
    assert gpu.state_bytes_per_request == 3 * (8192 * 3 * 2 + 32 * 128 * 128 * 2)
    assert gpu.block_size == 16 * -(-(8192 * 3 * 2 + 32 * 128 * 128 * 2) // (16 * 2048))


def test_nemotron_keeps_its_ssm_state_in_fp32_on_gpu(tmp_path):
    model = facts(write_config(tmp_path / "nemotron", NEMOTRON_TINY))
    assert model.state_bytes_per_request == 2 * (10240 * 3 * 2 + 128 * 64 * 128 * 4)


def test_mamba_hybrid_needs_the_hybrid_manager(tmp_path):
    with pytest.raises(SeatplanError, match="Hybrid KV cache manager is disabled"):
        facts(write_config(tmp_path / "next", QWEN3_NEXT_TINY), hybrid_kv_cache_manager=False)


def test_jamba_mamba1_layers(tmp_path):
    config = {**COMMON, "architectures": ["JambaForCausalLM"], "model_type": "jamba", "hidden_size": 256,
              "num_hidden_layers": 8, "num_attention_heads": 8, "num_key_value_heads": 2, "attn_layer_period": 8,
              "attn_layer_offset": 4, "mamba_d_state": 16, "mamba_d_conv": 4, "mamba_expand": 2,
              "intermediate_size": 512, "num_experts": 4, "num_experts_per_tok": 2}
    model = facts(write_config(tmp_path / "jamba", config), prefix_caching=False)
    kinds = sorted((group.kind, len(group.layers)) for group in model.layer_groups)
    assert kinds == [("full_attention", 1)] + [("mamba", 1)] * 7
    assert model.state_bytes_per_request == 7 * (512 * 3 * 2 + 512 * 16 * 2)
    # 256 B/token of attention; the 19,456-byte state needs a block of 16 x cdiv(19456, 16 x 256) = 80
    assert model.block_size == 80
    assert model.blocks_per_request(1000) == 13 + 7


def test_granite4_layer_types(tmp_path):
    config = {**COMMON, "architectures": ["GraniteMoeHybridForCausalLM"], "model_type": "granitemoehybrid",
              "hidden_size": 256, "num_hidden_layers": 4, "num_attention_heads": 8, "num_key_value_heads": 4,
              "layer_types": ["mamba", "mamba", "mamba", "attention"], "mamba_n_heads": 16, "mamba_d_head": 32,
              "mamba_n_groups": 1, "mamba_d_state": 64, "mamba_d_conv": 4, "mamba_expand": 2, "intermediate_size": 512}
    model = facts(write_config(tmp_path / "granite", config))
    assert sum(1 for group in model.layer_groups if group.kind == "mamba") == 3
    conv = (512 + 2 * 1 * 64) * 3 * 2
    assert model.state_bytes_per_request == 3 * (conv + 16 * 32 * 64 * 2)


def test_llama4_chunked_local_attention(tmp_path):
    config = {**COMMON, "architectures": ["Llama4ForCausalLM"], "model_type": "llama4_text", "hidden_size": 512,
              "num_hidden_layers": 8, "num_attention_heads": 8, "num_key_value_heads": 2, "head_dim": 64,
              "attention_chunk_size": 8192, "no_rope_layers": [1, 1, 1, 0, 1, 1, 1, 0], "intermediate_size": 1024}
    model = facts(write_config(tmp_path / "llama4", config))
    # 6 chunked and 2 full layers: 6 >= 1.5 x 2, so groups of 2 (three chunked groups)
    assert sorted((g.kind, len(g.layers)) for g in model.layer_groups) == [("chunked_local", 2)] * 3 + [("full_attention", 2)]
    chunked = next(g.spec for g in model.layer_groups if g.kind == "chunked_local")
    assert isinstance(chunked, ChunkedLocalAttentionSpec)
    assert chunked.blocks_per_request(131072, 16384) == (8192 + 16384) // 16
    # Before 0.14 chunked attention stayed out of the hybrid allocator: every layer pays full KV.
    old = facts(write_config(tmp_path / "llama4", config), vllm_version="0.13")
    assert [(g.kind, len(g.layers)) for g in old.layer_groups] == [("full_attention", 8)]


def test_mamba_blocks_per_request_by_mode():
    align = MambaSpec(block_size=16, mamba_type="mamba2", state_bytes=100, cache_mode="align", checkpoint_blocks=1)
    none = align.model_copy(update={"cache_mode": "none"})
    assert (align.blocks_per_request(10**6, 0), none.blocks_per_request(10**6, 0)) == (3, 1)


@pytest.mark.parametrize("tp, per_token", [(1, 131072), (2, 65536), (8, 16384), (16, 16384), (32, 16384)])
def test_kv_heads_replicate_once_tp_exceeds_them(tp, per_token):
    model = facts("meta-llama--Llama-3.1-8B", tensor_parallel_size=tp)
    assert model.kv_bytes_per_token == per_token
    assert model.kv_heads_per_rank == max(1, 8 // tp)


def test_mla_is_never_split_across_ranks():
    assert facts("deepseek-ai--DeepSeek-V3", tensor_parallel_size=8).kv_bytes_per_token == 61 * 576 * 2
    assert facts("deepseek-ai--DeepSeek-V3", kv_cache_dtype="fp8").kv_bytes_per_token == 61 * 576


def test_qwen3_next_tp_replication():
    assert facts("Qwen--Qwen3-Next-80B-A3B-Thinking", tensor_parallel_size=4).kv_heads_per_rank == 1


def test_fp8_kv_cache():
    model = facts("meta-llama--Llama-3.1-8B", kv_cache_dtype="fp8")
    assert (model.kv_cache_dtype, model.kv_bytes_per_token) == ("fp8", 65536)
    assert model.capacity(20 * 2**30, 131072).num_blocks == 20480


def test_checkpoint_declaring_fp8_kv_switches_auto(tmp_path):
    config = {**COMMON, "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 512,
              "num_hidden_layers": 2, "num_attention_heads": 8, "num_key_value_heads": 8,
              "quantization_config": {"quant_method": "modelopt", "kv_cache_quant_algo": "FP8"}}
    assert facts(write_config(tmp_path / "m", config)).kv_dtype_bytes == 1


def test_block_size_override():
    model = facts("meta-llama--Llama-3.1-8B", block_size=32)
    assert (model.block_size, model.bytes_per_block) == (32, 32 * 131072)


def test_amx_and_avx512_bf16_detection_reads_cpu_flags(tmp_path):
    (tmp_path / "amx").write_text("flags\t\t: fpu sse avx512f avx512_bf16 amx_bf16 amx_tile amx_int8\n")
    (tmp_path / "plain").write_text("flags\t\t: fpu sse avx2\n")
    assert cpu_has_amx(tmp_path / "amx") and not cpu_has_amx(tmp_path / "plain")
    assert cpu_has_avx512_bf16(tmp_path / "amx") and not cpu_has_avx512_bf16(tmp_path / "plain")
    assert not cpu_has_amx(tmp_path / "absent") and not cpu_has_avx512_bf16(tmp_path / "absent")


def test_kv_shared_layers_keep_no_cache(tmp_path):
    config = {**COMMON, "architectures": ["Gemma3nForCausalLM"], "model_type": "gemma3n_text", "hidden_size": 512,
              "num_hidden_layers": 6, "num_attention_heads": 8, "num_key_value_heads": 2, "head_dim": 64,
              "num_kv_shared_layers": 2}
    model = facts(write_config(tmp_path / "gemma3n", config))
    assert model.kv_bytes_per_token == 4 * 2 * 2 * 64 * 2


@pytest.mark.parametrize("backend, block_size", [(None, 64), ("FLASHMLA", 64), ("CUTLASS_MLA", 128), ("cutlass_mla", 128)])
def test_gpu_mla_backend_block_sizes(backend, block_size):
    assert facts("deepseek-ai--DeepSeek-V3", attention_backend=backend).block_size == block_size


def test_unknown_mla_backend_is_refused():
    with pytest.raises(SeatplanError, match="attention backend") as problem:
        facts("deepseek-ai--DeepSeek-V3", attention_backend="FLASH_ATTN")
    assert problem.value.where == "--attention-backend"
    assert facts("meta-llama--Llama-3.1-8B", attention_backend="FLASH_ATTN").block_size == 16
