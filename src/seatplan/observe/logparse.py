"""vLLM startup logs → boots and engine stats (pure: lines in, typed records out).

Handles every vLLM from 0.8 to 0.32 (and the V0/pre-0.8 formats for robustness): plain files,
``docker logs`` / ``docker compose logs`` output (with or without ``-t``), journald short, short-iso,
``-o json`` and ``-o export`` output, ANSI colours, and process prefixes such as
``(EngineCore_DP0 pid=N)``. Several engines may be interleaved in one file; lines are tied to a boot
by their stream (container or unit), their process id, their time and, when an engine announces
itself, its served model name. Another process joins a boot only within 30 minutes of its lines on the
same stream; a clock going back starts another boot; a line with neither time, process nor stream
belongs to the boot of the line before it. A boot ends where the same process prints a once-per-boot
line again (a restart, even with the same pid inside a container) or where a new API server announces
itself. A boot whose start (the banner, the arguments, the engine config) is not in the log is a
*fragment*: its figures are read, but it is never compared with other boots as a whole start.
"""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from seatplan.documents.observed import Boot, BootError, EngineStats
from seatplan.errors import SeatplanError
from seatplan.exposition import LATEST_EPOCH_S
from seatplan.numeric_options import MAX_DEVICE_MEMORY_BYTES
from seatplan.units import MAX_PARALLEL_SIZE, MAX_PID, GiB, parse_bytes, whole_number

_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]", re.ASCII)
_DOCKER_TS = re.compile(r"^(?P<ts>\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?(?:Z|[+-]\d\d:?\d\d))\s", re.ASCII)
_COMPOSE = re.compile(r"^(?P<container>[A-Za-z0-9][\w.-]*)\s+\|\s?", re.ASCII)
_JOURNAL_SHORT = re.compile(
    r"^(?P<mon>Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec) +(?P<day>\d{1,2}) (?P<hms>\d\d:\d\d:\d\d)"
    r" (?P<host>\S+) (?P<ident>[^\s\[:]+)(?:\[(?P<pid>\d+)\])?: "
, re.ASCII)
_JOURNAL_ISO = re.compile(
    r"^(?P<ts>\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?(?:Z|[+-]\d\d:?\d\d)) (?P<host>\S+) (?P<ident>[^\s\[:]+)(?:\[(?P<pid>\d+)\])?: "
, re.ASCII)
_PROCESS = re.compile(r"\((?P<proc>[A-Za-z_][\w]*)(?: rank=(?P<rank>\d+))? pid=(?P<pid>\d+)\)\s*", re.ASCII)
_CORE = re.compile(
    r"(?P<level>DEBUG|INFO|WARNING|ERROR|CRITICAL)\s+(?P<md>\d\d-\d\d) (?P<hms>\d\d:\d\d:\d\d)(?:\.\d+)?\s+\[?[\w./-]+(?::\d+)?\]\s*(?P<msg>.*)"
, re.ASCII)
_MONTHS = {m: i for i, m in enumerate("Jan Feb Mar Apr May Jun Jul Aug Sep Oct Nov Dec".split(), start=1)}

# A decimal as vLLM prints one; "2..7" (a garbled line) must not match, or float() would raise.
_F = r"-?(?:\d+(?:\.\d*)?|\.\d+)"

