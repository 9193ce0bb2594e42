"""Random launches (``documents.launch.VllmLaunch``) over the whole range a plan can give one, for the engine codec's
round trip and the change model's tests."""

from __future__ import annotations

import random
import string

from seatplan.documents.launch import ByUtilisation, Pinned, SeatLaunch, VllmLaunch

# Real vLLM 0.32 flags that are none of a launch's own, each with the values it may take (spelled out, as vLLM's
# parser writes them back); a switch has no value.
EXTRA_FLAGS: dict[str, list[list[str]]] = {
    "--enable-prefix-caching": [[]], "--no-enable-prefix-caching": [[]], "--trust-remote-code": [[]],
    "--enable-chunked-prefill": [[]], "--disable-log-stats": [[]], "--seed": [["0"], ["7"], ["123456"]],
    "--block-size": [["16"], ["32"], ["128"]], "--max-logprobs": [["5"], ["20"]], "--tokenizer-mode": [["auto"], ["mistral"]],
    "--generation-config": [["auto"], ["vllm"]], "--uvicorn-log-level": [["warning"], ["debug"]],
}
MODEL_CHARACTERS = string.ascii_letters + string.digits + "._-"


def word(rng: random.Random, least: int = 1, most: int = 24) -> str:
    return "".join(rng.choice(MODEL_CHARACTERS) for _ in range(rng.randint(least, most))).lstrip("-") or "m"


def random_model(rng: random.Random) -> tuple[str, str | None]:
    """A model as --model takes it: an absolute path (``@`` allowed, no revision), or ORG/NAME with a revision or not."""
    if rng.random() < 0.4:
        return "/" + "/".join(word(rng) for _ in range(rng.randint(1, 4))) + ("@v2" if rng.random() < 0.2 else ""), None
    return f"{word(rng)}/{word(rng)}", (rng.choice([word(rng, 7, 40), "main", "0123abcd"]) if rng.random() < 0.4 else None)


def random_extra_args(rng: random.Random) -> list[str]:
    flags = rng.sample(sorted(EXTRA_FLAGS), rng.randint(0, 4))
    if "--enable-prefix-caching" in flags and "--no-enable-prefix-caching" in flags:
        flags.remove("--no-enable-prefix-caching")  # one value of one option: vLLM keeps the last
    return [item for flag in flags for item in [flag, *rng.choice(EXTRA_FLAGS[flag])]]


def random_launch(rng: random.Random) -> VllmLaunch:
    model, revision = random_model(rng)
    util = rng.randint(1, 1000) / 1000
    kv = Pinned(kv_cache_memory_bytes=rng.randint(0, 2**41), gpu_memory_utilization=util) if rng.random() < 0.7 else ByUtilisation(gpu_memory_utilization=util)
    overrides = rng.choice([None, {"rope_parameters": {"rope_type": "yarn", "factor": rng.choice([2.0, 4.0]), "original_max_position_embeddings": 32768}},
                            {"max_position_embeddings": rng.randint(1, 2**20)}])
    return VllmLaunch(
        model=model, revision=revision, served_model_name=rng.choice([model.rsplit("/", 1)[-1], f"{word(rng)}:{word(rng)}", word(rng)]),
        port=rng.choice([None, rng.randint(1, 65535)]), tensor_parallel_size=rng.choice([1, 2, 4, 8]),
        max_model_len=rng.choice([rng.randint(1, 4096), rng.randint(1, 2**24), 131072]), kv=kv,
        max_num_seqs=rng.randint(1, 4096), max_num_batched_tokens=rng.randint(1, 2**20),
        dtype=rng.choice(["auto", "bfloat16", "float16", "half"]), kv_cache_dtype=rng.choice(["auto", "fp8", "fp8_e5m2"]),
        enforce_eager=rng.random() < 0.3, max_new_tokens=rng.choice([None, rng.randint(1, 2**20)]), hf_overrides=overrides,
        extra_args=random_extra_args(rng),
    )


def random_seat_launch(rng: random.Random) -> SeatLaunch:
    env = {"CUDA_VISIBLE_DEVICES": ",".join(str(index) for index in sorted(rng.sample(range(8), rng.randint(1, 4))))}
    if rng.random() < 0.4:
        env["VLLM_ALLOW_LONG_MAX_MODEL_LEN"] = "1"
    refs = {f"KEY_{word(rng, 1, 6).upper().replace('.', '_').replace('-', '_')}": "HOST_SECRET" for _ in range(rng.randint(0, 2))}
    files = [f"/etc/seatplan/{word(rng)}.env" for _ in range(rng.randint(0, 2))]
    return SeatLaunch(launch=random_launch(rng), env=env, env_from_host=refs, env_files=files)
