"""``load_model_facts``: the facts stage's one entry point for the other stages."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

from seatplan.errors import SeatplanError
from seatplan.facts import architecture, context, hub_record, kv_cache, lora, reader, speculative, weights
from seatplan.facts import layout as kv_layout
from seatplan.facts.models import EngineSettings, LoraFacts, ModelFacts, ModelShape, SpeculativeFacts, YarnOption
from seatplan.facts.settings import MTP_METHOD
from seatplan.hub_names import parse_hub_id
from seatplan.units import MAX_PLAUSIBLE_BYTES

# The facts stage's entry points for the other stages (tests/test_import_graph.py holds them to this list).
__all__ = ["COMMIT_KEY", "FACT_FILES", "load_model_facts", "located_model_files_sha256", "model_files_sha256"]

DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "half": 2, "float32": 4, "float": 4}
DTYPE_NAMES = {"half": "float16", "float": "float32"}
# The files a model's facts are read from (besides the safetensors headers); a plan records their hashes.
FACT_FILES = ("config.json", "generation_config.json", "hf_quant_config.json", "model.safetensors.index.json")
ABSENT = "absent"
COMMIT_KEY = "commit"  # in a model's file hashes: the Hub commit its facts were read from
# vLLM keeps only these keys of generation_config.json as the server's default sampling params.
GENERATION_KEYS = ("repetition_penalty", "presence_penalty", "frequency_penalty", "temperature", "top_k", "top_p",
                   "min_p", "max_new_tokens")


def resolve_model_dtype(requested: str, config_dtype: str | None, quant: dict[str, Any] | None,
                        source: str = "config.json") -> tuple[str, int]:
    """vLLM's ``--dtype auto``: the checkpoint's dtype, float32 checkpoints run in bfloat16, AWQ in float16."""
    name = requested.lower().removeprefix("torch.")
    where = "--dtype"
    if name == "auto":
        where = f"{source}: torch_dtype"
        if quant and str(quant.get("quant_method", "")).lower().startswith("awq"):
            return "float16", 2
        name = (config_dtype or "float32").lower().removeprefix("torch.")
        if DTYPE_NAMES.get(name, name) == "float32":
            name = "bfloat16"
    name = DTYPE_NAMES.get(name, name)
    if name not in DTYPE_BYTES:
        raise SeatplanError(f"unknown dtype {name!r}", where=where, fix="use auto, bfloat16, float16 or float32")
    return name, DTYPE_BYTES[name]


def resolve_kv_dtype(requested: str, model_dtype: str, model_dtype_bytes: int, quant: dict[str, Any] | None) -> tuple[str, int]:
    """``--kv-cache-dtype``: fp8 variants store one byte; ``auto`` follows the model, or the
    checkpoint's own KV quantization when it declares one."""
    name = requested.lower()
    if name == "auto":
        if quant and _declares_fp8_kv(quant):
            return "fp8", 1
        return model_dtype, model_dtype_bytes
    if name.startswith("fp8"):
        return name, 1
    if name in DTYPE_BYTES:
        return DTYPE_NAMES.get(name, name), DTYPE_BYTES[name]
    raise SeatplanError(f"unknown KV cache dtype {requested!r}", where="--kv-cache-dtype",
                        fix="use auto, fp8, fp8_e4m3 or fp8_e5m2")


def _declares_fp8_kv(quant: dict[str, Any]) -> bool:
    algo = quant.get("kv_cache_quant_algo")
    if isinstance(algo, str) and "fp8" in algo.lower():
        return True
    scheme = quant.get("kv_cache_scheme")
    return isinstance(scheme, dict) and scheme.get("num_bits") == 8 and scheme.get("type") == "float"


def _quantization(config: dict[str, Any], model_dir: Path) -> dict[str, Any] | None:
    quant = config.get("quantization_config")
    if isinstance(quant, dict):
        return quant
    modelopt = reader.read_optional_json(model_dir / "hf_quant_config.json")
    if modelopt and isinstance(modelopt.get("quantization"), dict):
        return {"quant_method": "modelopt", **modelopt["quantization"]}
    return None


def _generation_defaults(model_dir: Path) -> dict[str, Any]:
    document = reader.read_optional_json(model_dir / "generation_config.json") or {}
    return {key: document[key] for key in GENERATION_KEYS if document.get(key) is not None}


