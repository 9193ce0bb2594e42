"""Weight bytes per GPU: *as stored* (exact from safetensors headers or the index's ``total_size``, else
estimated from the config) and *as loaded* (what one vLLM rank holds, with the rule used).

A safetensors file starts with an 8-byte little-endian header length, then that many bytes of JSON
naming every tensor's dtype, shape and byte range. Only the header is ever read.

As loaded, per rank, by quantization method (vLLM's own layer code):

* **bf16 / fp16, FP8 (per-tensor, per-channel or 128×128 blocks), INT8/INT4 (compressed-tensors, AWQ,
  GPTQ)**: the checkpoint's tensors as they are, column/row-parallel layers split over the TP ranks,
  vocab-parallel embeddings padded to 64 rows and split, and held whole on every rank what TP does not
  shard: norms, MoE routers, MLA down-projections, K/V projections when KV heads < TP (one head per rank).
* **MXFP4** (``quantization/mxfp4.py``: only the fused MoE experts are FP4; attention, embeddings, lm_head
  and routers stay bf16): per rank and MoE layer, ``E × (2·I′·H′/2 + 2·I′·H′/32 + 2·I′·2)`` for
  gate_up (FP4 pairs in uint8, one e8m0 scale per 32, bf16 bias) and ``E × (H′·I′/2 + H′·I′/32 + H′·2)``
  for down, with ``I′ = round_up(I / TP, a)`` and ``H′ = round_up(H, b)`` padded to what the backend's
  kernels want: Marlin a=128, b=256; FlashInfer SM100 TRT-LLM/BF16 a=b=256; FlashInfer SM100 CUTLASS and
  SM90 BF16 a=b=128; Triton a=64, b=1. The down bias (E × H′) is not sharded: every rank holds it whole.
  The padding is why a log's "Model loading took" exceeds the checkpoint's share, most at TP 4 and 8
  (gpt-oss-120b: I = 2880 → 720 per rank at TP 4 → 768).
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from seatplan.errors import SeatplanError
from seatplan.facts.architecture import AttentionLayer, ModelLayout, StateLayer, count_field
from seatplan.facts.reader import read_optional_json
from seatplan.fileio import check_input_file
from seatplan.jsontext import JsonTooDeep, loads_bounded
from seatplan.units import MAX_PLAUSIBLE_BYTES, round_up

MAX_HEADER_BYTES = 100 << 20  # the safetensors format's own limit
VOCAB_PADDING = 64  # vLLM's pad_vocab_size
DTYPE_BYTES = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "I16": 2, "I8": 1, "U8": 1, "BOOL": 1,
               "U16": 2, "U32": 4, "U64": 8, "F8_E4M3": 1, "F8_E5M2": 1, "F8_E8M0": 1}
# Kept whole on every rank: norms, MoE routers, MLA down-projections (ReplicatedLinear).
REPLICATED_MARKERS = ("norm", "router", "mlp.gate.", "kv_a_proj_with_mqa", "q_a_proj", "e_score_correction_bias",
                      "shared_expert_gate")
SHARDED_VECTOR_MARKERS = ("q_proj", "k_proj", "v_proj", "qkv", "a_log", "dt_bias", "conv1d")


@dataclass(frozen=True)
class TensorInfo:
    name: str
    dtype: str
    shape: tuple[int, ...]
    nbytes: int


# vLLM's MXFP4 MoE backends and the (intermediate, hidden) alignment each pads to (Mxfp4MoEMethod.create_weights).
MXFP4_PADDING = {
    "marlin": (128, 256),
    "flashinfer-sm100-trtllm": (256, 256),
    "flashinfer-sm100-bf16": (256, 256),
    "flashinfer-sm100-cutlass": (128, 128),
    "flashinfer-sm90-bf16": (128, 128),
    "triton": (64, 1),
}
# Marlin: the backend on GPUs without native FP4 the seats here run on (Ampere, Ada, RTX PRO 6000 / SM120);
# Hopper picks Triton when vLLM's triton_kernels are present, B200 FlashInfer.
DEFAULT_MXFP4_BACKEND = "marlin"
MXFP4_BLOCK = 32
BIAS_BYTES = 2  # bf16


@dataclass(frozen=True)
class WeightsResult:
    total_bytes: int
    per_rank_bytes: int          # as loaded by one vLLM rank
    exact: bool
    source: str                  # where the stored figure comes from
    stored_per_rank_bytes: int = 0  # the checkpoint's share of one rank, as stored
    rule: str = "the checkpoint's tensors as they are, split by TP the way vLLM shards its layers"


def read_safetensors_header(path: Path) -> list[TensorInfo]:
    """Parse one safetensors header, checking its declared length before reading anything else."""
    try:
        return _read_header(path)
    except OSError as problem:
        raise SeatplanError(f"cannot read {path.name}: {problem.strerror}", where=str(path),
                            fix="check that the file exists and is readable") from None


def raw_header(path: Path) -> tuple[bytes, bytes]:
    """The 8-byte little-endian length and the header bytes it announces, read no further than the
    format's limit: the one place a safetensors file is opened (the facts and their hashes read the same bytes)."""
    check_input_file(path, "safetensors file")
    with path.open("rb") as stream:
        length = stream.read(8)
        return length, stream.read(min(int.from_bytes(length, "little"), MAX_HEADER_BYTES))


