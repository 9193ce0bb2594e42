"""What runs, read back into a launch: an engine command line (``engine.command`` wrote it, or a hand edit of it) as
the :class:`~seatplan.documents.launch.VllmLaunch` it starts, and a seat's env file as its
:class:`~seatplan.documents.launch.SeatLaunch`.

The words are read as vLLM's parser reads them (``engine.parse.read_vllm_args``: ``--x=v``, a unique prefix, the
last occurrence winning, ``32K``); the launcher and ``--host`` (where and how it runs, not what) are dropped; every
flag that is none of the launch's own is kept, spelled out, in ``extra_args``. What ``engine.command`` writes reads
back as the launch it was written from (``tests/engine/test_launch_change.py``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

from seatplan.documents.launch import ByUtilisation, KvSizing, Pinned, SeatLaunch, VllmLaunch
from seatplan.engine.command import COMMAND_KEY, ENV_FILES_KEY, FROM_HOST_KEY, RENDER_KEYS
from seatplan.engine.parse import FlagShape, VllmArgs, flag_table, launcher_args, read_vllm_args, split_shell_line
from seatplan.errors import SeatplanError

# Where and how the engine runs, not what it runs: never part of a launch (``render --bind``).
WHERE_FLAGS = frozenset({"--host"})
# The flags a launch writes of its own, each a field of VllmLaunch.
LAUNCH_FLAGS = frozenset({
    "--model", "--revision", "--served-model-name", "--port", "--tensor-parallel-size", "--max-model-len", "--kv-cache-memory-bytes",
    "--gpu-memory-utilization", "--max-num-seqs", "--max-num-batched-tokens", "--dtype", "--kv-cache-dtype", "--enforce-eager",
    "--override-generation-config", "--hf-overrides",
})
_FRACTION = re.compile(r"(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)", re.ASCII)
NOT_WRITTEN_BY_SEATPLAN = "render the directory again (`seatplan render PLAN -o DIR`)"


def long_name(flag: str) -> str:
    """The option a flag as read sets (``--no-enforce-eager`` sets ``--enforce-eager``)."""
    return flag_table().get(flag, FlagShape(flag, "", None)).name


def launch_from_command(words: Sequence[str]) -> VllmLaunch:
    """The launch a command line starts (its launcher, if any, skipped). A flag the launch needs and the line lacks,
    or a value vLLM would refuse, is an error naming the flag."""
    after = launcher_args(words)
    read = read_vllm_args(after if after is not None else words)
    if read.problems:
        raise SeatplanError(f"the engine command is not one vLLM starts: {read.problems[0]}", fix=NOT_WRITTEN_BY_SEATPLAN)
    extra = [written for written in read.written if long_name(written[0]) not in LAUNCH_FLAGS | WHERE_FLAGS]
    served = read.flags.get("--served-model-name")
    names = served if isinstance(served, list) else [served] if isinstance(served, str) else []
    if len(names) > 1:  # several served names: the launch's is the first, the flag is kept as given
        extra.append(["--served-model-name", *names])
    cap, cap_kept = generation_cap(read)
    overrides, overrides_kept = hf_overrides(read)
    extra += [["--override-generation-config", cap_kept]] if cap_kept is not None else []
    extra += [["--hf-overrides", overrides_kept]] if overrides_kept is not None else []
    if read.model is None:
        raise SeatplanError("the engine command names no model", fix=NOT_WRITTEN_BY_SEATPLAN)
    return VllmLaunch(
        model=read.model,
        revision=read.value("--revision"),
        served_model_name=names[0] if names else read.model,
        port=whole(read, "--port"),
        tensor_parallel_size=whole(read, "--tensor-parallel-size") or 1,
        max_model_len=required(whole(read, "--max-model-len"), "--max-model-len"),
        kv=kv_sizing(read),
        max_num_seqs=required(whole(read, "--max-num-seqs"), "--max-num-seqs"),
        max_num_batched_tokens=required(whole(read, "--max-num-batched-tokens"), "--max-num-batched-tokens"),
        dtype=read.value("--dtype") or "auto",
        kv_cache_dtype=read.value("--kv-cache-dtype") or "auto",
        enforce_eager="--enforce-eager" in read.flags,  # its --no- form, given last, is the one left (engine.parse)
        max_new_tokens=cap,
        hf_overrides=overrides,
        extra_args=[word for written in extra for word in written],
    )


def required(value: int | None, flag: str) -> int:
    if value is None:
        raise SeatplanError(f"the engine command has no {flag}, which seatplan always writes", fix=NOT_WRITTEN_BY_SEATPLAN)
    return value


def whole(read: VllmArgs, flag: str) -> int | None:
    """A count flag as vLLM reads it; ``auto``/``-1`` (vLLM's own choice) is no count a launch holds."""
    try:
        value = read.whole(flag)
    except ValueError as problem:
        raise SeatplanError(f"the engine command's {problem}", fix=NOT_WRITTEN_BY_SEATPLAN) from None
    if value is not None and value < 1:
        raise SeatplanError(f"the engine command's {flag} is {read.value(flag)!r}, no count seatplan writes", fix=NOT_WRITTEN_BY_SEATPLAN)
    return value


def kv_sizing(read: VllmArgs) -> KvSizing:
    text = read.value("--gpu-memory-utilization")
    if text is None or not _FRACTION.fullmatch(text.strip()) or not 0 < float(text) <= 1:
        said = "no --gpu-memory-utilization" if text is None else f"--gpu-memory-utilization {text[:40]!r}, not a fraction in (0, 1]"
        raise SeatplanError(f"the engine command has {said}", fix=NOT_WRITTEN_BY_SEATPLAN)
    util = float(text)
    pinned = whole(read, "--kv-cache-memory-bytes")
    return ByUtilisation(gpu_memory_utilization=util) if pinned is None else Pinned(kv_cache_memory_bytes=pinned, gpu_memory_utilization=util)


def json_object(text: str | None) -> dict[str, Any] | None:
    try:
        value = json.loads(text) if text is not None else None
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def generation_cap(read: VllmArgs) -> tuple[int | None, str | None]:
    """``--override-generation-config``: the output cap where it says that alone, else the flag's text kept as given."""
    text = read.value("--override-generation-config")
    value = json_object(text)
    cap = value.get("max_new_tokens") if value is not None and set(value) == {"max_new_tokens"} else None
    if isinstance(cap, int) and not isinstance(cap, bool) and cap >= 1:
        return cap, None
    return None, text


def hf_overrides(read: VllmArgs) -> tuple[dict[str, Any] | None, str | None]:
    text = read.value("--hf-overrides")
    value = json_object(text)
    return (value, None) if value is not None else (None, text)


def seat_launch_from_env(values: Mapping[str, str]) -> SeatLaunch:
    """A seat's env file as render wrote it (``engine.parse.parse_env``'s values): the launch its command starts, its
    environment by value, its secrets by reference and its files on the host."""
    launch = launch_from_command(split_shell_line(values[COMMAND_KEY])) if COMMAND_KEY in values else None
    pairs = [pair.partition("=") for pair in values.get(FROM_HOST_KEY, "").split()]
    return SeatLaunch(
        launch=launch,
        env={key: value for key, value in values.items() if key not in RENDER_KEYS},
        env_from_host={name: source for name, _, source in pairs},
        env_files=values.get(ENV_FILES_KEY, "").split(),
    )
