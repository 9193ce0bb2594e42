"""An engine's vLLM arguments → the fleet file's seat keys, each with the flag it came from.

Pure. The words are read by the engine codec's reader of vLLM's command line (``engine.parse.read_vllm_args``:
vLLM 0.32's own flag table and value syntax, so ``--max-model-len 32K`` is 32,768 and ``--lora-modules a=x b=y``
keeps both). A secret on the command line (``--api-key``, ``--hf-token``, a word shaped like a key) is never
kept: the seat gets the variable vLLM reads instead, by reference (``secrets``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from seatplan.adopt.secrets import SECRET_FLAGS
from seatplan.engine.parse import read_vllm_args
from seatplan.secrets import secret_shaped

INT_KEYS = {
    "--port": "port",
    "--tensor-parallel-size": "tensor_parallel_size",
    "--max-model-len": "max_model_len",
    "--kv-cache-memory-bytes": "kv_cache_memory_bytes",
    "--max-num-seqs": "max_num_seqs",
    "--max-num-batched-tokens": "max_num_batched_tokens",
}
TEXT_KEYS = {"--model": "model", "--served-model-name": "served_model_name", "--dtype": "dtype", "--kv-cache-dtype": "kv_cache_dtype"}
# Set by the plan (utilisation for the situation) and by render (--bind): adopting them would freeze them.
PLAN_OWNED = {"--gpu-memory-utilization": "the plan computes it for each start", "--host": "render's --bind sets it"}
ON = "on"  # how a flag without a value reads here


@dataclass
class SeatArgs:
    values: dict[str, Any] = field(default_factory=dict)  # fleet key → value
    flags: dict[str, str] = field(default_factory=dict)  # fleet key → the flag it came from (and how it was read)
    extra_args: list[str] = field(default_factory=list)
    dropped: dict[str, str] = field(default_factory=dict)  # flag → its value, left to the plan or render
    problems: list[str] = field(default_factory=list)
    secrets: dict[str, str] = field(default_factory=dict)  # the variable vLLM reads → the flag whose value was a secret
    refused: set[str] = field(default_factory=set)  # fleet keys whose flag holds a value vLLM refuses (no default stands in)


def read_args(args: list[str]) -> SeatArgs:
    seat = SeatArgs()
    read = read_vllm_args(args)
    seat.problems += [_hidden(problem) for problem in read.problems]
    if read.model is not None:
        seat.values["model"] = read.model
        seat.flags["model"] = "--model" if "--model" in read.flags else "the model argument"
    for flag, value in read.flags.items():
        if flag == "--model":
            continue
        if flag in SECRET_FLAGS:
            seat.secrets[SECRET_FLAGS[flag]] = flag
        elif flag in PLAN_OWNED:
            seat.dropped[flag] = ON if value is None else " ".join(value) if isinstance(value, list) else value
        elif flag in INT_KEYS:
            _whole(seat, read, flag)
        elif flag == "--served-model-name" and isinstance(value, list) and value:
            seat.values["served_model_name"], seat.flags["served_model_name"] = value[0], flag
            if len(value) > 1:
                seat.problems.append(f"--served-model-name gives {len(value)} names; the fleet file holds one, so the engine will "
                                     f"answer to {value[0]!r} only after render (also served today: {', '.join(value[1:])[:120]})")
        elif flag in TEXT_KEYS and isinstance(value, str):
            seat.values[TEXT_KEYS[flag]], seat.flags[TEXT_KEYS[flag]] = value, flag
        elif flag == "--enforce-eager":
            seat.values["enforce_eager"], seat.flags["enforce_eager"] = True, flag
        elif flag == "--override-generation-config" and isinstance(value, str) and _cap(value) is not None:
            seat.values["max_new_tokens"], seat.flags["max_new_tokens"] = _cap(value), flag
        else:
            _extra(seat, flag, value)
    return seat


def _hidden(problem: str) -> str:
    """A problem line with any word shaped like a key replaced: it may quote the word vLLM would refuse."""
    return " ".join("<a secret-shaped word>" if secret_shaped(word.strip("'\"")) else word for word in problem.split(" "))


def _extra(seat: SeatArgs, flag: str, value: str | list[str] | None) -> None:
    words = [] if value is None else value if isinstance(value, list) else [value]
    if any(secret_shaped(word) for word in words):
        seat.problems.append(f"{flag} holds a value shaped like a key (hf_…, sk-…, a URL with a password): left out of extra_args; "
                             "pass it to the engine from the host's environment instead")
        return
    seat.extra_args += [flag, *words]


def _whole(seat: SeatArgs, read: Any, flag: str) -> None:
    text = read.value(flag)
    try:
        number = read.whole(flag)
    except ValueError as problem:
        seat.problems.append(f"{problem}: vLLM would refuse it; the engine's own answer (or a TODO) fills {INT_KEYS[flag]}")
        seat.refused.add(INT_KEYS[flag])
        return
    if number is None or number < 0:  # --max-model-len -1 / auto: vLLM derives it, as an unset one
        return
    key = INT_KEYS[flag]
    seat.values[key] = number
    plain = text is not None and text.strip().isascii() and text.strip().isdigit()
    seat.flags[key] = flag if plain else f"{flag} {text} (vLLM's human_readable_int: {number:,}; k, m, g are 1000s, K, M, G 1024s)"


def _cap(value: str) -> int | None:
    """``{"max_new_tokens": N}`` and nothing else; other overrides stay in extra_args as written."""
    try:
        document = json.loads(value)
    except ValueError:
        return None
    if isinstance(document, dict) and set(document) == {"max_new_tokens"}:
        cap = document["max_new_tokens"]
        return cap if isinstance(cap, int) and not isinstance(cap, bool) and cap >= 1 else None
    return None
