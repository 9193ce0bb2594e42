"""An engine's vLLM arguments → the fleet file's seat keys, each with the flag it came from.

Pure. The words are split into ``--flag value`` pairs by the parser ``seatplan diff`` uses on rendered env
files (``engine.parse.parse_args``); ``--flag=value`` and vLLM's short ``-tp`` are spelled out first.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from seatplan.engine.parse import parse_args

# vLLM's short spellings (vLLM 0.32 vllm/engine/arg_utils.py:1177 "--tensor-parallel-size", "-tp"; likewise "-pp", "-q")
SHORT_FLAGS = {"-tp": "--tensor-parallel-size", "-pp": "--pipeline-parallel-size", "-q": "--quantization"}
INT_KEYS = {
    "--port": "port",
    "--tensor-parallel-size": "tensor_parallel_size",
    "--max-model-len": "max_model_len",
    "--kv-cache-memory-bytes": "kv_cache_memory_bytes",
    "--max-num-seqs": "max_num_seqs",
    "--max-num-batched-tokens": "max_num_batched_tokens",
}
TEXT_KEYS = {"--model": "model", "model": "model", "--served-model-name": "served_model_name", "--dtype": "dtype",
             "--kv-cache-dtype": "kv_cache_dtype"}
# Set by the plan (utilisation for the situation) and by render (--bind): adopting them would freeze them.
PLAN_OWNED = {"--gpu-memory-utilization": "the plan computes it for each start", "--host": "render's --bind sets it"}
ON = "on"  # how a flag without a value reads here


@dataclass
class SeatArgs:
    values: dict[str, Any] = field(default_factory=dict)  # fleet key → value
    flags: dict[str, str] = field(default_factory=dict)  # fleet key → the flag it came from
    extra_args: list[str] = field(default_factory=list)
    dropped: dict[str, str] = field(default_factory=dict)  # flag → its value, left to the plan or render
    problems: list[str] = field(default_factory=list)


def spelled_out(args: list[str]) -> list[str]:
    words: list[str] = []
    for word in args:
        if word.startswith("--") and "=" in word:
            words += word.split("=", 1)
        else:
            words.append(SHORT_FLAGS.get(word, word))
    return words


def read_args(args: list[str]) -> SeatArgs:
    seat = SeatArgs()
    # The words after the launcher: a leading positional is `vllm serve`'s model, which parse_args reads after `serve`.
    for flag, word in parse_args(["serve", *spelled_out(args)]).items():
        value = ON if word is None else word
        if flag in PLAN_OWNED:
            seat.dropped[flag] = value
        elif flag in INT_KEYS:
            _whole(seat, flag, INT_KEYS[flag], value)
        elif flag in TEXT_KEYS:
            seat.values[TEXT_KEYS[flag]], seat.flags[TEXT_KEYS[flag]] = value, "the model argument" if flag == "--model" and not args[0].startswith("--") else flag
        elif flag == "--enforce-eager" and value == ON:
            seat.values["enforce_eager"], seat.flags["enforce_eager"] = True, flag
        elif flag == "--override-generation-config" and _cap(value) is not None:
            seat.values["max_new_tokens"], seat.flags["max_new_tokens"] = _cap(value), flag
        else:
            seat.extra_args += [flag] if value == ON else [flag, value]
    return seat


def _whole(seat: SeatArgs, flag: str, key: str, value: str) -> None:
    if value.isdigit() and len(value) <= 18:
        seat.values[key], seat.flags[key] = int(value), flag
    else:  # vLLM also takes 128k / 20GiB here; a plain count leaves no doubt, the engine's own answer fills it
        seat.problems.append(f"{flag} {value[:40]!r} is not a plain whole number")


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