# The regexes of VLLM.md §3.1 (checked against vLLM's format strings), plus the lines that start a boot,
# the 0.10.2+ sizing hint, and the periodic stats line.
PATTERNS: dict[str, re.Pattern[str]] = {
    name: re.compile(pattern, re.ASCII)
    for name, pattern in {
        "api_version": r"vLLM API server version (?P<ver>[\w.+-]+)",
        "non_default_args": r"non-default args: (?P<args>\{.*\})",
        "engine_version": r"Initializing an? (?:V[01] )?LLM engine \(v(?P<ver>[^)]+)\)(?: with config: (?P<cfg>.*))?",
        "max_model_len": r"Using max model len (?P<mml>\d+)",
        "weights": r"(?:Model loading took|Loading model weights took) (?P<size>-?[\d.]+) ?(?P<unit>GiB|GB)(?: memory)?(?: and (?P<secs>[\d.]+) seconds)?",
        "available_kv": rf"Available KV cache memory: (?P<gib>{_F}) ?GiB",
        "kv_bytes_flag": rf"(?:Initial free memory (?P<free>{_F}) ?GiB, )?reserved (?P<gib>{_F}) ?GiB memory for KV Cache as specified by kv_cache_memory_bytes",
        "kv_cache_tokens": r"(?:(?P<dev>[A-Z]{2,4})(?: \+ host)? )?KV cache size: (?P<tokens>[\d,]+) tokens",
        "legacy_blocks": r"# (?P<dev>\w+) blocks: (?P<gpu>\d+)(?:, # CPU blocks: (?P<cpu>\d+))?",
        "max_concurrency": r"Maximum concurrency for (?P<len>[\d,]+) tokens per request: (?P<x>[\d.]+)x",
        "graph_capture": rf"Graph capturing finished in (?P<secs>\d+) secs?, took (?P<gib>{_F}) GiB",
        "cg_estimate": rf"Estimated CUDA graph memory: (?P<gib>{_F}) GiB total",
        "cg_pool": rf"CUDA graph pool memory: (?P<actual>{_F}) GiB \(actual\), (?P<est>{_F}) GiB \(estimated\)",
        "cg_util_equiv": r"--gpu-memory-utilization=(?P<cur>[\d.]+) is equivalent to --gpu-memory-utilization=(?P<equiv>[\d.]+)",
        "sizing_hint": (r"Free memory on device \((?P<free>[\d.]+)/(?P<total>[\d.]+) GiB\) on startup\."
            r" Desired GPU memory utilization is \((?P<util>[\d.]+), (?P<req>[\d.]+) GiB\)\.(?P<rest>.*)"),
        "kv_suggestion": r"Replace gpu_memory_utilization config with `--kv-cache-memory=(?P<req>-?\d+)`.*?`--kv-cache-memory=(?P<full>-?\d+)`",
        "profile_summary": (rf"Total non KV cache memory: (?P<nonkv>{_F}) ?GiB; torch peak memory increase: (?P<peak>{_F}) ?GiB;"
            rf" (?P<kind>non-torch forward increase memory|total consumed \(from mem_get_info\)): (?P<other>{_F}) ?GiB;"
            rf" weights memory: (?P<weights>{_F}) ?GiB"),
        "v0_profile": (rf"model weights take (?P<weights>{_F}) ?GiB; non_torch_memory takes (?P<nontorch>{_F}) ?GiB;"
            rf" PyTorch activation peak memory takes (?P<peak>{_F}) ?GiB; the rest of the memory reserved for KV Cache is (?P<kv>{_F}) ?GiB"),
        "v0_profile_results": (rf"Memory profiling results: total_gpu_memory=(?P<total>[\d.]+)GiB .*?non_torch_memory=(?P<nontorch>{_F})GiB"
            rf" kv_cache_size=(?P<kv>{_F})GiB gpu_memory_utilization=(?P<util>[\d.]+)"),
        "auto_fit": r"Auto-fit max_model_len: reduced from (?P<old>\d+) to (?P<new>\d+)",
        "init_engine": r"init engine \(profile, create kv cache, warmup model\) took (?P<secs>[\d.]+) s",
        "err_not_enough_kv": (r"To serve at least one request with the models?'s max seq len \((?P<mml>\d+)\), \((?P<need>[\d.]+) GiB KV cache is needed"
            r", which is larger than the available KV cache memory \((?P<avail>-?[\d.]+) GiB\)\."
            r"(?: Based on the available memory, the estimated maximum model length is (?P<est>\d+)\.)?"),
        "err_no_kv_memory": r"No available memory for the cache blocks",
        "err_v0_not_enough_kv": r"The model's max seq len \((?P<mml>\d+)\) is larger than the maximum number of tokens that can be stored in KV cache \((?P<tokens>\d+)\)",
        "err_max_model_len": (r"User-specified max_model_len \((?P<user>\d+)\) is greater than the derived max_model_len \((?P<key>\w+)=(?P<derived>[\d.]+)"
            r" or model_max_length=(?P<model_max_length>\w+)"),
        "err_free_memory": (r"Free memory on device (?:\S+ )?\((?P<free>[\d.]+)/(?P<total>[\d.]+) GiB\)"
            r" on startup is less than desired GPU memory utilization \((?P<util>[\d.]+), (?P<req>[\d.]+) GiB\)"),
        "err_profiling_assert": r"Error in memory profiling\. Initial free memory (?P<init>[\d.]+) GiB, current free memory (?P<cur>[\d.]+) GiB",
        "err_engine_failed": r"EngineCore failed to start|Engine core initialization failed",
        "stats": r"Avg prompt throughput: [\d.]+ tokens/s, Avg generation throughput: [\d.]+ tokens/s, Running: (?P<running>\d+) reqs",
    }.items()
}
# Every pattern above contains one of these words; most log lines contain none and skip the full scan.
_WORTH_A_LOOK = re.compile(
    r"GiB|GB|tokens|LLM engine|non-default args|API server version|max model len|blocks:|max seq len|"
    r"max_model_len|failed to start|initialization failed|No available memory|Auto-fit|init engine|gpu-memory-utilization"
, re.ASCII)
_STATS_WAITING = re.compile(r"(?:Waiting|Pending): (?P<n>\d+) reqs", re.ASCII)
_STATS_USAGE = re.compile(r"(?:GPU|CPU|XPU|TPU|HPU|NPU)? ?KV cache usage: (?P<pct>[\d.]+)%", re.ASCII)
_STATS_PREEMPT = re.compile(r"Preemptions: (?P<n>\d+)", re.ASCII)
_HINT_PART = re.compile(rf"(?P<gib>{_F}) GiB for (?P<what>[^,.]+)", re.ASCII)
_CFG_FIELD = re.compile(r"(?P<key>model|served_model_name|tensor_parallel_size)=(?P<val>'[^']*'|\[[^\]]*\]|[^,\s]+)", re.ASCII)

