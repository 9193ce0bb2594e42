#!/usr/bin/env python3
"""Write the sample inputs of the README walkthrough (docs/walkthrough.md) under examples/night/: one week on
the demo fleet's box (examples/demo/fleet.yaml), 2026-11-23 to 2026-11-30 UTC, with the operator's story in it.

  spend-logs.csv      LiteLLM_SpendLogs as `COPY ... TO STDOUT WITH CSV HEADER` writes it (store_prompts off)
  beszel_data.db      a Beszel hub database (PocketBase SQLite) holding the week as the hub keeps it
  nvidia-smi.csv      `nvidia-smi --query-gpu=timestamp,index,memory.used,memory.total --format=csv -l 120`
  vllm/<seat>.log     `docker logs -t` of each engine: every boot of the week

The story (what diagnose and usage must find):
  * GPU 0: qwen3-32b sized with --gpu-memory-utilization booted three times; its profiler counted the
    neighbours booting beside it, so the KV cache came out 20.4, 26.7 and 29.0 GiB (a co-boot race), and
    the third boot took 2.3 GiB (2.5 GB) more of the GPU in one step.
  * GPU 2: llama-3.2-3b creeps after each boot until 60 MiB are free, about two days later.
  * Contexts below what the models publish: qwen3-32b 16,384 (40,960), qwen3-4b 32,768 (262,144),
    llama-3.2-3b 8,192 (131,072).
  * The key `ci-evals` never sends max_tokens: nine replies of ~261k tokens from qwen3-30b-a3b.

Deterministic (fixed seeds): run it again and the files are the same (`make_examples.py DIR` writes them to DIR
instead; tests/docs/test_examples.py checks the shipped files are what it writes). The Beszel rules (roll-ups, retention,
JSON shapes) and LiteLLM's row conventions come from the format generators in tests/fixtures/formats/.
"""

from __future__ import annotations

import csv
import importlib.util
import io
import json
import math
import random
import sqlite3
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
OUT = Path(sys.argv[1]).resolve() if len(sys.argv) > 1 else REPO / "examples" / "night"
FORMATS = REPO / "tests" / "fixtures" / "formats"
MODELS = REPO / "examples" / "demo" / "models"
UTC = UTC
START = datetime(2026, 11, 23, tzinfo=UTC)
END = datetime(2026, 11, 30, tzinfo=UTC)
TOTAL_MIB = 97_887  # what nvidia-smi shows for a 96 GB RTX PRO 6000 Blackwell (95.59 GiB)
GiB_MIB = 1024
SMI_STEP_S = 120