def _shape(layout: architecture.ModelLayout) -> ModelShape:
    text, source = layout.text_config, layout.source

    def count(*keys: str) -> int:
        return architecture.count_field(text, keys, source)

    total, active = weights.parameter_totals(layout)
    return ModelShape(
        vocab_size=count("vocab_size", "padded_vocab_size"),
        hidden_size=count(*architecture.HIDDEN_KEYS),
        num_layers=count(*architecture.LAYER_COUNT_KEYS) or len(layout.layers),
        intermediate_size=count("intermediate_size", "ffn_hidden_size") or None,
        num_attention_heads=count(*architecture.ATTENTION_HEAD_KEYS),
        num_kv_heads=layout.num_kv_heads,
        head_size=layout.head_size,
        num_experts=count("num_experts", "num_local_experts", "n_routed_experts"),
        experts_per_token=count("num_experts_per_tok", "experts_per_token"),
        moe_intermediate_size=count("moe_intermediate_size") or None,
        tie_word_embeddings=bool(text.get("tie_word_embeddings", False)),
        multimodal=layout.multimodal,
        total_params=total,
        active_params=active,
    )


def cpu_flags(cpuinfo: Path = Path("/proc/cpuinfo")) -> frozenset[str]:
    """The feature flags this machine's CPU announces (empty where the kernel shows none)."""
    try:
        return frozenset(cpuinfo.read_text(errors="replace").split())
    except OSError:
        return frozenset()


# The CPU flags vLLM's CPU platform decides by: AMX tiles make it run MLA with AMX_MLA; AVX512-BF16 makes it keep
# SSM state in float32.
AMX_FLAG = "amx_tile"
AVX512_BF16_FLAG = "avx512_bf16"


def cpu_has_amx(cpuinfo: Path = Path("/proc/cpuinfo")) -> bool:
    """Whether this machine's CPU has AMX tiles."""
    return AMX_FLAG in cpu_flags(cpuinfo)


def cpu_has_avx512_bf16(cpuinfo: Path = Path("/proc/cpuinfo")) -> bool:
    """Whether this machine's CPU has AVX512-BF16."""
    return AVX512_BF16_FLAG in cpu_flags(cpuinfo)


def detect_cpu_features(settings: EngineSettings) -> EngineSettings:
    """The CPU features a CPU seat's settings leave open, read off the machine seatplan runs on."""
    if settings.cpu_amx is not None and settings.cpu_avx512_bf16 is not None:
        return settings
    flags = cpu_flags()  # read once for both
    detected: dict[str, bool] = {}
    if settings.cpu_amx is None:
        detected["cpu_amx"] = AMX_FLAG in flags
    if settings.cpu_avx512_bf16 is None:
        detected["cpu_avx512_bf16"] = AVX512_BF16_FLAG in flags
    return settings.model_copy(update=detected)


def locate(model: str | Path) -> Path:
    """A local directory (or its config.json) as it is; else ``ORG/NAME[@REVISION]`` read from the Hub
    (configs and safetensors headers only, see :mod:`seatplan.facts.hub`)."""
    name = str(model)
    if Path(name).expanduser().exists() or parse_hub_id(name) is None:
        return reader.locate_model(name)
    from seatplan.facts import hub  # noqa: PLC0415 (huggingface_hub takes 0.15-0.25 s to load; see facts/hub_record.py)

    return hub.fetch_model(name, FACT_FILES).directory


def load_model_facts(model: str | Path, settings: EngineSettings | None = None) -> ModelFacts:
    """Read a model directory (or a cached Hugging Face id) and compute its facts under ``settings``."""
    settings = settings or EngineSettings()
    if settings.device == "cpu":
        settings = detect_cpu_features(settings)
    model_dir = locate(model)
    config_path = model_dir / "config.json"
    config = reader.read_json(config_path)
    try:
        return _compute(model, model_dir, config, str(config_path), settings)
    except SeatplanError:
        raise
    except (TypeError, ValueError, KeyError, IndexError, ZeroDivisionError, AttributeError, OverflowError) as problem:
        # The specific checks name the field; this catches the long tail of damaged values.
        raise SeatplanError(
            f"the config holds a value seatplan cannot use ({type(problem).__name__}: {problem})",
            where=str(config_path), fix="compare it with the model's original config.json",
        ) from None