# Kinds a process prints once per boot: seeing one again from the same process means a restart.
_ONCE = {
    "api_version", "non_default_args", "engine_version", "max_model_len", "weights", "available_kv",
    "kv_bytes_flag", "kv_cache_tokens", "legacy_blocks", "init_engine", "sizing_hint", "profile_summary",
}
_STARTS_API = {"api_version", "non_default_args"}
# Lines an engine prints when it starts: a boot without any of them is a fragment of one.
_STARTS_BOOT = _STARTS_API | {"engine_version"}
_BOOT_ERRORS = {
    "err_not_enough_kv", "err_no_kv_memory", "err_v0_not_enough_kv", "err_max_model_len",
    "err_free_memory", "err_profiling_assert", "err_engine_failed",
}


@dataclass(frozen=True)
class LogLine:
    """One log line with its wrappers peeled off."""

    number: int
    stream: str
    pid: int | None
    at: datetime | None
    text: str


def _gib(text: str | None) -> int | None:
    if text is None:
        return None
    size_bytes = float(text) * GiB
    # A figure no device holds (a run of 400 nines) is as garbled as "93.35.82 GiB": the caller drops the line.
    # Negative ones are real: vLLM prints "Available KV cache memory: -2.14 GiB" when the weights overrun the budget.
    if not abs(size_bytes) <= MAX_DEVICE_MEMORY_BYTES:
        raise ValueError(f"{text} GiB is no device's memory")
    return int(round(size_bytes))


@dataclass(frozen=True)
class LocalClock:
    """How to read a timestamp without year or zone: vLLM's ``MM-DD HH:MM:SS``, journald's ``Nov 27 10:05:40``."""

    year: int | None = None
    utc_offset_s: int = 0  # the host's offset from UTC (+3600 for UTC+01:00)

    def at(self, month: int, day: int, hms: str) -> datetime | None:
        year = self.year if self.year is not None else datetime.now(UTC).year
        try:
            hour, minute, second = map(int, hms.split(":"))  # HH:MM:SS, as the line patterns match it
            local = datetime(year, month, day, hour, minute, second, tzinfo=UTC)
        except ValueError:
            return None
        return local - timedelta(seconds=self.utc_offset_s)


