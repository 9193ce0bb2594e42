"""Which engines the live test boots: tiny models x KV budgets, lengths, prefix caching, KV dtype.

Budgets and ``max_model_len`` values are deliberately not multiples of the CPU block size (128)
nor of any model's bytes per block, so off-by-one and rounding mistakes show. Every budget leaves
room for at least one max-length request plus the null block, or vLLM refuses to start.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from kits.tiny_models import (
    DEEPSEEK_V3_MLA,
    GEMMA3_TEXT,
    GPT_OSS,
    NEMOTRON_H_MAMBA2,
    QWEN3_DENSE,
    QWEN3_MOE,
    QWEN3_NEXT_GDN,
    TinyModelSpec,
)
from kits.vllm_engine import EngineConfig


@dataclass(frozen=True)
class BootPlan:
    name: str
    model: TinyModelSpec
    max_model_len: int
    kv_cache_memory_bytes: int
    kv_cache_dtype: str = "auto"
    prefix_caching: bool = True
    probe: str = "chat"
    attention_backend: str | None = None

    def engine_config(self, model_dir: Path) -> EngineConfig:
        return EngineConfig(
            name=self.name,
            model_dir=model_dir,
            max_model_len=self.max_model_len,
            kv_cache_memory_bytes=self.kv_cache_memory_bytes,
            kv_cache_dtype=self.kv_cache_dtype,
            prefix_caching=self.prefix_caching,
            probe=self.probe,
            attention_backend=self.attention_backend,
        )


BOOT_PLANS: tuple[BootPlan, ...] = (
    BootPlan("qwen3-dense-bf16", QWEN3_DENSE, max_model_len=3000, kv_cache_memory_bytes=50_000_123),
    BootPlan("qwen3-dense-fp8-noprefix", QWEN3_DENSE, max_model_len=3001, kv_cache_memory_bytes=50_000_123,
             kv_cache_dtype="fp8", prefix_caching=False),
    BootPlan("qwen3-moe", QWEN3_MOE, max_model_len=2500, kv_cache_memory_bytes=77_777_777),
    # gpt-oss chat goes through the Harmony encoding, whose files cannot be fetched here.
    BootPlan("gpt-oss-swa", GPT_OSS, max_model_len=3000, kv_cache_memory_bytes=50_000_123, probe="completion"),
    BootPlan("gemma3-swa-padding", GEMMA3_TEXT, max_model_len=1500, kv_cache_memory_bytes=200_000_123),
    # vLLM picks the MLA backend by host: AMX_MLA (block size 128, bf16 KV only) where the CPU has AMX,
    # else the reference CPU_MLA (block size 16); facts detects AMX the same way. The reference backend
    # turns prefix caching off ("forcing chunked prefill and prefix caching to be disabled"), so the
    # MLA plans ask for it off and the engine reports the same on every host.
    BootPlan("deepseek-v3-mla", DEEPSEEK_V3_MLA, max_model_len=3000, kv_cache_memory_bytes=50_000_123,
             prefix_caching=False),
    # fp8 KV needs the reference backend, which accepts it at start-up but fails the first request.
    BootPlan("deepseek-v3-mla-fp8", DEEPSEEK_V3_MLA, max_model_len=2999, kv_cache_memory_bytes=30_000_001,
             kv_cache_dtype="fp8", prefix_caching=False, probe="none", attention_backend="CPU_MLA"),
    BootPlan("qwen3-next-gdn-prefix", QWEN3_NEXT_GDN, max_model_len=3000, kv_cache_memory_bytes=100_000_007),
    BootPlan("qwen3-next-gdn-noprefix", QWEN3_NEXT_GDN, max_model_len=3000, kv_cache_memory_bytes=100_000_007,
             prefix_caching=False),
    BootPlan("nemotron-h-mamba2-prefix", NEMOTRON_H_MAMBA2, max_model_len=3000,
             kv_cache_memory_bytes=100_000_007),
    BootPlan("nemotron-h-mamba2-noprefix", NEMOTRON_H_MAMBA2, max_model_len=2222,
             kv_cache_memory_bytes=100_000_007, prefix_caching=False),
)