def load_generator(name: str):
    spec = importlib.util.spec_from_file_location(name, FORMATS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


beszel = load_generator("make_beszel_db")
litellm = load_generator("make_litellm_samples")

# ----------------------------------------------------------------------------- the engines' boots


class EngineBoot:
    """One engine start: when, and what its log says (KV bytes from its profile, in GiB as vLLM prints)."""

    def __init__(self, seat, gpu, at, kv_gib, other_gib, util, max_model_len, model, served, port, model_dir):
        self.seat, self.gpu, self.at, self.kv_gib, self.other_gib = seat, gpu, at, kv_gib, other_gib
        self.util, self.max_model_len, self.model, self.served, self.port = util, max_model_len, model, served, port
        self.model_dir = model_dir

    @property
    def used_mib(self) -> float:
        return (self.kv_gib + self.other_gib) * GiB_MIB


def _at(day: int, hour: int, minute: int = 0) -> datetime:
    return datetime(2026, 11, day, hour, minute, tzinfo=UTC)


SEATS = {  # seat: (model path on host, served name, port, model dir under examples/demo/models, weights GiB, other non-KV GiB)
    "qwen3-32b": ("Qwen/Qwen3-32B-FP8", "qwen3-32b", 8002, "Qwen--Qwen3-32B-FP8", 31.97, 4.61),
    "qwen3-4b": ("Qwen/Qwen3-4B-Instruct-2507", "qwen3-4b", 8004, "Qwen--Qwen3-4B-Instruct-2507", 7.49, 4.05),
    "qwen3-30b-a3b": ("Qwen/Qwen3-30B-A3B-Instruct-2507", "Qwen/Qwen3-30B-A3B-Instruct-2507", 8000,
                      "Qwen--Qwen3-30B-A3B-Instruct-2507", 56.87, 4.47),
    "llama-3.2-3b": ("meta-llama/Llama-3.2-3B-Instruct", "llama-3.2-3b", 8007, "meta-llama--Llama-3.2-3B-Instruct", 5.98, 3.52),
}


def boots() -> list[EngineBoot]:
    def boot(seat, gpu, at, kv_gib, util, max_model_len):
        model, served, port, model_dir, weights, other = SEATS[seat]
        return EngineBoot(seat, gpu, at, kv_gib, weights + other, util, max_model_len, model, served, port, model_dir)

    return [
        # GPU 1: the busiest seat, at its published context, booted once before the week's traffic.
        boot("qwen3-30b-a3b", 1, _at(23, 0, 20), 26.1, 0.94, 262_144),
        # GPU 0: qwen3-4b and qwen3-32b boot together; qwen3-32b's profile counts qwen3-4b's loading as its own.
        boot("qwen3-4b", 0, _at(23, 1, 2), 6.02, 0.19, 32_768),
        boot("qwen3-32b", 0, _at(23, 1, 3), 20.4, 0.62, 16_384),
        boot("llama-3.2-3b", 2, _at(23, 2, 30), 78.5, 0.92, 8_192),
        boot("qwen3-4b", 0, _at(25, 13, 58), 6.02, 0.19, 32_768),
        boot("qwen3-32b", 0, _at(25, 14, 0), 26.7, 0.62, 16_384),
        boot("llama-3.2-3b", 2, _at(26, 9, 15), 78.5, 0.92, 8_192),
        # GPU 0 again, neighbours quiet: the full 29.0 GiB, and the GPU loses 2.3 GiB in one step.
        boot("qwen3-32b", 0, _at(28, 3, 30), 29.0, 0.62, 16_384),
    ]


SPEECH_MIB = 6 * GiB_MIB
DOWN_S = 150  # an engine frees its memory this long before the new one has loaded
CREEP_MIB = 7_700  # llama-3.2-3b's allocator grows to 60 MiB free
CREEP_HOURS = 44.0


def gpu_used_mib(index: int, moment: datetime, engine_boots: list[EngineBoot]) -> float:
    """The truth: MiB nvidia-smi would show on GPU ``index`` at ``moment``."""
    used = SPEECH_MIB + 420.0 if index == 0 else 0.0  # the speech model and its CUDA context
    for seat in {item.seat for item in engine_boots if item.gpu == index}:
        started = [item for item in engine_boots if item.seat == seat and item.at <= moment]
        later = [item for item in engine_boots if item.seat == seat and item.at > moment]
        if not started:
            continue
        current = started[-1]
        following = later[0] if later else None
        if following is not None and (following.at - moment).total_seconds() < DOWN_S:
            continue  # stopped for the restart
        if (moment - current.at).total_seconds() < 60:
            used += current.other_gib * GiB_MIB * (moment - current.at).total_seconds() / 60  # loading
            continue
        used += current.used_mib
        if seat == "llama-3.2-3b":
            hours = (moment - current.at).total_seconds() / 3600
            used += CREEP_MIB * min(1.0, hours / CREEP_HOURS) ** 0.7
    return min(used, TOTAL_MIB - 60)


def jitter(rng: random.Random, used: float) -> float:
    return max(0.0, used + rng.gauss(0, 6)) if used else 0.0


# ----------------------------------------------------------------------------- vLLM logs


def kv_lines(item: EngineBoot) -> tuple[str, str]:
    """vLLM's own capacity lines for the boot's KV bytes (seatplan's facts stage does vLLM's arithmetic)."""
    sys.path.insert(0, str(REPO / "src"))
    from seatplan.facts.api import load_model_facts
    from seatplan.facts.models import EngineSettings

    facts = load_model_facts(str(MODELS / item.model_dir), EngineSettings(vllm_version="0.32"))
    kv_bytes = int(item.kv_gib * 2**30)
    capacity = facts.capacity(kv_bytes, item.max_model_len)
    return (f"Available KV cache memory: {round(item.kv_gib, 2)} GiB",
            f"GPU KV cache size: {capacity.kv_cache_tokens:,} tokens, Maximum concurrency for {item.max_model_len:,} "
            f"tokens per request: {capacity.max_concurrency:.2f}x")


def boot_log(item: EngineBoot, pid: int) -> list[str]:
    def line(offset_s: float, process: str, proc_pid: int, where: str, message: str, level: str = "INFO") -> str:
        moment = item.at + timedelta(seconds=offset_s)
        docker = moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond:06d}000Z"
        return f"{docker} ({process} pid={proc_pid}) {level} {moment:%m-%d %H:%M:%S} [{where}] {message}"

    args = {"model": item.model, "served_model_name": [item.served], "port": item.port, "max_model_len": item.max_model_len,
            "gpu_memory_utilization": item.util}
    available, capacity = kv_lines(item)
    engine = pid + 117
    return [
        line(0, "APIServer", pid, "api_utils.py:347", "version 0.32.0"),
        line(0.4, "APIServer", pid, "api_utils.py:286", f"non-default args: {args}"),
        line(9.8, "APIServer", pid, "model.py:2152", f"Using max model len {item.max_model_len}"),
        line(14.1, "EngineCore", engine, "core.py:133",
             f"Initializing a V1 LLM engine (v0.32.0) with config: model='{item.model}', tokenizer='{item.model}', "
             f"dtype=torch.bfloat16, max_seq_len={item.max_model_len}, tensor_parallel_size=1, "
             f"served_model_name={item.served}, enable_prefix_caching=True"),
        line(52.6, "EngineCore", engine, "gpu_model_runner.py:4312",
             f"Model loading took {SEATS[item.seat][4]:.2f} GiB memory and 36.418230 seconds"),
        line(71.9, "EngineCore", engine, "gpu_worker.py:391", available),
        line(72.3, "EngineCore", engine, "kv_cache_utils.py:1350", capacity),
        line(96.0, "EngineCore", engine, "core.py:270", "init engine (profile, create kv cache, warmup model) took 43.51 s"),
        line(97.2, "APIServer", pid, "api_server.py:1841", f"Starting vLLM API server 0 on http://0.0.0.0:{item.port}"),
        line(97.3, "APIServer", pid, "launcher.py:46", "Application startup complete."),
    ]