def split_line(raw: str, number: int, *, clock: LocalClock = LocalClock(), stream: str = "", pid: int | None = None,
               at: datetime | None = None) -> LogLine:
    """Peel docker, compose, journald and process prefixes and colours; keep the message."""
    text = _ANSI.sub("", raw.rstrip("\r\n"))
    if match := _DOCKER_TS.match(text):
        at = at or _parse_iso(match["ts"])
        text = text[match.end():]
    if match := _COMPOSE.match(text):
        stream = stream or match["container"]
        text = text[match.end():]
        if match := _DOCKER_TS.match(text):
            at = at or _parse_iso(match["ts"])
            text = text[match.end():]
    if match := _JOURNAL_SHORT.match(text):
        stream = stream or match["ident"]
        pid = pid or (int(match["pid"]) if match["pid"] else None)
        at = at or clock.at(_MONTHS[match["mon"]], int(match["day"]), match["hms"])
        text = text[match.end():]
    elif match := _JOURNAL_ISO.match(text):
        stream = stream or match["ident"]
        pid = pid or (int(match["pid"]) if match["pid"] else None)
        at = at or _parse_iso(match["ts"])
        text = text[match.end():]
    if match := _PROCESS.match(text.lstrip()):
        pid = int(match["pid"])
        text = text.lstrip()[match.end():]
    if at is None and (match := _CORE.search(text)):
        month, day = map(int, match["md"].split("-"))
        at = clock.at(month, day, match["hms"])
    return LogLine(number=number, stream=stream, pid=pid, at=at, text=text)


def _parse_iso(text: str) -> datetime | None:
    cleaned = re.sub(r"(\.\d{6})\d+", r"\1", text.replace("Z", "+00:00"))
    cleaned = re.sub(r"([+-]\d\d)(\d\d)$", r"\1:\2", cleaned)
    try:
        parsed = datetime.fromisoformat(cleaned)
    except ValueError:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def read_lines(lines: Iterable[str], *, clock: LocalClock = LocalClock()) -> Iterator[LogLine]:
    """Turn raw lines (any of the supported wrappers) into :class:`LogLine` records."""
    export_record: dict[str, str] = {}
    export_start = 0
    for number, raw in enumerate(lines, start=1):
        stripped = raw.strip()
        if stripped.startswith("{") and '"MESSAGE"' in stripped:
            record = _journal_json(stripped)
            if record is not None:
                yield split_line(str(record.get("MESSAGE", "")), number, clock=clock, **_journal_fields(record))
                continue
        if stripped.startswith("__CURSOR=") or export_record:
            if not stripped:
                if "MESSAGE" in export_record:
                    yield split_line(export_record["MESSAGE"], export_start, clock=clock, **_journal_fields(export_record))
                export_record = {}
                continue
            key, sep, value = stripped.partition("=")
            if sep:
                export_record.setdefault(key, value)
                export_start = export_start if len(export_record) > 1 else number
                continue
        yield split_line(raw, number, clock=clock)
    if "MESSAGE" in export_record:
        yield split_line(export_record["MESSAGE"], export_start, clock=clock, **_journal_fields(export_record))


def _journal_json(text: str) -> dict | None:
    try:
        record = json.loads(text)
    except ValueError:
        return None
    return record if isinstance(record, dict) and isinstance(record.get("MESSAGE"), str) else None


def _journal_fields(record: dict) -> dict:
    # microseconds since the epoch, bounded by the latest date a reader takes (a 400-digit stamp is no time)
    stamp = whole_number(str(record.get("__REALTIME_TIMESTAMP", "")), maximum=int(LATEST_EPOCH_S) * 1_000_000)
    at = None if stamp is None else datetime(1970, 1, 1, tzinfo=UTC) + timedelta(microseconds=stamp)
    return {
        "stream": str(record.get("SYSLOG_IDENTIFIER") or record.get("_SYSTEMD_UNIT") or ""),
        "pid": whole_number(str(record.get("_PID", "")), maximum=MAX_PID),
        "at": at,
    }