def check_plausible(facts: ModelFacts, source: str) -> None:
    """Refuse facts no hardware could hold: each count in the config may be plausible alone and their product not."""
    for name in ("weights_total_bytes", "weights_bytes", "kv_bytes_per_token", "bytes_per_block", "state_bytes_per_request"):
        value = getattr(facts, name)
        if value > MAX_PLAUSIBLE_BYTES:
            raise SeatplanError(f"the config gives {name} = {value:,}, beyond any hardware (limit {MAX_PLAUSIBLE_BYTES:,} bytes)",
                                where=source, fix="check the config.json (layer, head and size counts) for a damaged value")


def _compute(model: str | Path, model_dir: Path, config: dict[str, Any], source: str, settings: EngineSettings) -> ModelFacts:
    layout = architecture.describe(config, source)
    architecture.check_tensor_parallel(layout, settings.tensor_parallel_size)
    quant = _quantization(config, model_dir)
    dtype_name, dtype_bytes = resolve_model_dtype(settings.dtype, layout.config_dtype, quant, source)
    kv_name, kv_bytes = resolve_kv_dtype(settings.kv_cache_dtype, dtype_name, dtype_bytes, quant)
    specs, notes = kv_layout.build_specs(layout, settings, kv_bytes, dtype_bytes)
    draft = None
    if settings.speculative is not None and specs:
        # the draft's layers join the target's in one KV budget, grouped as vLLM groups them (facts.speculative)
        if settings.speculative.method == MTP_METHOD:
            draft = speculative.mtp_part(settings.speculative, layout, specs, model_dir, settings, dtype_bytes)
        else:
            draft = speculative.draft_part(settings.speculative, settings, specs[0].block_size, kv_bytes, dtype_bytes, locate)
        specs = specs + draft.specs
        notes = notes + draft.notes
    plan = kv_cache.group_layers(specs, settings)
    limits = context.context_limits(layout.text_config, settings.version, settings.enable_yarn, settings.yarn_factor,
                                    source)
    weight_result = _gpu_weights(weights.weights(model_dir, layout, settings.tensor_parallel_size, dtype_bytes), model_dir, layout,
                                 settings, quant, dtype_bytes)
    draft_weights = draft.weights_bytes if draft is not None else 0
    shape = _shape(layout)
    lora_facts = None
    if settings.lora is not None:
        lora_name, lora_bytes = (dtype_name, dtype_bytes) if settings.lora.lora_dtype == "auto" else resolve_model_dtype(
            settings.lora.lora_dtype, None, None, "--lora-dtype")
        slots = lora.lora_part(settings.lora, shape, settings.tensor_parallel_size, lora_bytes)
        lora_facts = LoraFacts(max_loras=settings.lora.max_loras, max_lora_rank=settings.lora.max_lora_rank, lora_dtype=lora_name,
                               modules=list(slots.modules), slot_bytes=slots.slot_bytes, per_module_bytes=slots.per_module_bytes)
    lora_weights = lora_facts.slot_bytes if lora_facts is not None else 0
    facts = ModelFacts(
        model=str(model),
        model_dir=str(model_dir),
        architecture=layout.architecture,
        model_type=layout.model_type,
        settings=settings,
        dtype=dtype_name,
        kv_cache_dtype=kv_name,
        kv_dtype_bytes=kv_bytes,
        kv_heads_per_rank=1 if layout.is_mla else architecture.kv_heads_per_rank(layout.num_kv_heads, settings.tensor_parallel_size),
        kv_bytes_per_token=kv_layout.kv_bytes_per_token(specs),
        state_bytes_per_request=sum(getattr(spec, "state_bytes", 0) for spec in specs),
        block_size=plan.block_size,
        bytes_per_block=plan.bytes_per_block,
        layer_groups=plan.groups,
        padding_layers=plan.padding_layers,
        weights_bytes=weight_result.per_rank_bytes + draft_weights + lora_weights,
        weights_total_bytes=weight_result.total_bytes,
        weights_exact=weight_result.exact and (draft is None or draft.weights_exact),
        weights_source=weight_result.source,  # the model's own; a draft's and LoRA's are in their parts
        weights_stored_bytes=weight_result.stored_per_rank_bytes,
        weights_rule=weight_result.rule,
        max_context_derived=limits.derived,
        max_context_default=limits.default,
        max_context_published=limits.published,
        shape=shape,
        lora=lora_facts,
        speculative=None if draft is None else SpeculativeFacts(
            method=draft.method, model=draft.model, num_speculative_tokens=draft.num_speculative_tokens,
            tensor_parallel_size=draft.tensor_parallel_size, num_layers=len(draft.specs), kv_bytes_per_token=draft.kv_bytes_per_token,
            weights_bytes=draft.weights_bytes, weights_exact=draft.weights_exact, weights_source=draft.weights_source),
        generation_defaults=_generation_defaults(model_dir),
        notes=notes + plan.notes,
    )
    check_plausible(facts, source)
    if limits.yarn_factor and limits.yarn_original and limits.yarn_extended:
        yarn = YarnOption(
            enabled=limits.yarn_enabled,
            factor=limits.yarn_factor,
            original_max_position_embeddings=limits.yarn_original,
            extended_max_model_len=limits.yarn_extended,
            extended_request_kv_bytes=facts.request_kv_bytes(limits.yarn_extended),
            needs_long_max_model_len_env=limits.yarn_needs_env,
        )
        facts = facts.model_copy(update={"yarn": yarn})
    return facts


