"""Boot the real vLLM CPU engine once, read what it reports, and always stop it.

Usage (from any test; the vLLM virtualenv comes from ``SEATPLAN_VLLM_VENV``)::

    from kits.vllm_engine import EngineConfig, boot_engine, vllm_python

    config = EngineConfig(name="qwen3-dense", model_dir=model_dir, max_model_len=3000,
                          kv_cache_memory_bytes=50_000_123)
    boot = boot_engine(vllm_python(), config, log_dir)
    boot.cache_config_labels["num_gpu_blocks"]   # labels of vllm:cache_config_info in /metrics
    boot.served_max_model_len                    # max_model_len of /v1/models
    boot.log_text                                # the whole captured start-up log

:func:`boot_engine` starts ``python -m vllm.entrypoints.openai.api_server`` on a free loopback
port with its output captured to ``<log_dir>/<name>.log``, waits for ``/health``, reads
``/metrics``, ``/v1/models`` and ``/version``, sends one short chat (or text) completion, then stops the
server (SIGTERM, then SIGKILL to its process group) whether or not anything failed. A boot that
does not come up raises :class:`EngineBootError` carrying the log tail. Each result is also saved as
``<log_dir>/<name>.json`` (see :meth:`BootResult.to_json`) and the start-up ``/metrics`` text as
``<log_dir>/<name>.metrics.prom``, beside the log.
"""

from __future__ import annotations

import ctypes
import json
import os
import re
import signal
import socket
import subprocess
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Literal

import httpx

from kits.parts import live_group_members, refuse_while_installing
from seatplan.fileio import atomic_write_text

VLLM_VERSION = "0.32.0"
HEALTH_TIMEOUT_S = 600.0  # boots take 25-60 s alone, minutes on a loaded 2-core machine
REQUEST_TIMEOUT_S = 60.0
STOP_GRACE_S = 20.0
LOG_TAIL_CHARS = 6000
PROBE_MAX_TOKENS = 8
PROBE_PROMPT = "Hello, how are you today?"
PR_SET_PDEATHSIG = 1  # linux/prctl.h

_CACHE_CONFIG_INFO = re.compile(r"^vllm:cache_config_info\{(?P<labels>.*)\}\s+\S+\s*$", re.MULTILINE)
_LABEL = re.compile(r'(?P<key>[a-zA-Z_][a-zA-Z0-9_]*)="(?P<value>(?:[^"\\]|\\.)*)"')


def seatplan_cache_root() -> Path:
    """The cache the install script uses (``SEATPLAN_TEST_CACHE``, default ~/.cache/seatplan)."""
    return Path(os.environ.get("SEATPLAN_TEST_CACHE", Path.home() / ".cache" / "seatplan"))


def boot_log_dir() -> Path:
    """Where the test fixtures keep each boot's log, result JSON and /metrics text."""
    return seatplan_cache_root() / "vllm-boots"


def vllm_venv() -> Path:
    refuse_while_installing("the vLLM virtualenv (SEATPLAN_VLLM_VENV)")
    return Path(os.environ.get("SEATPLAN_VLLM_VENV", seatplan_cache_root() / f"vllm-{VLLM_VERSION}"))


def vllm_python() -> Path:
    """The vLLM virtualenv's interpreter (it may not exist: callers ``require`` it)."""
    return vllm_venv() / "bin" / "python"


def vllm_installed() -> bool:
    python = vllm_python()
    if not python.is_file():
        return False
    probe = subprocess.run([str(python), "-c", "import vllm"], capture_output=True, timeout=120)
    return probe.returncode == 0


@dataclass(frozen=True)
class EngineConfig:
    """One engine start: the model and the flags that decide its KV cache."""

    name: str  # unique per boot; names the captured log and result files
    model_dir: Path
    max_model_len: int
    kv_cache_memory_bytes: int
    kv_cache_dtype: str = "auto"
    prefix_caching: bool = True
    dtype: str = "bfloat16"
    # The request sent after start-up: "chat", "completion" (gpt-oss chat needs the Harmony
    # encoding files, which cannot be fetched here) or "none" (the CPU MLA kernel boots with fp8 KV
    # but fails every request).
    probe: Literal["chat", "completion", "none"] = "chat"
    attention_backend: str | None = None  # --attention-backend; None lets vLLM choose
    extra_args: tuple[str, ...] = ()

    @property
    def served_model_name(self) -> str:
        return f"tiny-{self.name}"

    def server_args(self, port: int) -> list[str]:
        args = [
            "-m", "vllm.entrypoints.openai.api_server",
            "--model", str(self.model_dir),
            "--served-model-name", self.served_model_name,
            "--host", "127.0.0.1", "--port", str(port),
            "--max-model-len", str(self.max_model_len),
            "--kv-cache-memory-bytes", str(self.kv_cache_memory_bytes),
            "--kv-cache-dtype", self.kv_cache_dtype,
            "--dtype", self.dtype,
            "--enforce-eager",
        ]
        if not self.prefix_caching:
            args.append("--no-enable-prefix-caching")
        if self.attention_backend:
            args += ["--attention-backend", self.attention_backend]
        return args + list(self.extra_args)