@dataclass
class _Draft:
    stream: str
    first_line: int
    last_line: int
    seen: set[tuple[int | None, str]] = field(default_factory=set)
    fields: dict = field(default_factory=dict)
    pids: list[int] = field(default_factory=list)
    errors: list[BootError] = field(default_factory=list)
    stats: list[tuple[LogLine, re.Match[str]]] = field(default_factory=list)
    finished: bool = False
    started: bool = False  # a line that starts an engine (banner, arguments, engine config) was seen
    last_at: datetime | None = None

    @property
    def served(self) -> str | None:
        return self.fields.get("served_model_name")


@dataclass
class ParsedLog:
    boots: list[Boot]
    stats: list[EngineStats]


def parse_log(lines: Iterable[str], *, source: str = "log", year: int | None = None, utc_offset_s: int = 0,
              seat: str | None = None) -> ParsedLog:
    """All boots and engine stats in one log. ``seat`` names every boot (else served name, container, model).

    ``year`` and ``utc_offset_s`` read vLLM's own ``MM-DD HH:MM:SS`` (host time, no year); docker, journald
    ISO and JSON timestamps carry their zone and need neither.
    """
    drafts: list[_Draft] = []
    by_process: dict[tuple[str, int | None], _Draft] = {}
    previous: _Draft | None = None
    for line in read_lines(lines, clock=LocalClock(year, utc_offset_s)):
        for kind, match in _matches(line.text):
            draft = previous = _target(drafts, by_process, line, kind, match, previous)
            draft.last_line = line.number
            draft.last_at = line.at or draft.last_at
            draft.started = draft.started or kind in _STARTS_BOOT
            if line.pid is not None and line.pid not in draft.pids:
                draft.pids.append(line.pid)
            by_process[(line.stream, line.pid)] = draft
            if kind == "stats":
                draft.stats.append((line, match))
                continue
            if kind in _ONCE:
                draft.seen.add((line.pid, kind))
            try:
                _apply(draft, kind, match, line, source)
            except (ValueError, OverflowError):
                continue  # a garbled figure ("93.35.82 GiB", "1e999"): the line tells nothing, the rest of the boot still counts
    boots = [_finish(draft, source, seat) for draft in drafts]
    stats = [
        _stats_record(boot.seat, line, match, source)
        for boot, draft in zip(boots, drafts)
        for line, match in draft.stats
    ]
    return ParsedLog(boots=boots, stats=stats)


def _matches(text: str) -> Iterator[tuple[str, re.Match[str]]]:
    if not _WORTH_A_LOOK.search(text):
        return
    for kind, pattern in PATTERNS.items():
        match = pattern.search(text)
        if match:
            if kind == "err_free_memory":
                yield kind, match
                return
            if kind == "sizing_hint" and "is less than desired" in text:
                continue
            yield kind, match


def _target(drafts: list[_Draft], by_process: dict, line: LogLine, kind: str, match: re.Match[str],
            previous: _Draft | None) -> _Draft:
    """The boot a line belongs to (see the module docstring)."""
    served = _served_name(kind, match)
    if line.pid is None and line.at is None and not line.stream:
        # Nothing names the line's engine or time (a traceback, an unprefixed excerpt): it belongs to the
        # boot the line before it belonged to, if that boot can still take it, else it starts a fragment.
        if previous is not None and not previous.finished and (None, kind) not in previous.seen \
                and previous.last_at is None and not previous.pids:
            return previous
        return _new_draft(drafts, line)
    mapped = by_process.get((line.stream, line.pid))
    if mapped is not None and (line.pid, kind) not in mapped.seen and _same_clock(mapped, line, JOIN_WINDOW_S * 1000):
        return mapped
    if kind not in _STARTS_API:
        for draft in reversed(drafts):
            if draft.stream != line.stream or draft.finished or (line.pid, kind) in draft.seen:
                continue
            if served and draft.served and draft.served != served:
                continue
            # Another process joins a boot only when its lines are that boot's (same minutes, same stream);
            # without a time or a process id on either side nothing ties them.
            if (line.pid is None) != (not draft.pids) or not _same_clock(draft, line, JOIN_WINDOW_S):
                continue
            return draft
    return _new_draft(drafts, line)


# Lines of one boot from different processes fall within this long of each other (weights loading is silent).
JOIN_WINDOW_S = 30 * 60
# A clock going back further than this is another boot (or another machine's excerpt).
CLOCK_SLACK_S = 60