def header_sha256(path: Path) -> str:
    """SHA-256 of the length and the header (never the tensors, which a plan does not read)."""
    try:
        length, raw = raw_header(path)
    except OSError as problem:
        return f"unreadable ({problem.strerror})"
    return hashlib.sha256(length + raw).hexdigest()


def _read_header(path: Path) -> list[TensorInfo]:
    size = path.stat().st_size
    if size < 8:
        raise SeatplanError(f"{path.name} is {size} bytes, shorter than a safetensors header", where=f"{path}: header length",
                            fix="the file is truncated; download it again")
    length, raw = raw_header(path)
    declared = int.from_bytes(length, "little")
    if declared > MAX_HEADER_BYTES or declared > size - 8:
        raise SeatplanError(
            f"{path.name} declares a {declared}-byte header but the file has {size} bytes (limit {MAX_HEADER_BYTES})",
            where=f"{path}: header length", fix="the file is damaged or not a safetensors file; download it again",
        )
    try:
        header = loads_bounded(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError, JsonTooDeep, ValueError) as problem:
        reason = f" ({problem})" if isinstance(problem, JsonTooDeep) else ""
        raise SeatplanError(f"{path.name} has a header that is not a safetensors JSON header{reason}", where=f"{path}: header",
                            fix="the file is damaged; download it again") from None
    if not isinstance(header, dict):
        raise SeatplanError(f"{path.name} header is not a JSON object", where=f"{path}: header", fix="download it again")
    data_bytes = size - 8 - declared
    return [_tensor(path, name, entry, data_bytes) for name, entry in header.items() if name != "__metadata__"]


def _tensor(path: Path, name: str, entry: Any, data_bytes: int) -> TensorInfo:
    where = f"{path}: header[{name!r}]"
    if not isinstance(entry, dict):
        raise SeatplanError("tensor entry is not an object", where=where, fix="download the file again")
    dtype, shape, offsets = entry.get("dtype"), entry.get("shape"), entry.get("data_offsets")
    if not isinstance(dtype, str) or not isinstance(shape, list) or not all(isinstance(d, int) and d >= 0 for d in shape):
        raise SeatplanError("tensor entry needs a dtype string and a shape of non-negative integers", where=where,
                            fix="download the file again")
    if (not isinstance(offsets, list) or len(offsets) != 2 or not all(isinstance(o, int) for o in offsets)
            or not 0 <= offsets[0] <= offsets[1] <= data_bytes):
        raise SeatplanError(f"data_offsets {offsets!r} fall outside the file's {data_bytes} data bytes", where=where,
                            fix="the file is truncated or damaged; download it again")
    nbytes = offsets[1] - offsets[0]
    # safetensors' own validation: the byte range holds exactly the shape's elements (known dtypes only).
    if dtype in DTYPE_BYTES and math.prod(shape) * DTYPE_BYTES[dtype] != nbytes:
        raise SeatplanError(f"shape {shape} of {dtype} needs {math.prod(shape) * DTYPE_BYTES[dtype]} bytes but its data_offsets "
                            f"hold {nbytes}", where=where, fix="the file is damaged; download it again")
    return TensorInfo(name=name, dtype=dtype, shape=tuple(shape), nbytes=nbytes)


