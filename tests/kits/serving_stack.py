"""Long-running real servers for end-to-end tests: vLLM CPU engines started from a plan's command lines,
and a LiteLLM proxy in front of them (its own virtualenv, no database).

Unlike :func:`kits.vllm_engine.boot_engine`, which boots, reads and stops, these keep running
until the context manager exits, so a test can run ``seatplan verify`` against them, restart one,
and verify again. Every server binds 127.0.0.1 and dies with the test process.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import yaml

from kits.parts import refuse_while_installing
from kits.vllm_engine import EngineBootError, _die_with_parent, _log_tail, _stop, _wait_for_health, seatplan_cache_root

LITELLM_VERSION = "1.108.7"
LITELLM_START_TIMEOUT_S = 300.0
ENGINE_MODULE = ["-m", "vllm.entrypoints.openai.api_server"]


def litellm_venv() -> Path:
    refuse_while_installing("the LiteLLM virtualenv (SEATPLAN_LITELLM_VENV)")
    return Path(os.environ.get("SEATPLAN_LITELLM_VENV", seatplan_cache_root() / f"litellm-{LITELLM_VERSION}"))


def litellm_installed() -> bool:
    return (litellm_venv() / "bin" / "litellm").is_file()


def engine_arguments(plan_args: list[str]) -> list[str]:
    """The plan's vLLM command line without its launcher (``python3 -m ...`` or ``vllm serve MODEL``),
    so the test's own vLLM interpreter can start the same engine."""
    first_flag = next(position for position, arg in enumerate(plan_args) if arg.startswith("--"))
    launcher, flags = plan_args[:first_flag], plan_args[first_flag:]
    if launcher[-2:-1] == ["serve"]:
        return ["--model", launcher[-1], *flags]
    return flags


# What every engine a test starts runs with: no Hub, no usage reports.
ENGINE_PROCESS_ENV = {"HF_HUB_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1"}


@dataclass
class Server:
    name: str
    process: subprocess.Popen
    base_url: str
    log_path: Path

    def stop(self) -> None:
        _stop(self.process)


def _start(command: list[str], env: dict[str, str], log_path: Path) -> subprocess.Popen:
    with log_path.open("w") as log_file:
        return subprocess.Popen(command, stdout=log_file, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                env={**os.environ, **env}, start_new_session=True, preexec_fn=_die_with_parent)


def start_engine(vllm_python: Path, name: str, plan_args: list[str], plan_env: dict[str, str], port: int,
                 log_dir: Path, health_timeout_s: float = 600.0) -> Server:
    """Start one engine exactly as the plan says (with its environment) and wait for ``/health``."""
    log_path = log_dir / f"{name}.log"
    env = {**plan_env, **ENGINE_PROCESS_ENV}
    process = _start([str(vllm_python), *ENGINE_MODULE, *engine_arguments(plan_args)], env, log_path)
    server = Server(name, process, f"http://127.0.0.1:{port}", log_path)
    with httpx.Client(base_url=server.base_url, timeout=10.0, trust_env=False) as client:
        try:
            _wait_for_health(process, client, log_path, health_timeout_s)
        except EngineBootError:
            server.stop()
            raise
    return server


def start_from_env_file(env_file: Path, variable: str, port: int, log_dir: Path, health_timeout_s: float = 900.0) -> Server:
    """Source the env file and exec the command its ``variable`` holds, as systemd or a restart script would."""
    script = f'set -a; . "$0"; set +a; eval "exec ${variable}"'
    log_path = log_dir / f"{env_file.stem}.log"
    process = _start(["bash", "-c", script, str(env_file)], ENGINE_PROCESS_ENV, log_path)
    server = Server(env_file.stem, process, f"http://127.0.0.1:{port}", log_path)
    with httpx.Client(base_url=server.base_url, timeout=10.0, trust_env=False) as client:
        try:
            _wait_for_health(process, client, log_path, health_timeout_s)
        except Exception:
            server.stop()
            raise
    return server


def litellm_config(seats: list[dict], key_variable: str) -> dict:
    """A LiteLLM proxy config routing each served name to its engine, the key read from the environment."""
    return {
        "model_list": [
            {
                "model_name": seat["served_model_name"],
                "litellm_params": {"model": f"hosted_vllm/{seat['served_model_name']}", "api_base": f"{seat['base_url']}/v1",
                                   "max_tokens": seat["max_new_tokens"]},
            }
            for seat in seats
        ],
        "general_settings": {"master_key": f"os.environ/{key_variable}"},
    }


def start_litellm(config: dict | str, port: int, env: dict[str, str], work_dir: Path) -> Server:
    """The proxy on ``config``: a document, or a config file's text as it is (comments and all)."""
    config_path = work_dir / "litellm.yaml"
    config_path.write_text(config if isinstance(config, str) else yaml.safe_dump(config, sort_keys=False))
    log_path = work_dir / "litellm.log"
    command = [str(litellm_venv() / "bin" / "litellm"), "--config", str(config_path), "--host", "127.0.0.1", "--port", str(port)]
    process = _start(command, {**env, "LITELLM_LOCAL_MODEL_COST_MAP": "True"}, log_path)
    server = Server("litellm", process, f"http://127.0.0.1:{port}", log_path)
    started = time.monotonic()
    with httpx.Client(base_url=server.base_url, timeout=10.0, trust_env=False) as client:
        while True:
            if process.poll() is not None:
                raise RuntimeError(f"LiteLLM exited with {process.returncode}; log tail:\n{_log_tail(log_path)}")
            with contextlib.suppress(httpx.TransportError):
                if client.get("/health/liveliness").status_code == 200:
                    return server
            if time.monotonic() - started > LITELLM_START_TIMEOUT_S:
                server.stop()
                raise RuntimeError(f"LiteLLM not up after {LITELLM_START_TIMEOUT_S:.0f} s; log tail:\n{_log_tail(log_path)}")
            time.sleep(0.5)


@contextlib.contextmanager
def running(servers: dict[str, Server]) -> Iterator[dict[str, Server]]:
    """Stops every server still in ``servers`` on exit (the dict may change while the block runs)."""
    try:
        yield servers
    finally:
        for server in list(servers.values()):
            server.stop()