def _same_clock(draft: _Draft, line: LogLine, window_s: float) -> bool:
    if draft.last_at is None or line.at is None:
        return draft.last_at is None and line.at is None  # both without a clock: same; only one: not
    gap = (line.at - draft.last_at).total_seconds()
    return -CLOCK_SLACK_S <= gap <= window_s


def _new_draft(drafts: list[_Draft], line: LogLine) -> _Draft:
    draft = _Draft(stream=line.stream, first_line=line.number, last_line=line.number)
    drafts.append(draft)
    return draft


def _served_name(kind: str, match: re.Match[str]) -> str | None:
    if kind == "engine_version" and match["cfg"]:
        return _config_fields(match["cfg"]).get("served_model_name")
    if kind == "non_default_args":
        return _parse_args(match["args"]).get("served_model_name")
    return None


def _config_fields(config: str) -> dict:
    found: dict = {}
    for item in _CFG_FIELD.finditer(config):
        value = item["val"].strip("'")
        if value.startswith("["):
            value = value.strip("[]").split(",")[0].strip().strip("'\"")
        found.setdefault(item["key"], value)
    if "tensor_parallel_size" in found:
        found["tensor_parallel_size"] = whole_number(found["tensor_parallel_size"], minimum=1, maximum=MAX_PARALLEL_SIZE)
    return found


def _parse_args(text: str) -> dict:
    """vLLM prints the non-default CLI arguments as a Python dict literal."""
    try:
        args = ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return {}
    if not isinstance(args, dict):
        return {}
    found: dict = {}
    served = args.get("served_model_name")
    if isinstance(served, (list, tuple)) and served:
        served = served[0]
    if isinstance(served, str):
        found["served_model_name"] = served
    for key, kind in (("model", str), ("port", int), ("tensor_parallel_size", int), ("max_model_len", int),
                      ("gpu_memory_utilization", float)):
        if isinstance(args.get(key), (int, float, str)) and not isinstance(args.get(key), bool):
            try:
                found[key] = kind(args[key])
            except ValueError:
                pass
    pinned = args.get("kv_cache_memory_bytes")
    if isinstance(pinned, (int, str)) and not isinstance(pinned, bool):
        try:
            found["kv_cache_memory_bytes_pinned"] = parse_bytes(pinned)
        except SeatplanError:
            pass
    return found


def _count(text: str) -> int:
    return int(text.replace(",", ""))


# Lines whose figures each go straight into one field: kind → [(field, group, convert)].
_FIELDS: dict[str, list[tuple[str, str, Callable[[str], object]]]] = {
    "max_model_len": [("max_model_len", "mml", int)],
    "kv_cache_tokens": [("kv_cache_tokens", "tokens", _count)],
    "legacy_blocks": [("num_gpu_blocks", "gpu", int)],
    "max_concurrency": [("max_concurrency", "x", float), ("concurrency_max_model_len", "len", _count)],
    "graph_capture": [("cuda_graph_bytes", "gib", _gib)],
    "cg_estimate": [("cuda_graph_estimate_bytes", "gib", _gib)],
    "cg_pool": [("cuda_graph_bytes", "actual", _gib)],
    "kv_suggestion": [("suggested_kv_bytes_requested", "req", int), ("suggested_kv_bytes_full_gpu", "full", int)],
    "auto_fit": [("max_model_len_before_auto_fit", "old", int), ("max_model_len", "new", _count)],
    "profile_summary": [("non_kv_bytes", "nonkv", _gib), ("activation_peak_bytes", "peak", _gib)],
    "v0_profile": [("non_torch_bytes", "nontorch", _gib), ("available_kv_bytes", "kv", _gib), ("activation_peak_bytes", "peak", _gib)],
    "v0_profile_results": [("non_torch_bytes", "nontorch", _gib), ("available_kv_bytes", "kv", _gib), ("total_gpu_bytes", "total", _gib)],
}
# Figures another line may already have stated more precisely: kind → [(field, group, convert)], first one wins.
_DEFAULTS: dict[str, list[tuple[str, str, Callable[[str], object]]]] = {
    "api_version": [("version", "ver", str)],
    # "GB" in the oldest weights lines is vLLM's spelling of the same 2**30 figure.
    "weights": [("weights_bytes", "size", _gib)],
    "cg_pool": [("cuda_graph_estimate_bytes", "est", _gib)],
    "cg_util_equiv": [("gpu_memory_utilization", "cur", float)],
    "profile_summary": [("weights_bytes", "weights", _gib)],
    "v0_profile": [("weights_bytes", "weights", _gib)],
    "v0_profile_results": [("gpu_memory_utilization", "util", float)],
}