def tensor_bytes_on_rank(tensor: TensorInfo, layout: ModelLayout, tp: int) -> float:
    """The share of one checkpoint tensor a tensor-parallel rank holds."""
    if tp == 1:
        return tensor.nbytes
    name = tensor.name.lower()
    if any(marker in name for marker in REPLICATED_MARKERS):
        return tensor.nbytes
    if len(tensor.shape) <= 1 and not any(marker in name for marker in SHARDED_VECTOR_MARKERS):
        return tensor.nbytes
    if "embed" in name or "lm_head" in name:
        vocab = _vocab(layout.text_config, layout.source)
        return tensor.nbytes * _padded_vocab(vocab) / vocab / tp if vocab else tensor.nbytes / tp
    if ("k_proj" in name or "v_proj" in name) and 0 < layout.num_kv_heads < tp:
        return tensor.nbytes / layout.num_kv_heads  # one replicated head per rank
    return tensor.nbytes / tp


def _safetensors_files(model_dir: Path) -> tuple[list[Path], dict[str, Any] | None, Path | None]:
    index_path = model_dir / "model.safetensors.index.json"
    index = read_optional_json(index_path)
    if index is not None:
        weight_map = index.get("weight_map")
        names = sorted(set(weight_map.values())) if isinstance(weight_map, dict) else []
        files = [model_dir / name for name in names]
        if files and all(path.exists() for path in files):
            return files, index, index_path
        return [], index, index_path
    files = sorted(model_dir.glob("*.safetensors"))
    # A dangling cache symlink is a download still in progress: estimate rather than half-count.
    return (files if all(path.exists() for path in files) else []), None, None


def mtp_layer_count(layout: ModelLayout) -> int:
    """The MTP layers a checkpoint carries after its decoder layers (``num_nextn_predict_layers``, vLLM's key)."""
    return count_field(layout.text_config, ("num_nextn_predict_layers",), layout.source)


def is_mtp_tensor(name: str, layout: ModelLayout) -> bool:
    """A tensor of an MTP layer, which the main model skips as it loads (vLLM 0.32 vllm/model_executor/models/utils.py:575-601,
    ``get_spec_layer_idx_from_weight_name``: ``model.layers.{num_hidden_layers + i}.``; Qwen3-Next's ``mtp.``, qwen3_next.py:823)."""
    if name.startswith("mtp."):
        return True
    count = mtp_layer_count(layout)
    if not count:
        return False
    base = count_field(layout.text_config, ("num_hidden_layers",), layout.source)
    prefixes = tuple(f"{root}layers.{base + i}." for i in range(count) for root in ("model.", "", "model.language_model."))
    return name.startswith(prefixes)