def write_logs(engine_boots: list[EngineBoot]) -> None:
    folder = OUT / "vllm"
    folder.mkdir(parents=True, exist_ok=True)
    for seat in SEATS:
        lines: list[str] = []
        for number, item in enumerate(item for item in engine_boots if item.seat == seat):
            lines += boot_log(item, 1000 + 211 * number + 17 * len(seat))
        (folder / f"{seat}.log").write_text("\n".join(lines) + "\n")


# ----------------------------------------------------------------------------- GPU memory: nvidia-smi and Beszel


def write_nvidia_smi(engine_boots: list[EngineBoot]) -> None:
    rng = random.Random(7)
    lines = ["timestamp, index, memory.used [MiB], memory.total [MiB]"]
    moment = START
    while moment < END:
        stamp = moment.strftime("%Y/%m/%d %H:%M:%S.") + f"{moment.microsecond // 1000:03d}"
        for index in range(4):
            lines.append(f"{stamp}, {index}, {int(round(jitter(rng, gpu_used_mib(index, moment, engine_boots))))} MiB, {TOTAL_MIB} MiB")
        moment += timedelta(seconds=SMI_STEP_S, milliseconds=rng.randint(0, 4))
    (OUT / "nvidia-smi.csv").write_text("\n".join(lines) + "\n")


GPU_NAME = "RTX PRO 6000 Blackwell"


def beszel_poll(engine_boots: list[EngineBoot]):
    def poll(_previous: datetime, moment: datetime, rng: random.Random) -> dict:
        gpus = {}
        for index in range(4):
            used = jitter(rng, gpu_used_mib(index, moment, engine_boots))
            gpus[str(index)] = beszel.gpu_obj(f"{GPU_NAME} {index}", beszel.two(used / beszel.MIB_PER_STORED_UNIT),
                                              beszel.two(TOTAL_MIB / beszel.MIB_PER_STORED_UNIT),
                                              beszel.two(rng.uniform(5, 60) if used else 0.0), beszel.two(rng.uniform(80, 300)))
        cpu = beszel.two(rng.uniform(2, 9))
        load = beszel.two(rng.uniform(0.5, 2.5))
        return beszel.finalize({"cpu": cpu, "m": 503.72, "mu": beszel.two(rng.uniform(120, 140)), "mp": 25.8, "g": gpus,
                                "la": [load, beszel.two(load * 0.9), beszel.two(load * 0.8)]})

    return poll


