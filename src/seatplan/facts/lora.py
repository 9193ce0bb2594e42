"""LoRA's GPU slots: the stacked A and B tensors vLLM 0.32 allocates at load for every module it wraps, ``max_loras``
slots of ``max_lora_rank`` each, whatever adapters are loaded later.

vLLM wraps every module the model supports unless ``--lora-target-modules`` narrows them
(``vllm/lora/model_manager.py:467-520``, ``_create_lora_modules``; ``vllm/lora/utils.py:232``: every linear layer, and
the embeddings a model names in ``embedding_modules``, e.g. Qwen3's ``embed_tokens`` and ``lm_head``,
``vllm/model_executor/models/qwen3.py:288-291``), with ``lora_slots = max_loras`` (``model_manager.py:339-340``), in
``lora_dtype`` (the model's dtype under ``auto``, ``vllm/config/lora.py:138-139``). Per wrapped module:

- a column-parallel linear (``vllm/lora/layers/base_linear.py:104-155``; merged ``gate_up_proj`` and ``qkv_proj`` one
  slice per packed projection, ``column_parallel_linear.py:200-245``, 476-480): A ``max_loras × rank × input`` per
  slice, B ``max_loras × output_slice_per_rank × rank``;
- a row-parallel linear (``row_parallel_linear.py:27-28``: input per rank, output whole): A ``max_loras × rank ×
  input_per_rank``, B ``max_loras × output × rank``;
- the input embedding (``vocab_parallel_embedding.py:31-48``): A ``max_loras × vocab × rank``, B ``max_loras × hidden ×
  rank``; the LM head's logits processor (``logits_processor.py:93-110``): A ``max_loras × rank × hidden``, B
  ``max_loras × vocab × rank``.

``--fully-sharded-loras`` splits the column-parallel A and the row-parallel B over the ranks (``base_linear.py:115-129``).
MoE experts' LoRA (``FusedMoEWithLoRA``) is not modelled: such a seat is refused.
"""

from __future__ import annotations

from dataclasses import dataclass

from seatplan.errors import SeatplanError
from seatplan.facts.models import ModelShape
from seatplan.facts.settings import LoraSettings
from seatplan.units import cdiv

__all__ = ["LORA_MODULES", "LoraPart", "lora_part"]

# The modules vLLM wraps in a dense decoder (its packed names) and the names an adapter may give them.
LORA_MODULES = ("qkv_proj", "o_proj", "gate_up_proj", "down_proj", "embed_tokens", "lm_head")
PACKED = {"q_proj": "qkv_proj", "k_proj": "qkv_proj", "v_proj": "qkv_proj", "gate_proj": "gate_up_proj", "up_proj": "gate_up_proj"}


@dataclass(frozen=True)
class LoraPart:
    slot_bytes: int  # per GPU, every wrapped module's A and B stacks
    modules: tuple[str, ...]
    per_module_bytes: dict[str, int]


def lora_part(lora: LoraSettings, shape: ModelShape, tp: int, dtype_bytes: int) -> LoraPart:
    """The LoRA slots one tensor-parallel rank holds for this model."""
    if shape.num_experts:
        raise SeatplanError("seatplan does not model LoRA on a mixture-of-experts model (vLLM's FusedMoEWithLoRA slots)",
                            where="lora", fix="run the seat as `engine: fixed` with the memory_cap_bytes you measured")
    modules = _targets(lora.target_modules)
    slots, rank = lora.max_loras, lora.max_lora_rank
    hidden, vocab, layers = shape.hidden_size, shape.vocab_size, shape.num_layers
    q = shape.num_attention_heads * shape.head_size
    kv_heads_per_rank = max(1, shape.num_kv_heads // tp) if shape.num_kv_heads else 1
    kv = kv_heads_per_rank * shape.head_size
    intermediate = shape.intermediate_size or 0
    shard = lora.fully_sharded
    column_rank = cdiv(rank, tp) if shard else rank  # the column-parallel A's rank per GPU

    def column(input_size: int, outputs: list[int]) -> int:
        return slots * (len(outputs) * column_rank * input_size + sum(outputs) * rank)

    def row(input_per_rank: int, output: int) -> int:
        return slots * (rank * input_per_rank + (cdiv(output, tp) if shard else output) * rank)

    per_layer = {
        "qkv_proj": column(hidden, [q // tp, kv, kv]),
        "o_proj": row(q // tp, hidden),
        "gate_up_proj": column(hidden, [intermediate // tp, intermediate // tp]),
        "down_proj": row(intermediate // tp, hidden),
    }
    per_module = {name: layers * per_layer[name] * dtype_bytes for name in per_layer if name in modules}
    if "embed_tokens" in modules:
        per_module["embed_tokens"] = slots * (vocab * rank + hidden * rank) * dtype_bytes
    if "lm_head" in modules:
        per_module["lm_head"] = slots * (rank * hidden + vocab * rank) * dtype_bytes
    return LoraPart(sum(per_module.values()), tuple(sorted(per_module)), per_module)


def _targets(target_modules: tuple[str, ...] | None) -> set[str]:
    if target_modules is None:
        return set(LORA_MODULES)
    found = set()
    for name in target_modules:
        module = PACKED.get(name, name)
        if module not in LORA_MODULES:
            raise SeatplanError(f"LoRA target module {name!r} is none seatplan models ({', '.join(LORA_MODULES)})",
                                where="lora.target_modules", fix="name the modules vLLM wraps, or leave target_modules out (all of them)")
        found.add(module)
    return found