def weights(model_dir: Path, layout: ModelLayout, tp: int, model_dtype_bytes: int,
            mxfp4_backend: str = DEFAULT_MXFP4_BACKEND, mtp: bool = False) -> WeightsResult:
    """The weights one rank holds: the main model's (its MTP layers left out, as vLLM's loader skips them), or with
    ``mtp`` those MTP layers only (what the MTP speculator loads)."""
    files, index, index_path = _safetensors_files(model_dir)
    if files:
        tensors = [tensor for path in files for tensor in read_safetensors_header(path) if is_mtp_tensor(tensor.name, layout) == mtp]
        if mtp and not tensors:
            files = []  # the checkpoint's headers name no MTP tensor: estimate them below
    if mtp and not files:
        per_layer = estimate_weights(layout, tp, model_dtype_bytes).per_rank_bytes / max(1, len(layout.layers))
        count = mtp_layer_count(layout)
        return WeightsResult(math.ceil(per_layer * count), math.ceil(per_layer * count), False,
                             f"estimated: {count} MTP layer(s) at the decoder's average layer", math.ceil(per_layer * count))
    if files:
        total = sum(tensor.nbytes for tensor in tensors)
        per_rank = round(sum(tensor_bytes_on_rank(tensor, layout, tp) for tensor in tensors))
        result = WeightsResult(total, per_rank, True, f"safetensors headers ({len(files)} files)" + (", MTP layers" if mtp else ""), per_rank)
        return result if mtp else as_loaded(result, layout, tp, mxfp4_backend)
    estimate = estimate_weights(layout, tp, model_dtype_bytes)
    total_size = (index or {}).get("metadata", {}).get("total_size") if isinstance((index or {}).get("metadata"), dict) else None
    if isinstance(total_size, int) and not isinstance(total_size, bool) and total_size > MAX_PLAUSIBLE_BYTES:
        raise SeatplanError(f"metadata.total_size {total_size} bytes is beyond any hardware (limit {MAX_PLAUSIBLE_BYTES:,})",
                            where=f"{index_path}: metadata.total_size", fix="the index is damaged; download it again")
    if isinstance(total_size, int) and not isinstance(total_size, bool) and total_size > 0:
        share = estimate.stored_per_rank_bytes / estimate.total_bytes if estimate.total_bytes else 1 / tp
        stored = round(total_size * share)
        return as_loaded(WeightsResult(total_size, stored, True, f"{index_path} total_size", stored), layout, tp, mxfp4_backend)
    return as_loaded(estimate, layout, tp, mxfp4_backend)