def _apply(draft: _Draft, kind: str, match: re.Match[str], line: LogLine, source: str) -> None:
    values = draft.fields
    if line.at is not None:
        values.setdefault("started_at", line.at)
    for field_name, group, convert in _FIELDS.get(kind, ()):
        values[field_name] = convert(match[group])
    for field_name, group, convert in _DEFAULTS.get(kind, ()):
        values.setdefault(field_name, convert(match[group]))
    if kind in _HANDLERS:
        _HANDLERS[kind](values, match)
    elif kind == "init_engine":
        values["ready"] = True
        draft.finished = True
    elif kind in _BOOT_ERRORS:
        draft.errors.append(_boot_error(kind, match, line, source))
        draft.finished = kind != "err_engine_failed" or draft.finished


def _apply_args(values: dict, match: re.Match[str]) -> None:
    for key, value in _parse_args(match["args"]).items():
        values.setdefault(key, value)


def _apply_engine(values: dict, match: re.Match[str]) -> None:
    values["version"] = match["ver"]
    for key, value in _config_fields(match["cfg"] or "").items():
        if value is not None:
            values.setdefault(key, value)


def _apply_available(values: dict, match: re.Match[str]) -> None:
    # Each tensor-parallel rank prints its own figure; vLLM sizes the cache by the smallest.
    size = _gib(match["gib"])
    assert size is not None  # the available_kv pattern's gib group is not optional
    values["available_kv_bytes"] = min(values.get("available_kv_bytes", size), size)


def _apply_pinned(values: dict, match: re.Match[str]) -> None:
    # The exact bytes come from the arguments line when there is one; this line rounds to 0.01 GiB.
    values["kv_cache_memory_bytes_pinned"] = values.get("kv_cache_memory_bytes_pinned") or _gib(match["gib"])
    values["available_kv_bytes"] = values["kv_cache_memory_bytes_pinned"]
    if match["free"]:
        values.setdefault("free_at_start_bytes", _gib(match["free"]))


def _apply_device(values: dict, match: re.Match[str]) -> None:
    values["kv_cache_device"] = match["dev"] or "GPU"


def _apply_profile(values: dict, match: re.Match[str]) -> None:
    size = _gib(match["other"])
    values["consumed_bytes" if match["kind"].startswith("total consumed") else "non_torch_bytes"] = size


def _apply_hint(values: dict, match: re.Match[str]) -> None:
    values["free_at_start_bytes"] = _gib(match["free"])
    values["total_gpu_bytes"] = _gib(match["total"])
    values.setdefault("gpu_memory_utilization", float(match["util"]))
    for part in _HINT_PART.finditer(match["rest"]):
        what, size = part["what"].lower(), _gib(part["gib"])
        if "consumed" in what:
            values["consumed_bytes"] = size
        elif "peak activation" in what:
            values["activation_peak_bytes"] = size
        elif "non-torch" in what:
            values["non_torch_bytes"] = size
        elif "weight" in what:
            values.setdefault("weights_bytes", size)
        elif "cudagraph" in what.replace(" ", ""):
            values.setdefault("cuda_graph_estimate_bytes", size)
    if kv := PATTERNS["kv_suggestion"].search(match["rest"]):
        values["suggested_kv_bytes_requested"] = int(kv["req"])
        values["suggested_kv_bytes_full_gpu"] = int(kv["full"])


_HANDLERS: dict[str, Callable[[dict, re.Match[str]], None]] = {
    "non_default_args": _apply_args,
    "engine_version": _apply_engine,
    "available_kv": _apply_available,
    "kv_bytes_flag": _apply_pinned,
    "kv_cache_tokens": _apply_device,
    "profile_summary": _apply_profile,
    "sizing_hint": _apply_hint,
}