@dataclass
class BootResult:
    config: EngineConfig
    cache_config_labels: dict[str, str]
    served_max_model_len: int
    version: str
    probe_completion_tokens: int | None  # tokens the probe request generated; None without a probe
    boot_seconds: float  # process start to /health 200
    log_path: Path
    log_text: str = field(repr=False)
    metrics_text: str = field(repr=False)  # /metrics right after start-up

    def to_json(self) -> dict:
        """Everything but the log and metrics texts (saved beside it), JSON-ready."""
        document = asdict(self)
        document.pop("log_text")
        document.pop("metrics_text")
        document["config"]["model_dir"] = str(self.config.model_dir)
        document["config"]["extra_args"] = list(self.config.extra_args)
        document["log_path"] = str(self.log_path)
        return document


class EngineBootError(RuntimeError):
    """The engine did not come up or answer; the message ends with the log tail."""


def parse_cache_config_info(metrics_text: str) -> dict[str, str]:
    """Labels of the ``vllm:cache_config_info`` gauge in a Prometheus text exposition."""
    found = _CACHE_CONFIG_INFO.search(metrics_text)
    if found is None:
        raise ValueError("no vllm:cache_config_info sample in /metrics")
    return {
        label["key"]: bytes(label["value"], "utf-8").decode("unicode_escape")
        for label in _LABEL.finditer(found["labels"])
    }


def _die_with_parent() -> None:
    """Runs in the child before exec: SIGTERM it when the test process dies, even by SIGKILL."""
    ctypes.CDLL("libc.so.6", use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


def _free_loopback_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _log_tail(log_path: Path) -> str:
    text = log_path.read_text(errors="replace") if log_path.exists() else ""
    return text[-LOG_TAIL_CHARS:]


def _wait_for_health(process: subprocess.Popen, client: httpx.Client, log_path: Path, timeout_s: float) -> float:
    started = time.monotonic()
    while True:
        if process.poll() is not None:
            raise EngineBootError(
                f"vLLM exited with status {process.returncode} before /health answered; log tail:\n"
                f"{_log_tail(log_path)}"
            )
        try:
            if client.get("/health", timeout=5.0).status_code == 200:
                return time.monotonic() - started
        except httpx.TransportError:
            pass  # not listening yet
        if time.monotonic() - started > timeout_s:
            raise EngineBootError(f"vLLM not healthy after {timeout_s:.0f} s; log tail:\n{_log_tail(log_path)}")
        time.sleep(0.5)


def _stop(process: subprocess.Popen) -> None:
    """SIGTERM the server, then SIGKILL its process group (the engine-core child) if it lingers."""
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=STOP_GRACE_S)
        except subprocess.TimeoutExpired:
            pass
    # start_new_session made the server the leader of its own group: pgid == its pid.
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    process.wait(timeout=STOP_GRACE_S)
    # SIGKILL is delivered asynchronously: wait until no member of the group still runs (a killed child stays a
    # zombie until whoever adopted it reaps it, which may be never in a container, so a zombie counts as gone).
    deadline = time.monotonic() + STOP_GRACE_S
    while live_group_members(process.pid) and time.monotonic() < deadline:
        time.sleep(0.05)



def _probe_completion_tokens(client: httpx.Client, served_model_name: str, probe: str) -> int | None:
    """Generate a few tokens the way ``probe`` says; the count of tokens generated."""
    if probe == "none":
        return None
    common = {"model": served_model_name, "max_tokens": PROBE_MAX_TOKENS, "temperature": 0}
    if probe == "chat":
        path, body = "/v1/chat/completions", {"messages": [{"role": "user", "content": PROBE_PROMPT}]}
    else:
        path, body = "/v1/completions", {"prompt": PROBE_PROMPT}
    reply = client.post(path, json={**common, **body}).raise_for_status()
    return int(reply.json()["usage"]["completion_tokens"])