def as_loaded(stored: WeightsResult, layout: ModelLayout, tp: int, mxfp4_backend: str = DEFAULT_MXFP4_BACKEND) -> WeightsResult:
    """The stored per-rank figure turned into what one vLLM rank holds (see the module docstring)."""
    moe = mxfp4_moe(layout)
    if moe is None:
        return stored
    layers, experts, hidden, intermediate = moe
    align_i, align_h = MXFP4_PADDING[mxfp4_backend]
    stored_share = layers * mxfp4_expert_bytes(experts, hidden, intermediate) / tp
    padded_i, padded_h = round_up(intermediate // tp, align_i), round_up(hidden, align_h)
    loaded = layers * mxfp4_expert_bytes(experts, padded_h, padded_i)
    rule = (f"MXFP4 MoE on vLLM's {mxfp4_backend} backend pads each rank's experts to intermediate "
            f"{intermediate // tp}→{padded_i}, hidden {hidden}→{padded_h} (round_up {align_i}/{align_h}); the down bias is "
            "held whole on every rank; attention, embeddings, lm_head and routers stay bf16")
    return WeightsResult(stored.total_bytes, round(stored.stored_per_rank_bytes - stored_share + loaded), stored.exact,
                         stored.source, stored.stored_per_rank_bytes, rule)


def mxfp4_expert_bytes(experts: int, hidden: int, intermediate: int) -> int:
    """One MoE layer's MXFP4 experts: gate_up (2·I × H) and down (H × I) as FP4 pairs, e8m0 scales and bf16 biases
    (the whole checkpoint's sizes, or one rank's padded share: the layout is the same)."""
    gate_up = 2 * intermediate * hidden // 2 + 2 * intermediate * hidden // MXFP4_BLOCK + 2 * intermediate * BIAS_BYTES
    down = hidden * intermediate // 2 + hidden * intermediate // MXFP4_BLOCK + hidden * BIAS_BYTES
    return experts * (gate_up + down)


def mxfp4_moe(layout: ModelLayout) -> tuple[int, int, int, int] | None:
    """(MoE layers, experts, hidden, expert intermediate size) of an MXFP4 checkpoint, else None."""
    quant = layout.full_config.get("quantization_config")
    if not isinstance(quant, dict) or str(quant.get("quant_method", "")).lower() != "mxfp4":
        return None
    text, source = layout.text_config, layout.source
    hidden = count_field(text, ("hidden_size", "d_model", "n_embd"), source)
    intermediate = count_field(text, ("intermediate_size", "ffn_hidden_size", "n_inner"), source, 4 * hidden)
    expert_size = count_field(text, ("moe_intermediate_size",), source, intermediate)
    num_layers = count_field(text, ("num_hidden_layers", "num_layers", "n_layer", "n_layers"), source, len(layout.layers))
    layers = sum(1 for index in range(num_layers) if _is_moe_layer(text, index, source))
    if not layers:
        return None
    return layers, count_field(text, EXPERT_COUNT_KEYS, source), hidden, expert_size


# --- estimation from the config ---------------------------------------------------------------


@dataclass
class _ParamCounts:
    """Parameter counts split by how they are stored and sharded."""

    embedding: int = 0          # vocab-parallel, kept in the model dtype
    lm_head: int = 0
    linear: int = 0             # column/row-parallel, quantizable
    experts: int = 0            # MoE expert linears, quantizable (MXFP4 quantizes only these)
    kv_proj: int = 0            # K/V projections, replicated when KV heads < TP
    replicated: int = 0         # norms, routers, MLA down-projections
    vision: int = 0             # multimodal towers, model dtype
    active_experts: int = 0     # expert parameters one token passes through


def _vocab(text: dict[str, Any], source: str) -> int:
    return count_field(text, ("vocab_size", "padded_vocab_size"), source)


def _padded_vocab(vocab: int) -> int:
    return round_up(vocab, VOCAB_PADDING)


EXPERT_COUNT_KEYS = ("num_experts", "num_local_experts", "n_routed_experts", "moe_num_experts")


def _is_moe_layer(text: dict[str, Any], index: int, source: str) -> bool:
    if not count_field(text, EXPERT_COUNT_KEYS, source):
        return False
    if index < count_field(text, ("first_k_dense_replace",), source):
        return False
    dense_layers = text.get("mlp_only_layers")
    if isinstance(dense_layers, list) and index in dense_layers:
        return False
    sparse_step = count_field(text, ("decoder_sparse_step",), source)
    if sparse_step:
        return (index + 1) % sparse_step == 0
    frequency = count_field(text, ("moe_layer_freq",), source) or 1
    return index % frequency == 0


def _attention_params(layer: AttentionLayer, text: dict[str, Any], hidden: int, counts: _ParamCounts, source: str) -> None:
    heads = count_field(text, ("num_attention_heads", "n_head"), source)
    if layer.kind == "mla":
        nope = count_field(text, ("qk_nope_head_dim",), source)
        rope = count_field(text, ("qk_rope_head_dim",), source)
        value_dim = count_field(text, ("v_head_dim",), source, nope)
        q_rank = count_field(text, ("q_lora_rank",), source)
        rank = count_field(text, ("kv_lora_rank",), source)
        if q_rank:
            counts.replicated += hidden * q_rank
            counts.linear += q_rank * heads * (nope + rope)
        else:
            counts.linear += hidden * heads * (nope + rope)
        counts.replicated += hidden * (rank + rope)
        counts.linear += rank * heads * (nope + value_dim) + heads * value_dim * hidden
        return
    counts.linear += 2 * hidden * heads * layer.head_size  # q and o
    counts.kv_proj += 2 * hidden * layer.num_kv_heads * layer.head_size


def _state_params(layer: StateLayer, hidden: int, counts: _ParamCounts) -> None:
    if layer.mamba_type == "gdn":
        key_dim, value_dim = layer.num_k_heads * layer.k_head_dim, layer.num_v_heads * layer.v_head_dim
        counts.linear += hidden * (2 * key_dim + 2 * value_dim + 2 * layer.num_v_heads) + value_dim * hidden
        counts.linear += (2 * key_dim + value_dim) * layer.conv_kernel
        return
    inner = layer.intermediate_size
    conv_dim = inner + 2 * layer.n_groups * layer.state_size
    counts.linear += hidden * (inner + conv_dim + layer.num_heads) + inner * hidden + conv_dim * layer.conv_kernel


def _mlp_params(text: dict[str, Any], index: int, hidden: int, counts: _ParamCounts, source: str) -> None:
    intermediate = count_field(text, ("intermediate_size", "ffn_hidden_size", "n_inner"), source, 4 * hidden)
    if not _is_moe_layer(text, index, source):
        counts.linear += 3 * hidden * intermediate
        return
    experts = count_field(text, EXPERT_COUNT_KEYS, source)
    per_token = count_field(text, ("num_experts_per_tok", "experts_per_token", "moe_topk"), source, 1)
    expert_size = count_field(text, ("moe_intermediate_size",), source, intermediate)
    counts.experts += experts * 3 * hidden * expert_size
    counts.replicated += hidden * experts
    shared = (count_field(text, ("shared_expert_intermediate_size",), source)
              or count_field(text, ("n_shared_experts",), source) * expert_size)
    counts.linear += 3 * hidden * shared
    counts.active_experts += 3 * hidden * per_token * expert_size


def _vision_params(config: dict[str, Any], text_hidden: int, source: str) -> int:
    vision = config.get("vision_config")
    if not isinstance(vision, dict):
        return 0
    where = f"{source} vision_config"
    depth = count_field(vision, ("num_hidden_layers", "depth", "num_layers"), where)
    width = count_field(vision, ("hidden_size", "embed_dim", "width"), where)
    inner = count_field(vision, ("intermediate_size",), where, 4 * width)
    return depth * (4 * width * width + 2 * width * inner) + width * text_hidden


def count_params(layout: ModelLayout) -> _ParamCounts:
    text, source = layout.text_config, layout.source
    hidden = count_field(text, ("hidden_size", "d_model", "n_embd"), source)
    vocab = _vocab(text, source)
    counts = _ParamCounts(embedding=vocab * hidden)
    tied = bool(text.get("tie_word_embeddings", layout.full_config.get("tie_word_embeddings", False)))
    counts.lm_head = 0 if tied else vocab * hidden
    num_layers = count_field(text, ("num_hidden_layers", "num_layers", "n_layer", "n_layers"), source, len(layout.layers))
    for layer in layout.layers:
        if isinstance(layer, AttentionLayer):
            _attention_params(layer, text, hidden, counts, source)
        else:
            _state_params(layer, hidden, counts)
    for index in range(num_layers):
        _mlp_params(text, index, hidden, counts, source)
    counts.replicated += (2 * num_layers + 1) * hidden
    counts.vision = _vision_params(layout.full_config, hidden, source)
    return counts


def _quantized_bytes_per_param(quant: dict[str, Any] | None, model_dtype_bytes: int, source: str) -> tuple[float, bool]:
    """(bytes per quantized linear parameter, whether only MoE experts are quantized)."""
    if not quant:
        return model_dtype_bytes, False
    method = str(quant.get("quant_method", "")).lower()
    if method == "mxfp4":
        return 4.25 / 8, True  # 4-bit values + one 8-bit scale per 32
    where = f"{source} quantization_config"
    bits = count_field(quant, ("bits", "w_bit"), where)
    if method in ("awq", "gptq", "awq_marlin", "gptq_marlin") or bits in (2, 3, 4, 8) and method != "fp8":
        bits = bits or 4
        # group_size -1 means one group per row: negligible scale bytes
        group_value = quant.get("group_size", quant.get("q_group_size"))
        group = group_value if isinstance(group_value, int) and not isinstance(group_value, bool) and group_value > 0 else 4096
        return bits / 8 + 2 / group + bits / 8 / group, False  # packed ints + fp16 scales + packed zeros
    if method in ("fp8", "modelopt", "compressed-tensors", "fbgemm_fp8"):
        block = quant.get("weight_block_size")
        valid_block = isinstance(block, list) and len(block) == 2 and all(isinstance(b, int) and b > 0 for b in block)
        scale = 4 / (block[0] * block[1]) if valid_block and block is not None else 0.0  # fp32 scale per block
        return 1 + scale, False
    return model_dtype_bytes, False


def estimate_weights(layout: ModelLayout, tp: int, model_dtype_bytes: int) -> WeightsResult:
    counts = count_params(layout)
    quant = layout.full_config.get("quantization_config")
    per_param, experts_only = _quantized_bytes_per_param(quant if isinstance(quant, dict) else None, model_dtype_bytes,
                                                         layout.source)
    linear_bytes = counts.linear * (model_dtype_bytes if experts_only else per_param)
    kv_bytes = counts.kv_proj * (model_dtype_bytes if experts_only else per_param)
    moe = mxfp4_moe(layout)
    # MXFP4 checkpoints store blocks, scales and biases per expert: the exact layout, not a per-parameter rate.
    expert_bytes = layout_bytes if (moe and (layout_bytes := moe[0] * mxfp4_expert_bytes(*moe[1:]))) else counts.experts * per_param
    vocab = _vocab(layout.text_config, layout.source)
    vocab_bytes = (counts.embedding + counts.lm_head) * model_dtype_bytes
    fixed_bytes = (counts.replicated + counts.vision) * model_dtype_bytes
    total = linear_bytes + kv_bytes + expert_bytes + vocab_bytes + fixed_bytes
    kv_share = max(1, layout.num_kv_heads // tp) / layout.num_kv_heads if layout.num_kv_heads else 1 / tp
    padded = _padded_vocab(vocab) / vocab if vocab else 1
    per_rank = ((linear_bytes + expert_bytes) / tp + kv_bytes * kv_share + vocab_bytes * padded / tp
                + counts.replicated * model_dtype_bytes + counts.vision * model_dtype_bytes / tp)
    return WeightsResult(math.ceil(total), math.ceil(per_rank), False, "estimated from config.json", math.ceil(per_rank))


def parameter_totals(layout: ModelLayout) -> tuple[int, int]:
    """(total parameters, parameters active per token) from the config."""
    counts = count_params(layout)
    total = (counts.embedding + counts.lm_head + counts.linear + counts.experts + counts.kv_proj
             + counts.replicated + counts.vision)
    return total, total - counts.experts + counts.active_experts


# --quantization fp8 on a checkpoint that is not quantized: vLLM quantizes each linear layer's weight to fp8 as it
# loads it (vllm/model_executor/layers/quantization/fp8.py, the online Fp8LinearMethod/Fp8MoEMethod: one byte per
# value and one float32 scale per checkpoint tensor); embeddings, the LM head, norms and MoE routers (built without a
# quant config) keep the model dtype.
FP8_KEPT_MARKERS = ("embed", "lm_head", "norm", "router", "mlp.gate.", "shared_expert_gate", "visual", "vision")


def _online_fp8_tensor(tensor: TensorInfo) -> bool:
    name = tensor.name.lower()
    return (len(tensor.shape) >= 2 and name.endswith("weight") and tensor.dtype in ("BF16", "F16", "F32")
            and not any(marker in name for marker in FP8_KEPT_MARKERS))


def online_fp8(model_dir: Path, layout: ModelLayout, tp: int, stored: WeightsResult, model_dtype_bytes: int) -> WeightsResult:
    """The weights one rank holds under ``--quantization fp8`` of an unquantized checkpoint."""
    files, _, _ = _safetensors_files(model_dir)
    if files:
        tensors = [tensor for path in files for tensor in read_safetensors_header(path)]
        per_rank = 0.0
        for tensor in tensors:
            share = tensor_bytes_on_rank(tensor, layout, tp)
            per_rank += share / DTYPE_BYTES[tensor.dtype] + 4 if _online_fp8_tensor(tensor) else share
        return WeightsResult(stored.total_bytes, round(per_rank), stored.exact, stored.source, stored.stored_per_rank_bytes,
                             "online fp8 (--quantization fp8): linear weights one byte per value and a float32 scale each; "
                             "embeddings, LM head, norms and routers in the model dtype")
    counts = count_params(layout)
    quantizable = (counts.linear + counts.experts) / tp + counts.kv_proj * (max(1, layout.num_kv_heads // tp) / layout.num_kv_heads
                                                                               if layout.num_kv_heads else 1 / tp)
    saved = quantizable * (model_dtype_bytes - 1)
    return WeightsResult(stored.total_bytes, math.ceil(stored.per_rank_bytes - saved), False, stored.source, stored.stored_per_rank_bytes,
                         "online fp8 (--quantization fp8), estimated from config.json: linear weights one byte per value")