def write_beszel(engine_boots: list[EngineBoot]) -> None:
    records = beszel.hub_records(START, END, beszel_poll(engine_boots), random.Random(99))
    path = OUT / "beszel_data.db"
    path.unlink(missing_ok=True)
    connection = sqlite3.connect(path)
    connection.executescript(beszel.HUB_SCHEMA_SQL)
    system_id = "b7x2k9q4m1n8p3z"
    connection.execute("INSERT INTO systems (created, host, id, info, name, port, status, updated, users) VALUES (?,?,?,?,?,?,?,?,?)",
                       (beszel.pb_time(START - timedelta(days=30)), "gpu-box", system_id, "{}", "gpu-box", "45876", "up",
                        beszel.pb_time(END), "[]"))
    for record in sorted(records, key=lambda item: item["created"]):
        stamp = beszel.pb_time(record["created"])
        connection.execute("INSERT INTO system_stats (created, id, stats, system, type, updated) VALUES (?,?,?,?,?,?)",
                           (stamp, record["id"], beszel.go_json(record["stats"]), system_id, record["type"], stamp))
    connection.commit()
    connection.execute("VACUUM")
    connection.close()


# ----------------------------------------------------------------------------- LiteLLM spend logs

CLIENTS = {  # key alias: (team id, user, client address, user agent, sends max_tokens, share of calls)
    "openwebui": ("0d9b7c6a-5e4f-4a3b-9c2d-1e0f9a8b7c6d", "openwebui", "10.20.0.12", "OpenAI/JS 5.23.2", True, 0.40),
    "svc-rag-backend": ("5f0c8e1e-6a0b-4e55-9b1e-1d2f3a4b5c6d", "svc-rag", "10.20.0.31", "OpenAI/Python 1.109.1", True, 0.33),
    "alice-laptop": ("a3e4b2c1-7d8e-4f90-8a1b-2c3d4e5f6a7b", "alice@corp.example", "10.20.3.57", "OpenAI/Python 1.109.1", True, 0.12),
    "ci-evals": ("a3e4b2c1-7d8e-4f90-8a1b-2c3d4e5f6a7b", "ci-bot", "10.20.0.44", "python-httpx/0.28.1", False, 0.15),
}
TRAFFIC = {  # LiteLLM model group: (backend model name, share of calls, median prompt, median completion, tokens/s)
    "qwen3-30b-a3b": ("Qwen/Qwen3-30B-A3B-Instruct-2507", 0.42, 1800, 420, 95.0),
    "qwen3-32b": ("qwen3-32b", 0.18, 2400, 650, 38.0),
    "qwen3-4b": ("qwen3-4b", 0.25, 700, 160, 160.0),
    "llama-3.2-3b": ("llama-3.2-3b", 0.15, 500, 120, 190.0),
}
CALLS = 1500
RUNAWAYS = 9
COLUMNS = ["request_id", "call_type", "api_key", "spend", "total_tokens", "prompt_tokens", "completion_tokens", "startTime",
           "endTime", "completionStartTime", "model", "model_id", "model_group", "custom_llm_provider", "api_base", "user",
           "metadata", "cache_hit", "cache_key", "request_tags", "team_id", "end_user", "requester_ip_address", "messages",
           "response", "proxy_server_request", "session_id", "status", "mcp_namespaced_tool_name", "organization_id",
           "agent_id", "request_duration_ms", "created_at", "updated_at", "litellm_call_id", "billing_agent_id"]


def pg_timestamp(moment: datetime) -> str:
    """timestamp(3) as PostgreSQL's CSV output writes it: trailing zeros of the fraction dropped."""
    text = litellm.fmt_ts(moment).rstrip("0")
    return text.rstrip(".")


def pick(rng: random.Random, shares: dict) -> str:
    roll = rng.random()
    for name, share in shares.items():
        roll -= share
        if roll <= 0:
            return name
    return name