def _served_max_model_len(models_document: dict, served_model_name: str) -> int:
    for card in models_document["data"]:
        if card["id"] == served_model_name:
            return int(card["max_model_len"])
    raise EngineBootError(f"/v1/models does not list {served_model_name}: {models_document}")


@dataclass(frozen=True)
class Served:
    """What a started server reported before it was stopped."""

    cache_config_labels: dict[str, str]
    served_max_model_len: int
    version: str
    probe_completion_tokens: int | None
    boot_seconds: float
    log_path: Path
    log_text: str = field(repr=False)
    metrics_text: str = field(repr=False)


def serve_once(command: list[str], port: int, served_model_name: str, name: str, log_dir: Path, *,
               probe: str = "chat", env: dict[str, str] | None = None, health_timeout_s: float = HEALTH_TIMEOUT_S) -> Served:
    """Run ``command`` (a vLLM server listening on 127.0.0.1:``port``), read what it reports, stop it (always).
    ``env``: the environment it runs in (default: this process's, offline and without usage stats)."""
    log_dir.mkdir(parents=True, exist_ok=True)
    # The engine logs into a file of this call's own; it replaces <name>.log only once the boot is
    # over, so two sessions booting the same plan into the shared cache never mix their logs.
    live_log_path = log_dir / f".{name}.{os.getpid()}.log"
    log_path = log_dir / f"{name}.log"
    base_url = f"http://127.0.0.1:{port}"
    env = {**(os.environ if env is None else env), "HF_HUB_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1"}
    with live_log_path.open("w") as log_file:
        process = subprocess.Popen(
            command, stdout=log_file, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            env=env, start_new_session=True, preexec_fn=_die_with_parent,
        )
    client = httpx.Client(base_url=base_url, timeout=REQUEST_TIMEOUT_S, trust_env=False)
    try:
        boot_seconds = _wait_for_health(process, client, live_log_path, health_timeout_s)
        metrics_text = client.get("/metrics").raise_for_status().text
        labels = parse_cache_config_info(metrics_text)
        served_max_model_len = _served_max_model_len(client.get("/v1/models").raise_for_status().json(), served_model_name)
        version = client.get("/version").raise_for_status().json()["version"]
        probe_tokens = _probe_completion_tokens(client, served_model_name, probe)
    except httpx.HTTPStatusError as problem:
        raise EngineBootError(
            f"vLLM answered {problem.request.url.path} with {problem.response.status_code}: "
            f"{problem.response.text[:2000]}; log tail:\n{_log_tail(live_log_path)}"
        ) from problem
    except (httpx.HTTPError, ValueError, KeyError) as problem:
        raise EngineBootError(f"vLLM answered badly: {problem!r}; log tail:\n{_log_tail(live_log_path)}") from problem
    finally:
        client.close()
        _stop(process)
        log_text = live_log_path.read_text(errors="replace")
        live_log_path.replace(log_path)
    return Served(labels, served_max_model_len, version, probe_tokens, round(boot_seconds, 1), log_path, log_text, metrics_text)


def boot_engine(
    vllm_python_path: Path,
    config: EngineConfig,
    log_dir: Path,
    health_timeout_s: float = HEALTH_TIMEOUT_S,
) -> BootResult:
    """Start the engine for ``config``, collect what it reports, stop it (always)."""
    port = _free_loopback_port()
    served = serve_once([str(vllm_python_path), *config.server_args(port)], port, config.served_model_name, config.name, log_dir,
                        probe=config.probe, health_timeout_s=health_timeout_s)
    result = BootResult(
        config=config,
        cache_config_labels=served.cache_config_labels,
        served_max_model_len=served.served_max_model_len,
        version=served.version,
        probe_completion_tokens=served.probe_completion_tokens,
        boot_seconds=served.boot_seconds,
        log_path=served.log_path,
        log_text=served.log_text,
        metrics_text=served.metrics_text,
    )
    # Several test sessions may boot the same plan into the shared cache: never a half-written file.
    atomic_write_text(log_dir / f"{config.name}.metrics.prom", served.metrics_text, backup=False)
    atomic_write_text(log_dir / f"{config.name}.json", json.dumps(result.to_json(), indent=2) + "\n", backup=False)
    return result