def _gpu_weights(loaded: weights.WeightsResult, model_dir: Path, layout: architecture.ModelLayout, settings: EngineSettings,
                 quant: dict[str, Any] | None, dtype_bytes: int) -> weights.WeightsResult:
    """The weights one rank holds on the GPU under ``--quantization`` and ``--cpu-offload-gb`` (issue 47)."""
    method = (settings.quantization or "").lower()
    if method:
        stored = str((quant or {}).get("quant_method", "")).lower()
        if quant is None and method == "fp8":
            loaded = weights.online_fp8(model_dir, layout, settings.tensor_parallel_size, loaded, dtype_bytes)
        elif quant is None or not (method == stored or method.startswith(stored + "_") or method.removesuffix("_marlin") == stored):
            raise SeatplanError(
                f"--quantization {settings.quantization} on a checkpoint {'quantized with ' + stored if quant else 'that is not quantized'}: "
                "seatplan models only fp8 of an unquantized checkpoint and the checkpoint's own method",
                where="extra_args --quantization", fix="drop the flag, or run the seat as `engine: fixed` with the memory_cap_bytes you measured")
    if settings.cpu_offload_bytes and settings.device == "cuda":
        # vLLM moves whole parameters of the decoder layers to host memory, layer by layer, until the budget is reached
        # (vllm/model_executor/offloader/uva.py:74-121): at least the budget leaves the GPU, at most one parameter more.
        # On a CPU engine the parameters are in host memory already (uva.py:81-82): nothing moves.
        on_gpu = max(0, loaded.per_rank_bytes - settings.cpu_offload_bytes)
        loaded = weights.WeightsResult(loaded.total_bytes, on_gpu, False, loaded.source, loaded.stored_per_rank_bytes,
                                       f"{loaded.rule}; --cpu-offload-gb keeps {settings.cpu_offload_bytes:,} B of it in host memory "
                                       "(at least that much leaves the GPU, at most one parameter more)")
    return loaded


def model_files_sha256(model_dir: str | Path) -> dict[str, str]:
    """SHA-256 of each file a model's facts come from: the configs, and each safetensors file's header (not its
    tensors, which a plan never reads). A missing file is ``absent``, so adding one is a change too. A model read
    from the Hub adds the commit it was read at (``commit``), so a branch that moved is a change even where the
    files hash the same."""
    directory = Path(model_dir)
    digests = {name: _file_sha256(directory / name) for name in FACT_FILES}
    for path in sorted(directory.glob("*.safetensors")):
        digests[path.name] = weights.header_sha256(path)
    commit = hub_record.commit_of(directory)
    if commit is not None:
        digests[COMMIT_KEY] = commit
    return digests


def located_model_files_sha256(model: str | Path) -> dict[str, str]:
    """:func:`model_files_sha256` of a model given as the fleet names it (a directory or a Hugging Face id, whose
    revision is resolved again: the commit it names now)."""
    return model_files_sha256(locate(model))


def _file_sha256(path: Path) -> str:
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except FileNotFoundError:
        return ABSENT
    except OSError as problem:
        return f"unreadable ({problem.strerror})"

