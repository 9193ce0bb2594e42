"""``seatplan model``: what one model costs on a GPU under vLLM (KV layout, capacity, weights, context)."""

from __future__ import annotations

import typer

from seatplan.clihelp import WIDE, add_command
from seatplan.numeric_options import count_option, number_option, size_option, tokens_option
from seatplan.versions import DEFAULT_VLLM_VERSION


def register(app: typer.Typer) -> None:
    add_command(app, "model", model_command)


def model_command(
    model: str = typer.Argument(
        ..., metavar="MODEL", help="Model directory, or ORG/NAME[@REVISION] on the Hugging Face Hub (configs and headers only; HF_ENDPOINT, HF_TOKEN, HF_HUB_OFFLINE)."),
    tp: int = typer.Option(1, "--tp", "--tensor-parallel-size", parser=count_option("--tp", maximum=1024, example="2"), help="Tensor-parallel size (GPUs per engine)."),
    dtype: str = typer.Option("auto", "--dtype", help="Model dtype: auto, bfloat16, float16, float32."),
    kv_cache_dtype: str = typer.Option("auto", "--kv-cache-dtype", help="auto (model dtype) or fp8."),
    kv_cache_memory_bytes: int | None = typer.Option(
        None, "--kv-cache-memory-bytes", parser=size_option("--kv-cache-memory-bytes", example="22GiB"), metavar="<size>",
        help="KV budget per GPU as vLLM means it: 22GiB, 5.5G (2**30), 20g (10**9), bytes."
    ),
    max_model_len: int | None = typer.Option(None, "--max-model-len", parser=tokens_option("--max-model-len", example="32768"), metavar="<tokens>",
                                             help="Context length: 32768, 32K (=32,768), 32k (=32,000)."),
    device: str = typer.Option("cuda", "--device", help="cuda (plan for GPUs) or cpu (check against the real CPU engine)."),
    block_size: int | None = typer.Option(None, "--block-size", parser=count_option("--block-size", maximum=1 << 20, example="16"), help="Override vLLM's block size."),
    vllm_version: str = typer.Option(DEFAULT_VLLM_VERSION, "--vllm-version", help="vLLM release whose formulas to use (0.8 ... 0.32)."),
    no_prefix_caching: bool = typer.Option(False, "--no-prefix-caching", help="As vLLM's --no-enable-prefix-caching."),
    disable_hybrid_kv_cache_manager: bool = typer.Option(
        False, "--disable-hybrid-kv-cache-manager", help="As vLLM's flag: sliding-window layers then keep full KV."
    ),
    max_num_batched_tokens: int | None = typer.Option(
        None, "--max-num-batched-tokens", parser=tokens_option("--max-num-batched-tokens", example="8192"), metavar="<tokens>",
            help="Sizes the sliding-window term. Default: 8192 cuda (>= 70 GiB GPUs), 2048 cpu."
    ),
    async_scheduling: bool | None = typer.Option(None, "--async-scheduling/--no-async-scheduling",
                                                    help="Default: on for cuda, off for cpu."),
    enable_yarn: bool = typer.Option(False, "--enable-yarn", help="Assume YaRN rope scaling is switched on."),
    attention_backend: str | None = typer.Option(None, "--attention-backend",
                                                    help="As vLLM's flag; fixes MLA block sizes (FLASHMLA 64, CPU_MLA 16, ...)."),
    cpu_amx: bool | None = typer.Option(None, "--cpu-amx/--no-cpu-amx",
                                           help="cpu only: AMX CPU (MLA block 128) or not (16); default: this machine."),
    cpu_avx512_bf16: bool | None = typer.Option(None, "--cpu-avx512-bf16/--no-cpu-avx512-bf16",
                                                help="cpu only: AVX512-BF16 CPU (SSM state in float32) or not; default: this machine."),
    speculative: str | None = typer.Option(None, "--speculative", metavar="DRAFT",
                                           help="Speculative decoding: a draft model (directory or ORG/NAME), or ngram."),
    speculative_method: str | None = typer.Option(None, "--speculative-method",
                                                  help="draft_model, eagle, eagle3, ngram, suffix (default: vLLM's inference)."),
    num_speculative_tokens: int = typer.Option(2, "--num-speculative-tokens", parser=count_option("--num-speculative-tokens", maximum=64, example="2"),
                                               help="Tokens the speculator proposes per step."),
    lora: str | None = typer.Option(None, "--lora", metavar="RANKxN", help="LoRA slots: max_lora_rank x max_loras, e.g. 64x4."),
    quantization: str | None = typer.Option(None, "--quantization", help="As vLLM's flag; fp8 of a 16-bit checkpoint quantizes online."),
    cpu_offload_gb: float = typer.Option(0.0, "--cpu-offload-gb", parser=number_option("--cpu-offload-gb", minimum=0.0, maximum=1 << 20, example="4"),
                                         help="As vLLM's flag: GiB of weights kept in host memory."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON document on stdout."),
    wide: bool = WIDE,
) -> None:
    """Per-GPU KV layout, capacity, weights and context limits of one model, as vLLM computes them."""
    from seatplan.errors import SeatplanError

    if device not in ("cuda", "cpu"):
        raise SeatplanError(f"unknown device {device!r}", where="--device", fix="use cuda or cpu")
    budget, length = kv_cache_memory_bytes, max_model_len
    settings = _settings(
        tensor_parallel_size=tp, dtype=dtype, kv_cache_dtype=kv_cache_dtype, device=device, block_size=block_size,
        vllm_version=vllm_version, prefix_caching=not no_prefix_caching,
        hybrid_kv_cache_manager=not disable_hybrid_kv_cache_manager, max_num_batched_tokens=max_num_batched_tokens,
        async_scheduling=async_scheduling, enable_yarn=enable_yarn, max_model_len=length, cpu_amx=cpu_amx,
        cpu_avx512_bf16=cpu_avx512_bf16,
        attention_backend=attention_backend,
        speculative=_speculative(speculative, speculative_method, num_speculative_tokens),
        lora=_lora(lora), quantization=quantization, cpu_offload_bytes=int(cpu_offload_gb * 1024**3),
    )
    from seatplan.facts.api import load_model_facts
    from seatplan.facts.document import model_document

    facts = load_model_facts(model, settings)
    document = model_document(facts, budget, length)
    if as_json:
        from seatplan.output import emit_json

        emit_json(document)
        return
    from seatplan.facts.show import print_breakdown

    print_breakdown(facts, document, wide)


OPTION_NAMES = {
    "tensor_parallel_size": "--tp", "block_size": "--block-size", "vllm_version": "--vllm-version",
    "max_num_batched_tokens": "--max-num-batched-tokens", "max_model_len": "--max-model-len",
}


def _speculative(draft: str | None, method: str | None, tokens: int):
    """``--speculative DRAFT`` (and its method and tokens) as the settings' speculative config; None without one."""
    from seatplan.facts.models import SpeculativeSettings, speculative_method

    if draft is None and method is None:
        return None
    model = None if draft in (None, "ngram") else draft
    return SpeculativeSettings(method=speculative_method(method, draft), model=model, num_speculative_tokens=tokens)


def _lora(text: str | None):
    """``--lora RANKxN`` (``64x4``, ``64×4``) as the settings' LoRA slots; None without it."""
    from seatplan.errors import SeatplanError
    from seatplan.facts.models import LoraSettings
    from seatplan.units import whole_number

    if text is None:
        return None
    rank, _, count = text.replace("×", "x").lower().partition("x")
    rank_value, count_value = whole_number(rank, minimum=1, maximum=512), whole_number(count, minimum=1, maximum=1024)
    if rank_value is None or count_value is None:
        raise SeatplanError(f"--lora {text!r} is not RANKxN", where="--lora", fix="give the LoRA rank and the slots, e.g. --lora 64x4")
    try:
        return LoraSettings(max_lora_rank=rank_value, max_loras=count_value)
    except ValueError:
        raise SeatplanError(f"--lora {text!r}: rank {rank_value} is none vLLM takes", where="--lora",
                            fix="use a rank of 1, 8, 16, 32, 64, 128, 256, 320 or 512") from None


def _settings(**values):
    """EngineSettings from CLI values; a rejected value becomes a SeatplanError naming the option."""
    from pydantic import ValidationError

    from seatplan.errors import SeatplanError
    from seatplan.facts.models import EngineSettings

    try:
        return EngineSettings(**values)
    except ValidationError as problem:
        first = problem.errors()[0]
        field = str(first["loc"][0]) if first["loc"] else "settings"
        option = OPTION_NAMES.get(field, "--" + field.replace("_", "-"))
        message = str(first["msg"]).removeprefix("Value error, ")
        raise SeatplanError(f"{message} (got {first.get('input')!r})", where=option,
                            fix="see `seatplan model --help` for the accepted values") from None
