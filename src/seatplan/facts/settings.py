"""The engine settings the facts are computed under: the vLLM flags that change the KV layout and sizing.

vLLM keeps them in its ``CacheConfig``/``SchedulerConfig`` (``vllm/config/``); seatplan keeps the ones its
arithmetic reads, with vLLM's defaults for the device. ``engine.settings`` builds them for a seat.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from seatplan.versions import DEFAULT_VLLM_VERSION, has
from seatplan.versions import modelled as parse_vllm_version  # the one parser; other stages import it from facts.models

__all__ = ["DRAFT_METHODS", "NO_DRAFT_METHODS", "EngineSettings", "LoraSettings", "SpeculativeSettings", "parse_vllm_version", "speculative_method"]

# vLLM 0.32's speculative methods by what they put on the GPU (vllm/config/speculative.py, SpeculativeConfig.__post_init__):
# a model of their own, with its own weights and KV layers (a draft model, an EAGLE/EAGLE3 head); the target's own MTP
# layers ("mtp"); nothing but host-side lookups (n-gram decoding reuses the target's config, line 1226; suffix decoding builds none).
DRAFT_METHODS = frozenset({"draft_model", "eagle", "eagle3"})
MTP_METHOD = "mtp"
NO_DRAFT_METHODS = frozenset({"ngram", "ngram_gpu", "suffix"})


def speculative_method(method: str | None, model: str | None) -> str:
    """The method vLLM runs for a speculative config, as it infers one (vllm/config/speculative.py:1131-1145, 1334-1337):
    no method and the model ``ngram`` is n-gram, any other model a draft model (whose name, when it says ``eagle-`` or
    ``eagle3``, makes it EAGLE or EAGLE3); the MTP aliases (``deepseek_mtp``, ``qwen3_next_mtp`` …, line 38) are ``mtp``."""
    if method is None:
        if model in ("ngram", "[ngram]"):
            return "ngram"
        name = (model or "").lower()
        return "eagle" if "eagle-" in name else "eagle3" if "eagle3" in name else "draft_model"
    if method == "[ngram]":
        return "ngram"
    return MTP_METHOD if method.endswith("_mtp") else method


class LoraSettings(BaseModel):
    """vLLM's LoRA flags that size the adapters' GPU slots (``--enable-lora`` and the ones beside it)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    max_loras: int = Field(1, ge=1)  # vLLM's default (vllm/config/lora.py:35)
    max_lora_rank: Literal[1, 8, 16, 32, 64, 128, 256, 320, 512] = 16  # the ranks vLLM takes (MaxLoRARanks, line 26), default line 33
    max_cpu_loras: int | None = Field(None, ge=1)  # host memory only
    target_modules: tuple[str, ...] | None = None  # --lora-target-modules; None: every module vLLM wraps
    lora_dtype: str = "auto"
    fully_sharded: bool = False


class SpeculativeSettings(BaseModel):
    """vLLM's ``--speculative-config``, the fields that change the memory."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    method: str
    model: str | None = None  # the draft's directory or Hub id (an EAGLE head's), as the facts stage reads it
    num_speculative_tokens: int = Field(1, ge=1)
    draft_tensor_parallel_size: int | None = Field(None, ge=1)


class EngineSettings(BaseModel):
    """The vLLM flags that change KV layout and sizing; defaults are vLLM 0.32's on a GPU."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    tensor_parallel_size: int = Field(1, ge=1)
    dtype: str = "auto"
    kv_cache_dtype: str = "auto"
    device: Literal["cuda", "cpu"] = "cuda"
    block_size: int | None = Field(None, ge=1)
    vllm_version: str = DEFAULT_VLLM_VERSION
    prefix_caching: bool = True
    hybrid_kv_cache_manager: bool = True
    max_num_batched_tokens: int | None = Field(None, ge=1)
    async_scheduling: bool | None = None
    enable_yarn: bool = False
    yarn_factor: float = Field(4.0, gt=1.0)
    max_model_len: int | None = Field(None, ge=1)
    # vLLM's --attention-backend; it fixes the block size of MLA models (None: vLLM's own choice).
    attention_backend: str | None = None
    # CPU only: whether the CPU has AMX, which makes vLLM pick its AMX_MLA backend (block 128) over
    # the reference CPU_MLA backend (block 16). None: detect on the machine seatplan runs on.
    cpu_amx: bool | None = None
    # CPU only: whether the CPU has AVX512-BF16. vLLM 0.32's CPU platform then keeps a state layer's SSM state in
    # float32 (vllm/platforms/cpu.py:301-321, "Reset SSM cache type to float32"); without it the state follows the
    # model dtype, as on a GPU. None: detect on the machine seatplan runs on.
    cpu_avx512_bf16: bool | None = None
    # --speculative-config: a draft model's weights and KV layers join the target's (facts.speculative)
    speculative: SpeculativeSettings | None = None
    # --enable-lora: the adapters' slots on the GPU (facts.lora)
    lora: LoraSettings | None = None
    # --quantization: the method vLLM loads the weights with (``fp8`` of an unquantized checkpoint quantizes online)
    quantization: str | None = None
    # --cpu-offload-gb as bytes (int(GB × 1024**3), vllm/model_executor/offloader/base.py:174): weights kept in host memory
    cpu_offload_bytes: int = Field(0, ge=0)

    @field_validator("vllm_version")
    @classmethod
    def _known_version(cls, value: str) -> str:
        parse_vllm_version(value)
        return value

    @property
    def version(self) -> tuple[int, ...]:
        return parse_vllm_version(self.vllm_version)

    @property
    def effective_max_num_batched_tokens(self) -> int:
        """vLLM's API-server default: 2048 on CPU, 8192 on a large (>= 70 GiB) GPU."""
        if self.max_num_batched_tokens is not None:
            return self.max_num_batched_tokens
        return 2048 if self.device == "cpu" else 8192

    @property
    def effective_async_scheduling(self) -> bool:
        if self.async_scheduling is not None:
            return self.async_scheduling
        return self.device == "cuda"

    @property
    def in_flight_tokens(self) -> int:
        """Tokens a sliding-window layer must keep beyond its window (``T_if`` in VLLM.md §1.2).

        0.27 started counting every batch in flight; async scheduling keeps two.
        """
        tokens = self.effective_max_num_batched_tokens
        if has("in_flight_counts_async_batches", self.version) and self.effective_async_scheduling:
            return 2 * tokens
        return tokens
