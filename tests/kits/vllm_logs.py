"""vLLM engine log lines as the engine prints them, for the log parser's and diagnose's tests."""

from __future__ import annotations


def boot_lines(pid_api: int, pid_core: int, served: str, *, version: str = "0.32.0", kv_gib: float = 20.37,
               non_torch_gib: float | None = None, weights_gib: float = 15.6, clock: str = "11-20 09:00:00",
               util: float = 0.45, model: str | None = None) -> list[str]:
    """One util-sized boot of 0.27+ as vLLM prints it (the DEBUG profile summary included)."""
    consumed = weights_gib + (non_torch_gib or 0.0)
    model = model or f"/models/{served}"
    return [
        f"(APIServer pid={pid_api}) INFO {clock} [api_utils.py:286] non-default args: {{'model': '{model}', "
        f"'served_model_name': ['{served}'], 'port': 8000, 'gpu_memory_utilization': {util}, 'max_model_len': 32768}}",
        f"(APIServer pid={pid_api}) INFO {clock} [model.py:2152] Using max model len 32768",
        f"(EngineCore_DP0 pid={pid_core}) INFO {clock} [core.py:133] Initializing a V1 LLM engine (v{version}) with config: "
        f"model='{model}', speculative_config=None, tensor_parallel_size=1, served_model_name={served}, enable_prefix_caching=True",
        f"(EngineCore_DP0 pid={pid_core}) INFO {clock} [gpu_model_runner.py:5405] Model loading took {weights_gib} GiB memory and 6.3 seconds",
        f"(EngineCore_DP0 pid={pid_core}) DEBUG {clock} [gpu_worker.py:758] Memory profiling takes 1.23 seconds. Total non KV cache memory: "
        f"{consumed + 1.2:.2f}GiB; torch peak memory increase: 1.2GiB; total consumed (from mem_get_info): {consumed:.2f}GiB; "
        f"weights memory: {weights_gib}GiB.",
        f"(EngineCore_DP0 pid={pid_core}) INFO {clock} [gpu_worker.py:759] Available KV cache memory: {kv_gib} GiB",
        f"(EngineCore_DP0 pid={pid_core}) INFO {clock} [kv_cache_utils.py:2327] GPU KV cache size: 100,000 tokens, "
        "Maximum concurrency for 32,768 tokens per request: 3.05x",
        f"(EngineCore_DP0 pid={pid_core}) INFO {clock} [core.py:402] init engine (profile, create kv cache, warmup model) took 41.34 s",
    ]
