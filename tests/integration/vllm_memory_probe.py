"""Start vLLM's own engine in-process on a tiny model and report what it allocated: the bytes of every LoRA A/B stack
of every module vLLM wrapped, and the KV blocks its cache config holds. The CPU build logs no memory figure of its own
("Loading weights took 0.25 seconds"), so this asks the loaded model itself.

Runs under the vLLM virtualenv's Python (tests/integration/test_vllm_cpu_features.py starts it):
    $SEATPLAN_VLLM_VENV/bin/python tests/integration/vllm_memory_probe.py '{"model": DIR, ...vLLM's LLM(...) arguments}'
Prints one JSON line: {"lora_bytes": N, "lora_modules": {name: bytes}, "num_gpu_blocks": N}.
"""

import json
import os
import sys

from vllm import LLM

# vLLM reads these when the engine starts (vllm/envs.py looks each up as it is asked for), not at import
ENVIRONMENT = {
    "VLLM_ALLOW_INSECURE_SERIALIZATION": "1",  # apply_model sends a function to the worker
    "VLLM_NO_USAGE_STATS": "1",
    "HF_HUB_OFFLINE": "1",
    "VLLM_ENABLE_V1_MULTIPROCESSING": "0",  # the engine core in this process, so its cache config is the one read
}


def allocated(model):
    """Each wrapped module's lora_a_stacked and lora_b_stacked bytes."""
    lora = {}
    for name, module in model.named_modules():
        total = 0
        for attribute in ("lora_a_stacked", "lora_b_stacked"):
            stacked = getattr(module, attribute, None)
            for tensor in stacked if isinstance(stacked, (tuple, list)) else [stacked] if stacked is not None else []:
                total += tensor.numel() * tensor.element_size()
        if total:
            lora[name] = total
    return {"lora_bytes": sum(lora.values()), "lora_modules": lora}


def main() -> None:
    for name, value in ENVIRONMENT.items():
        os.environ.setdefault(name, value)
    arguments = json.loads(sys.argv[1])
    llm = LLM(dtype="bfloat16", enforce_eager=True, **arguments)
    found = llm.apply_model(allocated)[0]
    found["num_gpu_blocks"] = llm.llm_engine.vllm_config.cache_config.num_gpu_blocks
    print(json.dumps(found))


if __name__ == "__main__":
    main()