def spend_rows() -> list[dict]:
    rng = random.Random(20261130)
    key_shares = {alias: client[5] for alias, client in CLIENTS.items()}
    group_shares = {group: traffic[1] for group, traffic in TRAFFIC.items()}
    span_s = (END - START).total_seconds()
    calls = []
    for _ in range(CALLS):
        # Office hours are busier: accept a uniform draw with a weight that peaks mid-day.
        while True:
            offset = rng.uniform(60, span_s - 7200)
            hour = (offset / 3600) % 24
            if rng.random() < 0.25 + 0.75 * math.exp(-((hour - 14) / 4) ** 2):
                break
        calls.append((offset, pick(rng, key_shares), pick(rng, group_shares), False))
    runaway_days = rng.sample(range(7), 7) + rng.sample(range(7), 2)
    for day in runaway_days[:RUNAWAYS]:
        calls.append((day * 86400 + rng.uniform(1, 20) * 3600, "ci-evals", "qwen3-30b-a3b", True))
    rows = []
    for offset, alias, group, runaway in sorted(calls):
        team_id, user, address, agent, sends_max_tokens, _ = CLIENTS[alias]
        backend, _, prompt_median, completion_median, speed = TRAFFIC[group]
        prompt = max(12, int(rng.lognormvariate(math.log(prompt_median), 0.9)))
        completion = 262_144 - prompt - rng.randint(0, 40) if runaway else max(1, int(rng.lognormvariate(math.log(completion_median), 0.8)))
        if sends_max_tokens:
            completion = min(completion, 4096)
        start = START + timedelta(seconds=offset, milliseconds=rng.randint(0, 999))
        first_token = start + timedelta(seconds=0.05 + prompt / 9000)
        end = first_token + timedelta(seconds=completion / speed)
        start, first_token, end = (moment.replace(microsecond=moment.microsecond // 1000 * 1000) for moment in (start, first_token, end))
        rows.append(spend_row(rng, alias, team_id, user, address, agent, group, backend, prompt, completion, start, first_token, end))
    return rows


def spend_row(rng, alias, team_id, user, address, agent, group, backend, prompt, completion, start, first_token, end) -> dict:
    call_id = litellm.u4(rng)
    key_hash = litellm.sha256(f"sk-{alias}-demo")
    spend = float(f"{prompt * litellm.CHAT_IN + completion * litellm.CHAT_OUT:.10g}")
    agent_family = agent.split("/")[0]
    tags = [f"User-Agent: {agent_family}", f"User-Agent: {agent}"] + (["eval:nightly"] if alias == "ci-evals" else [])
    metadata = litellm.jsonb_order({
        "status": "success", "user_agent": agent, "user_api_key": key_hash, "user_api_key_alias": alias,
        "user_api_key_team_id": team_id, "user_api_key_user_id": user, "requester_ip_address": address,
        "usage_object": {"total_tokens": prompt + completion, "prompt_tokens": prompt, "completion_tokens": completion},
        "litellm_call_id": call_id, "original_model_group": group, "attempted_retries": 0,
    })
    written = end + timedelta(milliseconds=rng.randint(40, 900))
    return {
        "request_id": "chatcmpl-" + litellm.hex32(rng), "call_type": "acompletion", "api_key": key_hash, "spend": repr(spend),
        "total_tokens": prompt + completion, "prompt_tokens": prompt, "completion_tokens": completion,
        "startTime": pg_timestamp(start), "endTime": pg_timestamp(end), "completionStartTime": pg_timestamp(first_token),
        "model": backend, "model_id": f"{group}-gpu-box", "model_group": group, "custom_llm_provider": "hosted_vllm",
        "api_base": f"http://gpu-box:{8000 + list(TRAFFIC).index(group)}/v1", "user": user,
        "metadata": json.dumps(metadata), "cache_hit": "False", "cache_key": "Cache OFF", "request_tags": json.dumps(tags),
        "team_id": team_id, "end_user": "", "requester_ip_address": address, "messages": "{}", "response": "{}",
        "proxy_server_request": "{}", "session_id": litellm.u4(rng), "status": "success", "mcp_namespaced_tool_name": None,
        "organization_id": None, "agent_id": None, "request_duration_ms": int((end - start).total_seconds() * 1000),
        "created_at": pg_timestamp(written), "updated_at": pg_timestamp(written), "litellm_call_id": call_id,
        "billing_agent_id": None,
    }


def write_spend_logs() -> None:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(COLUMNS)
    for row in spend_rows():
        writer.writerow(["" if row[column] is None else row[column] for column in COLUMNS])
    (OUT / "spend-logs.csv").write_text(buffer.getvalue())


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    engine_boots = boots()
    write_logs(engine_boots)
    write_nvidia_smi(engine_boots)
    write_beszel(engine_boots)
    write_spend_logs()
    for path in sorted(OUT.rglob("*")):
        if path.is_file():
            print(f"{path}: {path.stat().st_size:,} bytes")


if __name__ == "__main__":
    main()
