"""Tiny random-weight models that keep a real model's KV geometry, built once and cached.

Each :class:`TinyModelSpec` copies the fields that decide KV cache size from a real config (KV heads,
head_dim, sliding window and layer-kind pattern, MLA latent ranks, GDN / Mamba2 state dimensions)
and shrinks everything else (hidden size, layer count, experts, vocabulary), so the vLLM CPU engine
boots it in well under a minute. :func:`tiny_model_dir` builds a spec with
``build_tiny_model.py`` under the vLLM virtualenv's Python and caches the directory under
``<test cache>/tiny-models/<hash of spec and builder>``.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from kits.paths import REPO_ROOT
from kits.vllm_engine import seatplan_cache_root

# A script, run under the vLLM virtualenv's Python: it stays beside the integration tests.
BUILDER_SCRIPT = REPO_ROOT / "tests" / "integration" / "build_tiny_model.py"
TINY_VOCAB_SIZE = 512
BUILD_TIMEOUT_S = 600


@dataclass(frozen=True)
class TinyModelSpec:
    name: str
    mimics: str  # the real model whose KV geometry this keeps
    config: dict = field(hash=False)
    # Fields added to the saved config.json as the published checkpoint writes them.
    config_json_extra: dict = field(default_factory=dict, hash=False)

    def cache_key(self) -> str:
        digest = hashlib.sha256()
        digest.update(json.dumps([self.config, self.config_json_extra], sort_keys=True).encode())
        digest.update(BUILDER_SCRIPT.read_bytes())
        return f"{self.name}-{digest.hexdigest()[:16]}"


def _tiny_common(**fields) -> dict:
    return {"vocab_size": TINY_VOCAB_SIZE, "tie_word_embeddings": False, "max_position_embeddings": 8192,
            **fields}


QWEN3_DENSE = TinyModelSpec(
    name="qwen3-dense",
    mimics="Qwen/Qwen3-8B (GQA: 8 KV heads, head_dim 128)",
    config=_tiny_common(
        architectures=["Qwen3ForCausalLM"], model_type="qwen3",
        hidden_size=256, intermediate_size=512, num_hidden_layers=3,
        num_attention_heads=8, num_key_value_heads=8, head_dim=128,
    ),
)

QWEN3_MOE = TinyModelSpec(
    name="qwen3-moe",
    mimics="Qwen/Qwen3-30B-A3B (MoE, 4 KV heads, head_dim 128)",
    config=_tiny_common(
        architectures=["Qwen3MoeForCausalLM"], model_type="qwen3_moe",
        hidden_size=256, intermediate_size=512, moe_intermediate_size=64, num_hidden_layers=4,
        num_attention_heads=8, num_key_value_heads=4, head_dim=128,
        num_experts=8, num_experts_per_tok=2, decoder_sparse_step=1, mlp_only_layers=[],
        norm_topk_prob=True,
    ),
)

GPT_OSS = TinyModelSpec(
    name="gpt-oss",
    mimics="openai/gpt-oss-20b without MXFP4 (sliding window 128 alternating with full, 8 KV heads, head_dim 64)",
    config=_tiny_common(
        architectures=["GptOssForCausalLM"], model_type="gpt_oss",
        hidden_size=256, intermediate_size=256, num_hidden_layers=4,
        num_attention_heads=8, num_key_value_heads=8, head_dim=64,
        sliding_window=128,
        layer_types=["sliding_attention", "full_attention", "sliding_attention", "full_attention"],
        num_local_experts=4, num_experts_per_tok=2, experts_per_token=2, attention_bias=True,
        rope_theta=150000,
    ),
)

GEMMA3_TEXT = TinyModelSpec(
    name="gemma3-text",
    mimics="google/gemma-3-27b-it text part (5 sliding-1024 : 1 full, 16 KV heads, head_dim 128)",
    config=_tiny_common(
        architectures=["Gemma3ForCausalLM"], model_type="gemma3_text",
        hidden_size=256, intermediate_size=512, num_hidden_layers=13,
        num_attention_heads=16, num_key_value_heads=16, head_dim=128,
        query_pre_attn_scalar=128, sliding_window=1024, sliding_window_pattern=6,
        tie_word_embeddings=True,
    ),
)

DEEPSEEK_V3_MLA = TinyModelSpec(
    name="deepseek-v3-mla",
    mimics="deepseek-ai/DeepSeek-V3 (MLA: kv_lora_rank 512 + qk_rope_head_dim 64)",
    config=_tiny_common(
        architectures=["DeepseekV3ForCausalLM"], model_type="deepseek_v3",
        hidden_size=256, intermediate_size=512, moe_intermediate_size=64, num_hidden_layers=3,
        num_attention_heads=4, num_key_value_heads=4,
        kv_lora_rank=512, q_lora_rank=192, qk_rope_head_dim=64, qk_nope_head_dim=128, v_head_dim=128,
        n_routed_experts=4, n_shared_experts=1, num_experts_per_tok=2, n_group=1, topk_group=1,
        first_k_dense_replace=1, moe_layer_freq=1, routed_scaling_factor=2.5,
        scoring_func="sigmoid", topk_method="noaux_tc", norm_topk_prob=True,
        num_nextn_predict_layers=0,
    ),
)

QWEN3_NEXT_GDN = TinyModelSpec(
    name="qwen3-next-gdn",
    mimics="Qwen/Qwen3-Next-80B-A3B (gated DeltaNet hybrid, 3 GDN : 1 full, 2 KV heads, head_dim 256)",
    config=_tiny_common(
        architectures=["Qwen3NextForCausalLM"], model_type="qwen3_next",
        hidden_size=256, intermediate_size=512, num_hidden_layers=4,
        num_attention_heads=4, num_key_value_heads=2, head_dim=256, partial_rotary_factor=0.25,
        full_attention_interval=4,
        linear_conv_kernel_dim=4, linear_key_head_dim=128, linear_value_head_dim=128,
        linear_num_key_heads=16, linear_num_value_heads=32,
        num_experts=4, num_experts_per_tok=2, moe_intermediate_size=64,
        shared_expert_intermediate_size=64, decoder_sparse_step=1, mlp_only_layers=[],
    ),
)

NEMOTRON_H_MAMBA2 = TinyModelSpec(
    name="nemotron-h-mamba2",
    mimics="nvidia/Nemotron-H-8B (Mamba2 hybrid: 128 heads x 64, state 128, 8 groups; 8 KV heads, head_dim 128)",
    config=_tiny_common(
        architectures=["NemotronHForCausalLM"], model_type="nemotron_h",
        hidden_size=256, intermediate_size=512, hybrid_override_pattern="M-M*-",
        num_attention_heads=8, num_key_value_heads=8, head_dim=128,
        mamba_num_heads=128, mamba_head_dim=64, ssm_state_size=128, n_groups=8, conv_kernel=4,
        expand=2, chunk_size=128,
    ),
    # transformers 5 saves only ``layers_block_type``; the released checkpoints carry these.
    config_json_extra={"hybrid_override_pattern": "M-M*-", "num_hidden_layers": 5},
)

ALL_TINY_MODELS = (QWEN3_DENSE, QWEN3_MOE, GPT_OSS, GEMMA3_TEXT, DEEPSEEK_V3_MLA, QWEN3_NEXT_GDN,
                   NEMOTRON_H_MAMBA2)


class TinyModelBuildError(RuntimeError):
    pass


def tiny_model_dir(spec: TinyModelSpec, vllm_python: Path, cache_root: Path | None = None) -> Path:
    """The built model directory for ``spec``, building it first if the cache lacks it."""
    models_root = (cache_root or seatplan_cache_root()) / "tiny-models"
    target = models_root / spec.cache_key()
    if (target / "config.json").is_file():
        return target
    models_root.mkdir(parents=True, exist_ok=True)
    # Build beside the target and rename, so an interrupted build never looks like a cached one.
    staging = Path(tempfile.mkdtemp(prefix=f".{spec.name}-", dir=models_root))
    try:
        spec_path = staging / "spec.json"
        spec_path.write_text(json.dumps({"name": spec.name, "mimics": spec.mimics, "config": spec.config,
                                         "config_json_extra": spec.config_json_extra}))
        model_dir = staging / "model"
        completed = subprocess.run(
            [str(vllm_python), str(BUILDER_SCRIPT), str(spec_path), str(model_dir)],
            capture_output=True, text=True, timeout=BUILD_TIMEOUT_S,
        )
        if completed.returncode != 0:
            raise TinyModelBuildError(
                f"building tiny model {spec.name} failed (exit {completed.returncode}):\n"
                f"{completed.stderr[-4000:]}"
            )
        shutil.move(str(spec_path), model_dir / "seatplan-tiny-spec.json")
        try:
            model_dir.rename(target)
        except OSError:
            # another process (an xdist worker of the same run) built it meanwhile: its copy is as good
            if not (target / "config.json").is_file():
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return target
