"""Every flag vLLM 0.32's server accepts, classed by what it does to the GPU memory seatplan plans for: no flag of a
seat's ``extra_args`` is passed through silently.

Three classes (issue 47):

- ``modelled``: it changes the memory, and seatplan reads it from ``extra_args`` and models it (``--block-size``,
  prefix caching, ``--max-num-batched-tokens`` …), or the estimate holds with it either way;
- ``not_modelled``: it changes the memory and seatplan does not model it from ``extra_args``: such a seat is
  refused, naming the flag and the fix (the fleet key that models it, else running the seat as ``engine: fixed``
  with the ``memory_cap_bytes`` the operator measured), never planned with a figure known to be wrong;
- ``no_memory``: it does not change the GPU memory (server, API, logging, tokenizer, host-side caches).

The table is keyed by each option's long name as vLLM's parser knows it (``engine.parse.flag_table``, itself held to
vLLM's parser); a switch's ``--no-`` form is classed apart where the two differ, and a flag with values that leave
the memory as vLLM's default does (``--load-format safetensors``, ``-O2``) lists them. ``tests/engine/test_flag_memory.py``
walks vLLM's own parser from the vLLM test virtualenv: a flag a new vLLM adds fails it until it is classed here.
Pure: arguments in, refusals out.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from seatplan.engine.parse import flag_table, read_vllm_args

__all__ = ["FLAG_MEMORY", "NOT_MODELLED_FIX", "FlagMemory", "RefusedFlag", "class_of", "refused_flags"]

Kind = Literal["modelled", "not_modelled", "no_memory"]

# The way out for a flag seatplan cannot size: an engine the operator measured, planned at its measured cap.
NOT_MODELLED_FIX = ("drop it from extra_args, or, to run it anyway, make the seat `engine: fixed` with the `memory_cap_bytes` you "
                    "measured per GPU (docs/fleet.md)")


@dataclass(frozen=True)
class FlagMemory:
    """What one flag does to the memory: its class, why, and (for ``not_modelled``) the fix."""

    kind: Kind
    why: str
    fix: str = NOT_MODELLED_FIX
    harmless_values: frozenset[str] = frozenset()  # values that leave the memory as vLLM's default does
    negated: Kind | None = None  # the class of the switch's --no- form, where it differs from the switch's


def _modelled(why: str) -> FlagMemory:
    return FlagMemory("modelled", why, fix="")


def _not(why: str, fix: str = NOT_MODELLED_FIX, harmless: Sequence[str] = ()) -> FlagMemory:
    # a refused switch's --no- form is vLLM's default (every such switch is off unless given)
    return FlagMemory("not_modelled", why, fix, frozenset(harmless), negated="no_memory")


def _key(key: str, why: str) -> FlagMemory:
    """A flag the plan writes itself from a fleet key: given again in extra_args it would win (vLLM keeps the last)
    over the figure the plan sized."""
    return FlagMemory("not_modelled", why + f"; the plan writes it from the seat's `{key}` key, and a second one in extra_args would "
                      "override the figure the plan sized", f"set the seat's `{key}` key instead of the flag in extra_args")


def _none(why: str) -> FlagMemory:
    return FlagMemory("no_memory", why, fix="")


_SERVER = "the API server's own setting"
_LOG = "logging, metrics or tracing"
_TOKENIZER = "tokenizer, chat template or request handling"
_HOST = "host memory or CPU-side work, not the GPU's"
_KERNEL = "a kernel or backend choice; the same weights, KV and batch"
_ONLY_WITH = "only acts beside a flag that is refused itself"
_LORA = "LoRA adapters' GPU slots, in a way seatplan does not model"
_LORA_MODELLED = "LoRA adapters' GPU slots (facts.lora), with --enable-lora"
_SPEC = "speculative decoding: the draft's weights and KV layers share the pinned budget"
_SPEC_FIX = "give it as the seat's `speculative` key (or one --speculative-config JSON), which seatplan models"
_OFFLOAD = "moves weights between the GPU and the host: fewer weight bytes on the GPU than the plan counts"
_MM = "the multimodal encoder's memory or its profile, which the plan does not size"

FLAG_MEMORY: dict[str, FlagMemory] = {
    # --- read from extra_args and modelled (engine.settings)
    "--block-size": _modelled("the KV block size (facts.layout)"),
    "--max-num-batched-tokens": _modelled("the activation estimate and a sliding-window layer's blocks (engine.settings)"),
    "--attention-backend": _modelled("the backend sets the block size (facts.layout)"),
    "--enable-prefix-caching": _modelled("the KV groups of a hybrid model (facts.kv_cache)"),
    "--disable-hybrid-kv-cache-manager": _modelled("one KV group per layer kind or all as full attention (facts.kv_cache)"),
    "--async-scheduling": _modelled("the blocks vLLM's scheduler keeps aside (facts.kv_cache)"),
    "--hf-overrides": _modelled("YaRN's factor (engine.parse.yarn_override_factor); other keys change the model seatplan reads",),
    "--disable-custom-all-reduce": _modelled("the NCCL part counts custom all-reduce's buffers; without them the engine takes less"),
    "--enable-chunked-prefill": FlagMemory("modelled", "chunked prefill is vLLM's default, which the activation estimate assumes", "",
                                           negated="not_modelled"),
    # --- set by the plan from a fleet key
    "--model": _key("model", "the weights and KV layers"),
    "--max-model-len": _key("max_model_len", "the context sets the KV rule and blocks per request"),
    "--kv-cache-memory-bytes": _key("kv_cache_memory_bytes", "the KV cache bytes"),
    "--gpu-memory-utilization": FlagMemory("not_modelled", "the plan computes the utilisation for each start from who shares the GPU",
                                           "remove it from extra_args: the plan writes the utilisation"),
    "--num-gpu-blocks-override": FlagMemory("not_modelled", "it replaces the KV blocks the plan sized",
                                            "remove it; pin the KV with the seat's `kv_cache_memory_bytes` key"),
    "--tensor-parallel-size": _key("tensor_parallel_size", "the weights and KV per GPU"),
    "--max-num-seqs": _key("max_num_seqs", "the activation estimate and the sampler's rows"),
    "--dtype": _key("dtype", "the weights' and KV's bytes per value"),
    "--kv-cache-dtype": _key("kv_cache_dtype", "the KV bytes per token"),
    "--enforce-eager": _key("enforce_eager", "CUDA graphs' memory"),
    "--device-ids": FlagMemory("not_modelled", "it puts the engine on other GPUs than the plan placed it on (CUDA_VISIBLE_DEVICES)",
                               "remove it; pin the seat with its `pin` key"),
    # --- changes memory, not modelled
    "--speculative-config": _modelled("a draft's weights and KV layers join the target's (facts.speculative)"),
    "--spec-method": _not(_SPEC, _SPEC_FIX),
    "--spec-model": _not(_SPEC, _SPEC_FIX),
    "--spec-tokens": _not(_SPEC, _SPEC_FIX),
    "--enable-lora": _modelled(_LORA_MODELLED),
    "--max-loras": _modelled(_LORA_MODELLED),
    "--max-lora-rank": _modelled(_LORA_MODELLED),
    "--lora-dtype": _modelled(_LORA_MODELLED),
    "--lora-target-modules": _modelled(_LORA_MODELLED),
    "--fully-sharded-loras": _modelled(_LORA_MODELLED),
    "--enable-moe-shared-loras": _not(_LORA),
    "--enable-mixed-moe-lora-format": _not(_LORA),
    "--enable-tower-connector-lora": _not(_LORA),
    "--max-lora-cls-labels": _not(_LORA),
    "--specialize-active-lora": _not(_LORA),
    "--cpu-offload-gb": _modelled("weights kept in host memory (facts.api: at least this many GiB leave the GPU)"),
    "--cpu-offload-params": _not(_OFFLOAD),
    "--offload-backend": _not(_OFFLOAD, harmless=["auto"]),
    "--offload-group-size": _not(_OFFLOAD, harmless=["0"]),
    "--offload-num-in-group": _not(_OFFLOAD),
    "--offload-params": _not(_OFFLOAD),
    "--offload-prefetch-step": _not(_OFFLOAD),
    "--quantization": _modelled("fp8 of an unquantized checkpoint halves its linear weights (facts.weights.online_fp8); another "
                                "method than the checkpoint's own is refused by the facts stage"),
    "--quantization-config": _not("online quantization changes the weights' bytes on the GPU"),
    "--load-format": _not("a quantizing or sharded loader changes the weights on the GPU",
                          harmless=["auto", "pt", "safetensors", "npcache", "dummy", "fastsafetensors", "runai_streamer", "mistral"]),
    "--hf-config-path": _not("another config than the one seatplan reads the layers and heads from"),
    "--config": _not("a YAML file of flags on the engine's host, which seatplan cannot read", "spell its flags out in extra_args"),
    "--convert": _not("a pooling or other conversion changes the model's heads and KV", harmless=["auto", "none"]),
    "--runner": _not("a pooling runner allocates no generation KV the way the plan sizes it", harmless=["auto", "generate"]),
    "--model-class-overrides": _not("another model class than the one seatplan reads"),
    "--pipeline-parallel-size": _not("the layers, weights and KV split over pipeline stages", harmless=["1"]),
    "--data-parallel-size": _not("more engine ranks, each on its own GPUs", harmless=["1"]),
    "--data-parallel-size-local": _not("more engine ranks on this host, each on its own GPUs", harmless=["1"]),
    "--decode-context-parallel-size": _not("the KV split over ranks", harmless=["1"]),
    "--prefill-context-parallel-size": _not("the KV split over ranks", harmless=["1"]),
    "--dcp-kv-cache-interleave-size": _not("the KV layout of context parallelism", harmless=["1"]),
    "--cp-kv-cache-interleave-size": _not("the KV layout of context parallelism", harmless=["1"]),
    "--enable-expert-parallel": _not("experts' weights per rank under expert parallelism"),
    "--enable-eplb": _not("redundant experts' weights"),
    "--eplb-config": _not("redundant experts' weights"),
    "--enable-elastic-ep": _not("experts' weights per rank under expert parallelism"),
    "--elastic-ep-max-dp-size": _not("experts' weights per rank under expert parallelism"),
    "--disable-sliding-window": _not("sliding-window layers become full attention: their KV per request grows"),
    "--kv-cache-dtype-skip-layers": _not("layers kept at the model's dtype in an fp8 KV cache"),
    "--kv-transfer-config": _not("a KV connector's buffers and layout"),
    "--ec-transfer-config": _not("an encoder-cache connector's buffers"),
    "--ec-manager-config": _not("an encoder-cache manager's buffers"),
    "--mamba-block-size": _not("the hybrid block size vLLM aligns the attention layers to"),
    "--mamba-cache-dtype": _not("a Mamba layer's state bytes", harmless=["auto"]),
    "--mamba-ssm-cache-dtype": _not("a Mamba layer's state bytes", harmless=["auto"]),
    "--mamba-cache-mode": _not("how many Mamba states a request holds under prefix caching", harmless=["none"]),
    "--enable-mamba-shared-prefix-checkpoint": _not("Mamba states kept for shared prefixes"),
    "--use-replayssm": _not("a replay buffer beside the Mamba states"),
    "--replayssm-buffer-len": _not("a replay buffer beside the Mamba states"),
    "--cudagraph-capture-sizes": _not("CUDA graphs' memory follows the sizes captured", "drop it, or set `enforce_eager: true`"),
    "--max-cudagraph-capture-size": _not("CUDA graphs' memory follows the sizes captured", "drop it, or set `enforce_eager: true`"),
    "--compilation-config": _not("CUDA graph mode and capture sizes", "drop it, or set `enforce_eager: true`"),
    "--optimization-level": _not("compilation and CUDA graphs", "drop it, or set `enforce_eager: true`", harmless=["2"]),
    "--performance-mode": _not("capture sizes and batch shape vLLM picks for the mode", harmless=["balanced"]),
    "--enable-dbo": _not("dual-batch overlap's micro-batches and buffers"),
    "--attention-config": _not("the attention backend sets the block size", "use --attention-backend, which seatplan reads"),
    "--engram-config": _not("Engram memory tables on the GPU"),
    "--mm-ipc-gpu-memory-gb": _not("GPU memory set aside for multimodal tensors", harmless=["0"]),
    "--mm-encoder-tp-mode": _not(_MM, harmless=["weights"]),
    "--mm-encoder-only": _not(_MM),
    "--language-model-only": _not(_MM),
    "--limit-mm-per-prompt": _not(_MM),
    "--skip-mm-profiling": _not(_MM),
    "--mm-processor-device": _not("the multimodal processor on the GPU", harmless=["auto", "cpu"]),
    "--diffusion-config": _not("a diffusion model's own memory"),
    "--max-num-scheduled-tokens": _not("the tokens of one step, which the activation estimate follows"),
    "--watermark": _not("KV blocks vLLM keeps free", harmless=["0", "0.0"]),
    "--watermark-config": _not("KV blocks vLLM keeps free"),
    "--kv-offloading-size": _not("a KV offloading connector's staging buffers"),
    "--kv-offloading-backend": _not("a KV offloading connector's staging buffers", harmless=["native"]),
    # --- no GPU memory
    "--max-cpu-loras": _none("adapters cached in host memory"),
    "--lora-modules": _none("which adapters the server loads into the slots --max-loras sizes (that flag is classed itself)"),
    "--default-mm-loras": _none("which adapter a modality uses"),
    "--per-request-spec-decode-metrics": _none(_LOG),
    "--trust-remote-code": _none("lets the model's code run"),
    "--code-revision": _none("the remote code's revision"),
    "--revision": _none("the revision is the seat's own key; the model's files, not a memory setting"),
    "--tokenizer": _none(_TOKENIZER), "--tokenizer-mode": _none(_TOKENIZER), "--tokenizer-revision": _none(_TOKENIZER),
    "--skip-tokenizer-init": _none(_TOKENIZER), "--chat-template": _none(_TOKENIZER), "--chat-template-content-format": _none(_TOKENIZER),
    "--default-chat-template-kwargs": _none(_TOKENIZER), "--trust-request-chat-template": _none(_TOKENIZER),
    "--trust-request-mm-kwargs": _none(_TOKENIZER), "--response-role": _none(_TOKENIZER), "--tokens-only": _none(_TOKENIZER),
    "--enable-auto-tool-choice": _none(_TOKENIZER), "--tool-call-parser": _none(_TOKENIZER), "--tool-parser-plugin": _none(_TOKENIZER),
    "--tool-server": _none(_TOKENIZER), "--tool-strict-level": _none(_TOKENIZER), "--exclude-tools-when-tool-choice-none": _none(_TOKENIZER),
    "--reasoning-parser": _none(_TOKENIZER), "--reasoning-parser-plugin": _none(_TOKENIZER), "--reasoning-config": _none(_TOKENIZER),
    "--structured-outputs-config": _none(_TOKENIZER), "--cohere-format": _none(_TOKENIZER), "--cohere-is-reasoning-model": _none(_TOKENIZER),
    "--anthropic-disabled-thinking-effort": _none(_TOKENIZER), "--return-tokens-as-token-ids": _none(_TOKENIZER),
    "--generation-config": _none("sampling defaults"), "--override-generation-config": _none("sampling defaults (the plan writes the cap)"),
    "--logits-processors": _none("sampling code"), "--logprobs-mode": _none("what logprobs return"),
    "--max-logprobs": _none("how many logprobs a request may ask"), "--seed": _none("sampling seed"),
    "--use-fp64-gumbel": _none("sampling precision"), "--return-sampling-mask": _none("sampling output"),
    "--enable-batch-sharded-sampling": _none("sampling work split"),
    "--io-processor-plugin": _none(_SERVER), "--pooler-config": _none("pooling heads' settings (a pooling runner is refused itself)"),
    "--enable-prompt-embeds": _none(_TOKENIZER), "--enable-mm-embeds": _none(_TOKENIZER),
    "--interleave-mm-strings": _none(_TOKENIZER), "--media-io-kwargs": _none(_TOKENIZER), "--mm-processor-kwargs": _none(_TOKENIZER),
    "--mm-processor-cache-gb": _none(_HOST), "--mm-processor-cache-type": _none(_HOST), "--mm-shm-cache-max-object-size-mb": _none(_HOST),
    "--mm-tensor-ipc": _none(_HOST), "--mm-hasher-algorithm": _none(_HOST), "--mm-device-do-normalize": _none(_HOST),
    "--mm-encoder-attn-backend": _none(_KERNEL), "--mm-encoder-attn-dtype": _none(_KERNEL),
    "--mm-encoder-fp8-scale-path": _none(_KERNEL), "--mm-encoder-fp8-scale-save-margin": _none(_KERNEL),
    "--mm-encoder-fp8-scale-save-path": _none(_KERNEL), "--disable-chunked-mm-input": _none("how prompts are chunked"),
    "--video-pruning-method": _none(_TOKENIZER), "--video-pruning-rate": _none(_TOKENIZER),
    "--allowed-local-media-path": _none(_SERVER), "--allowed-media-domains": _none(_SERVER),
    "--kv-cache-metrics": _none(_LOG), "--kv-cache-metrics-sample": _none(_LOG), "--kv-events-config": _none(_LOG),
    "--kv-sharing-fast-prefill": _none("which tokens a KV-sharing layer skips; the KV layers are the same"),
    "--swa-bounded-replay": _none("how a sliding-window layer replays; its blocks are the same"),
    "--prefix-caching-hash-algo": _none("the prefix cache's hash"), "--prefix-cache-retention-interval": _none("when cached blocks are freed"),
    "--prefix-match-unit": _none("how prefixes are matched"),
    "--mamba-backend": _none(_KERNEL), "--mamba-ssu-algorithm": _none(_KERNEL), "--mamba-cache-philox-rounds": _none(_KERNEL),
    "--enable-mamba-cache-stochastic-rounding": _none(_KERNEL),
    "--moe-backend": _none(_KERNEL), "--linear-backend": _none(_KERNEL), "--gdn-prefill-backend": _none(_KERNEL),
    "--kda-decode-backend": _none(_KERNEL), "--kda-prefill-backend": _none(_KERNEL), "--sparse-indexer-topk-backend": _none(_KERNEL),
    "--kernel-config": _none(_KERNEL), "--ir-op-priority": _none(_KERNEL), "--enable-flashinfer-autotune": _none(_KERNEL),
    "--enable-flash-late-interaction": _none(_KERNEL), "--disable-cascade-attn": _none(_KERNEL), "--model-impl": _none(_KERNEL),
    "--all2all-backend": _none(_ONLY_WITH + " (--enable-expert-parallel)"),
    "--expert-placement-strategy": _none(_ONLY_WITH + " (--enable-expert-parallel)"),
    "--enable-ep-weight-filter": _none(_ONLY_WITH + " (--enable-expert-parallel)"),
    "--dbo-decode-token-threshold": _none(_ONLY_WITH + " (--enable-dbo)"), "--dbo-prefill-token-threshold": _none(_ONLY_WITH + " (--enable-dbo)"),
    "--ubatch-size": _none(_ONLY_WITH + " (--enable-dbo)"),
    "--dcp-comm-backend": _none(_ONLY_WITH + " (--decode-context-parallel-size)"),
    "--dcp-q-replicate": _none(_ONLY_WITH + " (--decode-context-parallel-size)"),
    "--enable-return-routed-experts": _none("a small per-token record of routed experts"), "--aux-output-config": _none(_LOG),
    "--data-parallel-address": _none(_ONLY_WITH + " (--data-parallel-size)"), "--data-parallel-backend": _none(_ONLY_WITH + " (--data-parallel-size)"),
    "--data-parallel-external-lb": _none(_ONLY_WITH + " (--data-parallel-size)"), "--data-parallel-hybrid-lb": _none(_ONLY_WITH + " (--data-parallel-size)"),
    "--data-parallel-multi-port-external-lb": _none(_ONLY_WITH + " (--data-parallel-size)"),
    "--data-parallel-rank": _none(_ONLY_WITH + " (--data-parallel-size)"), "--data-parallel-rpc-port": _none(_ONLY_WITH + " (--data-parallel-size)"),
    "--data-parallel-start-rank": _none(_ONLY_WITH + " (--data-parallel-size)"),
    "--data-parallel-supervisor-port": _none(_ONLY_WITH + " (--data-parallel-size)"),
    "--disable-nccl-for-dp-synchronization": _none(_ONLY_WITH + " (--data-parallel-size)"), "--dp-sync-interval": _none(_ONLY_WITH + " (--data-parallel-size)"),
    "--dp-supervisor-probe-failure-threshold": _none(_SERVER), "--dp-supervisor-probe-interval-s": _none(_SERVER),
    "--dp-supervisor-probe-timeout-s": _none(_SERVER),
    "--distributed-executor-backend": _none("how workers are started"), "--distributed-timeout-seconds": _none(_SERVER),
    "--cpu-distributed-timeout-seconds": _none(_SERVER), "--master-addr": _none(_SERVER), "--master-port": _none(_SERVER),
    "--nnodes": _none("the hosts the tensor-parallel ranks span; per GPU the same"), "--node-rank": _none(_SERVER), "--headless": _none(_SERVER),
    "--enable-nccl-comm-suspend": _none(_SERVER), "--enable-scale-out": _none(_SERVER), "--enable-hc-sp": _none(_KERNEL),
    "--ray-workers-use-nsight": _none(_LOG), "--worker-cls": _none("the worker's code"), "--worker-extension-cls": _none("the worker's code"),
    "--scheduler-cls": _none("the scheduler's code"), "--scheduling-policy": _none("request order"),
    "--scheduler-reserve-full-isl": _none("admission"), "--prefill-schedule-interval": _none("admission"),
    "--long-prefill-token-threshold": _none("admission"), "--long-prefill-token-threshold-adaptive": _none("admission"),
    "--max-num-queued-reqs": _none("admission"), "--max-num-queued-tokens": _none("admission"),
    "--max-num-active-seqs": _none("admission below --max-num-seqs, which sizes the buffers"), "--stream-interval": _none(_SERVER),
    "--enable-sleep-mode": _none("the same allocations, released on request"), "--sleep-mode-offload-cudagraph": _none(_ONLY_WITH + " (sleep)"),
    "--sleep-preserve-parameter-names": _none(_ONLY_WITH + " (sleep)"), "--enable-cumem-allocator": _none("the allocator, not the amount"),
    "--enable-shm-tensor-arena": _none(_HOST), "--numa-bind": _none(_HOST), "--numa-bind-cpus": _none(_HOST), "--numa-bind-nodes": _none(_HOST),
    "--weight-transfer-config": _none("how new weights arrive; the same weights"),
    "--download-dir": _none("where files are kept"), "--ignore-patterns": _none("which files are downloaded"),
    "--config-format": _none("how the config is read"), "--safetensors-load-strategy": _none(_HOST),
    "--safetensors-prefetch-block-size": _none(_HOST), "--safetensors-prefetch-num-threads": _none(_HOST),
    "--pt-load-map-location": _none("where tensors land while loading"), "--model-loader-extra-config": _none("the loader's settings"),
    "--max-parallel-loading-workers": _none(_HOST), "--use-tqdm-on-load": _none(_LOG), "--allow-deprecated-quantization": _none("a permission"),
    "--additional-config": _none("platform plugins' settings"), "--fault-tolerance-config": _none(_SERVER),
    "--enable-fault-tolerance": _none(_SERVER), "--fingerprint-mode": _none(_SERVER), "--fingerprint-value": _none(_SERVER),
    "--jit-monitor-mode": _none(_LOG), "--jit-monitor-verbose": _none(_LOG), "--enable-trace-replay": _none(_LOG),
    "--collect-detailed-traces": _none(_LOG), "--otlp-traces-endpoint": _none(_LOG), "--show-hidden-metrics-for-version": _none(_LOG),
    "--enable-mfu-metrics": _none(_LOG), "--enable-per-request-metrics": _none(_LOG), "--custom-histogram-buckets": _none(_LOG),
    "--enable-layerwise-nvtx-tracing": _none(_LOG), "--profiler-config": _none(_LOG), "--enable-logging-iteration-details": _none(_LOG),
    "--cudagraph-metrics": _none(_LOG), "--disable-log-stats": _none(_LOG), "--aggregate-engine-logging": _none(_LOG),
    "--enable-log-requests": _none(_LOG), "--enable-log-outputs": _none(_LOG), "--enable-log-deltas": _none(_LOG), "--max-log-len": _none(_LOG),
    "--log-config-file": _none(_LOG), "--logging-config": _none(_LOG), "--log-level": _none(_LOG), "--log-error-stack": _none(_LOG),
    "--uvicorn-log-level": _none(_LOG), "--disable-uvicorn-access-log": _none(_LOG), "--disable-access-log-for-endpoints": _none(_LOG),
    "--served-model-name": _none(_SERVER), "--host": _none(_SERVER), "--port": _none(_SERVER), "--uds": _none(_SERVER),
    "--api-key": _none(_SERVER), "--api-server-count": _none(_SERVER), "--renderer-num-workers": _none(_HOST),
    "--grpc": _none(_SERVER), "--grpc-port": _none(_SERVER), "--root-path": _none(_SERVER), "--middleware": _none(_SERVER),
    "--allow-credentials": _none(_SERVER), "--allowed-headers": _none(_SERVER), "--allowed-methods": _none(_SERVER),
    "--allowed-origins": _none(_SERVER), "--ssl-ca-certs": _none(_SERVER), "--ssl-cert-reqs": _none(_SERVER), "--ssl-certfile": _none(_SERVER),
    "--ssl-ciphers": _none(_SERVER), "--ssl-keyfile": _none(_SERVER), "--enable-ssl-refresh": _none(_SERVER),
    "--sse-keep-alive-interval": _none(_SERVER), "--h11-max-header-count": _none(_SERVER), "--h11-max-incomplete-event-size": _none(_SERVER),
    "--disable-fastapi-docs": _none(_SERVER), "--enable-offline-docs": _none(_SERVER), "--enable-request-id-headers": _none(_SERVER),
    "--enable-force-include-usage": _none(_SERVER), "--enable-prompt-tokens-details": _none(_SERVER),
    "--enable-server-load-tracking": _none(_SERVER), "--enable-tokenizer-info-endpoint": _none(_SERVER),
    "--shutdown-timeout": _none(_SERVER), "--fail-on-environ-validation": _none(_SERVER), "--hf-token": _none("a credential"),
    "--help": _none("prints the help"),
}


@dataclass(frozen=True)
class RefusedFlag:
    """A flag of ``extra_args`` that changes the memory and is not modelled: where it is, why, and the fix."""

    flag: str
    position: int | None  # its word in extra_args, where one word starts it as written
    why: str
    fix: str

    @property
    def message(self) -> str:
        return f"extra_args {self.flag}: {self.why}; seatplan does not model it, so a plan would carry a figure known to be wrong"


def class_of(flag: str) -> tuple[str, FlagMemory] | None:
    """The long name a flag (an option string vLLM's parser takes, ``--no-x`` or ``--x.key`` too) is classed under,
    and its class; None for a flag vLLM 0.32 does not have (``engine.command.unsupported_flags`` names those)."""
    base = flag.split(".", 1)[0]
    shape = flag_table().get(base)
    if shape is None:
        return None
    found = FLAG_MEMORY.get(shape.name)
    return (shape.name, found) if found is not None else None


def refused_flags(extra_args: Sequence[str]) -> list[RefusedFlag]:
    """The flags of a seat's ``extra_args`` that change the memory and are not modelled, in the order given."""
    refused: list[RefusedFlag] = []
    for written in read_vllm_args(extra_args).written:
        flag, values = written[0], written[1:]
        classed = class_of(flag)
        if classed is None:
            continue
        name, memory = classed
        if "." in flag and memory.kind == "modelled":  # --speculative-config.model X: one key of a JSON flag seatplan reads whole
            refused.append(RefusedFlag(flag, _position(extra_args, flag), f"one key of {name}, which seatplan reads as one JSON value",
                                       f"write {name} as one JSON object"))
            continue
        negated = flag.startswith("--no-") and not name.startswith("--no-")
        kind = memory.negated if negated and memory.negated is not None else memory.kind
        if kind == "modelled" and name in _MODELLED_ONLY_AS and not _MODELLED_ONLY_AS[name][0](values):
            refused.append(RefusedFlag(flag, _position(extra_args, flag), _MODELLED_ONLY_AS[name][1], _MODELLED_ONLY_AS[name][2]))
            continue
        if kind != "not_modelled" or (values and all(value.strip() in memory.harmless_values for value in values)):
            continue
        refused.append(RefusedFlag(flag, _position(extra_args, flag), memory.why, memory.fix))
    return refused


def _rope_only(values: Sequence[str]) -> bool:
    """``--hf-overrides`` of RoPE scaling only (YaRN, which seatplan reads); other keys change the config it read."""
    try:
        document = json.loads(values[-1]) if values else {}
    except ValueError:
        return False
    return isinstance(document, dict) and set(document) <= {"rope_parameters", "rope_scaling"}


# Flags modelled for some values only: the test, why the others are refused, and the fix.
_MODELLED_ONLY_AS = {
    "--hf-overrides": (_rope_only, "keys other than rope_parameters/rope_scaling change the config seatplan reads the layers "
                       "and heads from", "keep only the RoPE scaling (allow_yarn: true lets the plan write it), or give the model "
                       "a config.json with the change"),
}


def _position(words: Sequence[str], flag: str) -> int | None:
    """The word of ``words`` that gives ``flag`` (an abbreviation, ``_`` for ``-``, ``--x=v`` and ``-O3`` read as vLLM reads them)."""
    for position, word in enumerate(words):
        if not word.startswith("-"):
            continue
        for trial in ([word], [word, "0"]):  # a flag that takes a value is read with one
            written = read_vllm_args(trial).written
            if written and written[0][0] == flag:
                return position
    return None