def _boot_error(kind: str, match: re.Match[str], line: LogLine, source: str) -> BootError:
    where = f"{source}:{line.number}"
    message = match.group(0)
    if kind == "err_not_enough_kv":
        return BootError(kind="not_enough_kv_cache", message=message, where=where, max_model_len=int(match["mml"]),
                         needed_kv_bytes=_gib(match["need"]), available_kv_bytes=_gib(match["avail"]),
                         estimated_max_model_len=int(match["est"]) if match["est"] else None)
    if kind == "err_v0_not_enough_kv":
        return BootError(kind="not_enough_kv_cache", message=message, where=where, max_model_len=int(match["mml"]),
                         estimated_max_model_len=int(match["tokens"]))
    if kind == "err_no_kv_memory":
        return BootError(kind="no_kv_memory", message=message, where=where)
    if kind == "err_max_model_len":
        return BootError(kind="max_model_len_above_derived", message=message, where=where,
                         max_model_len=int(match["user"]), derived_max_model_len=int(float(match["derived"])))
    if kind == "err_free_memory":
        return BootError(kind="free_memory_below_utilization", message=message, where=where,
                         free_bytes=_gib(match["free"]), total_bytes=_gib(match["total"]), requested_bytes=_gib(match["req"]))
    if kind == "err_profiling_assert":
        return BootError(kind="profiling_free_memory_changed", message=message, where=where,
                         free_bytes=_gib(match["cur"]))
    return BootError(kind="engine_failed", message=message, where=where)


def _seat_name(draft: _Draft, source: str, seat: str | None) -> str:
    if seat:
        return seat
    values = draft.fields
    if values.get("served_model_name"):
        return values["served_model_name"]
    if draft.stream:
        return draft.stream
    if values.get("model"):
        return str(values["model"]).rstrip("/").split("/")[-1]
    # Nothing names this engine: it is its own (a fragment of an unknown engine is nobody's neighbour or earlier boot).
    return f"{source.rsplit('/', 1)[-1].split('.')[0]}:{draft.first_line}"


def _engine_identity(draft: _Draft, values: dict) -> str:
    """What identifies the engine, as the log shows it: container or unit, served name, model, port, processes."""
    parts = [f"stream {draft.stream}" if draft.stream else "",
             f"served {values['served_model_name']}" if values.get("served_model_name") else "",
             f"model {values['model']}" if values.get("model") else "",
             f"port {values['port']}" if values.get("port") else "",
             f"pid {'/'.join(map(str, draft.pids))}" if draft.pids else "",
             f"vLLM {values['version']}" if values.get("version") else ""]
    return ", ".join(part for part in parts if part) or "unidentified"


def _finish(draft: _Draft, source: str, seat: str | None) -> Boot:
    values = dict(draft.fields)
    if values.get("non_torch_bytes") is None and values.get("consumed_bytes") is not None and values.get("weights_bytes") is not None:
        # 0.27+ reports the whole free-memory drop; what is not weights is the non-torch part.
        values["non_torch_bytes"] = values["consumed_bytes"] - values["weights_bytes"]
    if values.get("kv_cache_memory_bytes_pinned") is not None and "available_kv_bytes" not in values:
        values["available_kv_bytes"] = values["kv_cache_memory_bytes_pinned"]
    return Boot(
        seat=_seat_name(draft, source, seat),
        source=f"{source}:{draft.first_line}-{draft.last_line}",
        engine=_engine_identity(draft, values),
        fragment=not draft.started,
        ended_at=draft.last_at,
        pids=draft.pids,
        errors=draft.errors,
        **values,
    )


def _stats_record(seat: str, line: LogLine, match: re.Match[str], source: str) -> EngineStats:
    text = line.text
    waiting = _STATS_WAITING.search(text)
    usage = _STATS_USAGE.search(text)
    preempt = _STATS_PREEMPT.search(text)
    return EngineStats(
        seat=seat,
        at=line.at,
        where=f"{source}:{line.number}",
        running_requests=int(match["running"]),
        waiting_requests=int(waiting["n"]) if waiting else None,
        kv_cache_usage_pct=float(usage["pct"]) if usage else None,
        preemptions=int(preempt["n"]) if preempt else 0,
    )
