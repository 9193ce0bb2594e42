"""Models from a real Hub-compatible server on localhost: ``olah`` serving tiny git repositories the tests build.

Three repositories, drawn at random per run: one single-file checkpoint, one sharded (an index and 2-5 shards,
one with a header longer than the 100,000-byte first read), one gated. ``seatplan model ORG/NAME`` must give the
same facts as the same files in a local directory, to the byte, with and without the Hub in reach.

What olah cannot do, and what stands in for it:

* **Gated repositories**: olah has no gating (its local mirrors answer every request). A thin proxy in this test
  (``GatingProxy``) sits in front of olah and answers the gated repository's requests without the right token
  with the Hub's own answer to them (403, ``X-Error-Code: GatedRepo``, which huggingface_hub turns into
  ``GatedRepoError``); every other request, and the gated one with the token, goes to olah unchanged.
* **Range requests**: olah's local-mirror file route ignores ``Range`` and streams the whole file (200, chunked,
  no Content-Length); seatplan cuts the stream after the header and takes the size from HEAD.
* **LFS**: not tried: there is no git-lfs here, so the tiny safetensors files are plain git blobs.
* **Unknown revisions**: olah answers them as an unknown repository (401 RepoNotFound, where the Hub says 404
  RevisionNotFound); seatplan tells the two apart by listing the refs, which olah serves.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import socket
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from functools import cache
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest

from kits.facts import fixture_dir
from kits.hostile_http import (
    HostileServer,
    Measured,
    drip_body,
    drip_headers,
    endless_body,
    header_value,
    huge_body,
    processing_forever,
    redirect_to,
    respond,
    run_measured,
)
from kits.parts import free_port, require, stop_process
from kits.rollout import cpu_fleet
from seatplan.documents.plan import PlannedVllmSeat
from seatplan.engine.command import engine_command

pytestmark = pytest.mark.hub

GATE_TOKEN = "hf_seatplan_gate_4c1e"
Write = Callable[[socket.socket, threading.Event], None]
DTYPES = {"BF16": 2, "F16": 2, "F32": 4, "F8_E4M3": 1}


def tiny_tensors(rng: random.Random, layers: int, hidden: int, vocab: int) -> dict[str, tuple[str, tuple[int, ...]]]:
    """Names as a Llama-style checkpoint has them (so the TP split rules apply), shapes and dtypes drawn."""
    dtype = rng.choice(list(DTYPES))
    tensors = {"model.embed_tokens.weight": (dtype, (vocab, hidden)), "model.norm.weight": (dtype, (hidden,))}
    for index in range(layers):
        inner = rng.randrange(8, 129, 8)
        prefix = f"model.layers.{index}."
        for name, shape in (("self_attn.q_proj.weight", (hidden, hidden)), ("self_attn.k_proj.weight", (hidden // 2, hidden)),
                            ("self_attn.v_proj.weight", (hidden // 2, hidden)), ("self_attn.o_proj.weight", (hidden, hidden)),
                            ("mlp.gate_proj.weight", (inner, hidden)), ("mlp.up_proj.weight", (inner, hidden)),
                            ("mlp.down_proj.weight", (hidden, inner)), ("input_layernorm.weight", (hidden,))):
            tensors[prefix + name] = (dtype, shape)
    if rng.random() < 0.5:
        tensors["lm_head.weight"] = (dtype, (vocab, hidden))
    return tensors


def write_safetensors(path: Path, tensors: dict[str, tuple[str, tuple[int, ...]]], padding_bytes: int = 0) -> int:
    """A real safetensors file (zero data bytes); ``padding_bytes`` of trailing spaces lengthen the header, as the format allows."""
    header: dict[str, Any] = {"__metadata__": {"format": "pt"}}
    offset = 0
    for name, (dtype, shape) in tensors.items():
        size = DTYPES[dtype]
        for dim in shape:
            size *= dim
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [offset, offset + size]}
        offset += size
    raw = json.dumps(header).encode() + b" " * padding_bytes
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + bytes(offset))
    return offset


def build_repo(directory: Path, rng: random.Random, shards: int) -> None:
    """A tiny model: a real config (Qwen3-0.6B's geometry, shrunk), a generation config, and its safetensors."""
    config = json.loads((fixture_dir("Qwen--Qwen3-0.6B") / "config.json").read_text())
    heads = rng.choice([2, 4, 8])
    hidden = heads * 16
    layers = rng.randint(1, 4)
    vocab = rng.randrange(64, 513, 8)
    config.update(hidden_size=hidden, num_attention_heads=heads, num_key_value_heads=heads // 2, head_dim=16,
                  num_hidden_layers=layers, vocab_size=vocab, intermediate_size=64,
                  max_position_embeddings=rng.choice([2048, 8192, 40960]))
    directory.mkdir(parents=True)
    (directory / "config.json").write_text(json.dumps(config, indent=2))
    (directory / "generation_config.json").write_text(json.dumps({"temperature": round(rng.uniform(0.1, 1.0), 2),
                                                                 "top_p": 0.95, "bos_token_id": 1}))
    tensors = list(tiny_tensors(rng, layers, hidden, vocab).items())
    if shards == 1:
        write_safetensors(directory / "model.safetensors", dict(tensors))
        return
    rng.shuffle(tensors)
    cuts = sorted(rng.sample(range(1, len(tensors)), shards - 1))
    weight_map, total_bytes = {}, 0
    long_header = rng.randrange(shards)
    for number, (start, end) in enumerate(zip([0, *cuts], [*cuts, len(tensors)], strict=True)):
        name = f"model-{number + 1:05d}-of-{shards:05d}.safetensors"
        # One shard's header outgrows the first 100,000-byte read, so the second read is exercised.
        padding = rng.randint(100_000, 150_000) if number == long_header else 0
        total_bytes += write_safetensors(directory / name, dict(tensors[start:end]), padding)
        weight_map.update({tensor: name for tensor, _ in tensors[start:end]})
    (directory / "model.safetensors.index.json").write_text(json.dumps({"metadata": {"total_size": total_bytes},
                                                                        "weight_map": weight_map}, indent=1))


def git_commit(repo: Path, message: str) -> str:
    identity = ["-c", "user.name=seatplan-test", "-c", "user.email=test@seatplan.invalid"]
    subprocess.run(["git", "add", "-A"], cwd=repo, check=True)
    subprocess.run(["git", *identity, "commit", "-q", "-m", message], cwd=repo, check=True)
    return subprocess.run(["git", "rev-parse", "HEAD"], cwd=repo, check=True, capture_output=True, text=True).stdout.strip()


@cache
def passing_on() -> httpx.Client:
    """The one client of the test servers that pass requests on: one per request loaded the CA bundle each time (35 ms
    of CPU, a tenth of this module's)."""
    return httpx.Client(timeout=30, trust_env=False)


class GatingProxy(ThreadingHTTPServer):
    """Stand-in for the Hub's gating, which olah lacks: the gated repository's requests need the token."""

    daemon_threads = True

    def __init__(self, port: int, upstream: str, gated: str) -> None:
        self.upstream, self.gated = upstream, gated
        super().__init__(("127.0.0.1", port), GatingHandler)


class GatingHandler(BaseHTTPRequestHandler):
    server: GatingProxy

    def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
        self._forward("GET")

    def do_HEAD(self) -> None:  # noqa: N802
        self._forward("HEAD")

    def _forward(self, method: str) -> None:
        if self.server.gated in self.path and self.headers.get("authorization") != f"Bearer {GATE_TOKEN}":
            message = f"Access to model {self.server.gated} is restricted. You must have access to it and be authenticated."
            self.send_response(403)
            self.send_header("X-Error-Code", "GatedRepo")
            self.send_header("X-Error-Message", message)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        headers = {key: value for key, value in self.headers.items() if key.lower() not in ("host", "connection")}
        answer = passing_on().request(method, self.server.upstream + self.path, headers=headers)
        self.send_response(answer.status_code)
        for key, value in answer.headers.items():
            if key.lower() not in ("transfer-encoding", "content-length", "connection", "content-encoding", "server", "date"):
                self.send_header(key, value)
        self.send_header("Content-Length", str(len(answer.content)) if method == "GET" else answer.headers.get("content-length", "0"))
        self.end_headers()
        if method == "GET":
            self.wfile.write(answer.content)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
        pass


def olah_cli() -> str | None:
    beside = Path(sys.executable).with_name("olah-cli")
    return str(beside) if beside.exists() else shutil.which("olah-cli")


def wait_for(url: str, process: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if process.poll() is not None:
            pytest.fail(f"olah exited: {log.read_text()[-2000:]}")
        try:
            if httpx.get(url, timeout=2).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.2)
    pytest.fail(f"olah did not answer {url}: {log.read_text()[-2000:]}")


@pytest.fixture(scope="module")
def hub(tmp_path_factory: pytest.TempPathFactory):
    cli = olah_cli()
    require(cli is not None, "olah (pip install olah)")
    require(shutil.which("git") is not None, "git")
    root = tmp_path_factory.mktemp("hub")
    seed = random.randrange(1 << 32)
    rng = random.Random(seed)
    repos = {"tiny/single": 1, "tiny/sharded": rng.randint(2, 5), "tiny/gated": 1}
    commits = {}
    for repo_id, shards in repos.items():
        repo = root / "MIRRORS" / "models" / repo_id
        build_repo(repo, rng, shards)
        subprocess.run(["git", "init", "-q", "-b", "main"], cwd=repo, check=True)
        commits[repo_id] = git_commit(repo, "tiny model")
    port, proxy_port = free_port(), free_port()
    (root / "olah.toml").write_text(
        f'[basic]\nhost = "127.0.0.1"\nport = {port}\nmirror-netloc = "127.0.0.1:{port}"\n'
        f'mirror-lfs-netloc = "127.0.0.1:{port}"\nmirrors-path = ["{root / "MIRRORS"}"]\nrepos-path = "{root / "repos"}"\n'
        "[accessibility]\noffline = true\n")
    log = root / "olah.log"
    with log.open("wb") as sink:
        process = subprocess.Popen([cli, "-c", str(root / "olah.toml")], cwd=root, stdout=sink, stderr=subprocess.STDOUT)
    try:
        wait_for(f"http://127.0.0.1:{port}/api/models/tiny/single/revision/main", process, log)
        proxy = GatingProxy(proxy_port, f"http://127.0.0.1:{port}", "tiny/gated")
        threading.Thread(target=proxy.serve_forever, daemon=True).start()
        yield {"endpoint": f"http://127.0.0.1:{proxy_port}", "root": root, "commits": commits, "seed": seed}
        proxy.shutdown()
    finally:
        stop_process(process)


def seatplan_env(hub: dict, home: Path, **extra: str) -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if not key.startswith("HF_")}
    src = str(Path(__file__).resolve().parents[2] / "src")
    env.update(PYTHONPATH=os.pathsep.join(filter(None, [src, env.get("PYTHONPATH")])), HF_ENDPOINT=hub["endpoint"],
               HF_HUB_CACHE=str(home / "hf"), HF_HOME=str(home / "hf-home"), XDG_CACHE_HOME=str(home / "xdg"),
               HF_HUB_DISABLE_TELEMETRY="1")
    env.update(extra)
    return env


def seatplan(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "seatplan.cli", *args], capture_output=True, text=True, timeout=120, env=env)


def model_document(env: dict[str, str], model: str, *args: str) -> dict[str, Any]:
    done = seatplan(env, "model", model, "--json", *args)
    assert done.returncode == 0, done.stderr
    document = json.loads(done.stdout)
    # Where the files were read from differs by design; every figure must not.
    assert document.pop("model") == model
    document.pop("model_dir")
    return document


def hashes(env: dict[str, str], model: str) -> dict[str, str]:
    script = "import json, sys; from seatplan.facts.api import located_model_files_sha256 as h; print(json.dumps(h(sys.argv[1])))"
    done = subprocess.run([sys.executable, "-c", script, model], capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


@pytest.mark.parametrize("repo_id", ["tiny/single", "tiny/sharded"])
def test_the_hub_gives_the_local_directory_facts_to_the_byte(hub, tmp_path, repo_id):
    env = seatplan_env(hub, tmp_path)
    local = hub["root"] / "MIRRORS" / "models" / repo_id
    for args in ((), ("--tp", "2", "--kv-cache-dtype", "fp8", "--max-model-len", "1024")):
        assert model_document(env, repo_id, *args) == model_document(env, str(local), *args), f"seed {hub['seed']}"
    facts = model_document(env, repo_id)
    assert facts["weights_exact"] and f"({len(list(local.glob('*.safetensors')))} files)" in facts["weights_source"]
    from_hub, from_dir = hashes(env, repo_id), hashes(env, str(local))
    assert from_hub.pop("commit") == hub["commits"][repo_id]
    assert from_hub == from_dir
    # Only headers were fetched: each copy's blocks on disk stay far below the tensors' bytes it stands for.
    copies = list((tmp_path / "xdg" / "seatplan" / "hub-headers").rglob("*.safetensors"))
    assert copies and all(copy.stat().st_size == (local / copy.name).stat().st_size for copy in copies)
    assert not list((tmp_path / "hf").rglob("*.safetensors")), "a safetensors file reached the Hub cache"


def test_a_second_run_needs_no_network(hub, tmp_path):
    env = seatplan_env(hub, tmp_path)
    online = {repo_id: model_document(env, repo_id) for repo_id in ("tiny/single", "tiny/sharded")}
    unreachable = seatplan_env(hub, tmp_path, HF_ENDPOINT=f"http://127.0.0.1:{free_port()}")
    for repo_id, document in online.items():
        assert model_document({**env, "HF_HUB_OFFLINE": "1"}, repo_id) == document
        assert model_document(unreachable, repo_id) == document
        assert model_document({**env, "HF_HUB_OFFLINE": "1"}, f"{repo_id}@{hub['commits'][repo_id]}") == document


def test_offline_without_a_cache_says_how_to_fill_it(hub, tmp_path):
    done = seatplan(seatplan_env(hub, tmp_path, HF_HUB_OFFLINE="1"), "model", "tiny/single")
    assert done.returncode == 2
    assert "HF_HUB_OFFLINE is set" in done.stderr and "unset HF_HUB_OFFLINE" in done.stderr and "Traceback" not in done.stderr


def test_a_gated_model_names_the_token_to_set(hub, tmp_path):
    env = seatplan_env(hub, tmp_path)
    refused = seatplan(env, "model", "tiny/gated")
    assert refused.returncode == 2, refused.stderr
    assert "gated" in refused.stderr and "HF_TOKEN" in refused.stderr and "HF_TOKEN_PATH" in refused.stderr
    local = str(hub["root"] / "MIRRORS" / "models" / "tiny" / "gated")
    assert model_document({**env, "HF_TOKEN": GATE_TOKEN}, "tiny/gated") == model_document(env, local)
    token_file = tmp_path / "token"
    token_file.write_text(GATE_TOKEN + "\n")
    token_file.chmod(0o600)
    fresh = seatplan_env(hub, tmp_path / "second", HF_TOKEN_PATH=str(token_file))
    assert model_document(fresh, "tiny/gated") == model_document(env, local)
    assert GATE_TOKEN not in refused.stderr + refused.stdout


def test_a_missing_revision_names_what_exists(hub, tmp_path):
    done = seatplan(seatplan_env(hub, tmp_path), "model", "tiny/single@no-such-branch")
    assert done.returncode == 2
    assert "no revision 'no-such-branch'" in done.stderr and "main" in done.stderr
    absent = seatplan(seatplan_env(hub, tmp_path), "model", "tiny/absent")
    assert absent.returncode == 2 and "HF_TOKEN" in absent.stderr and "Traceback" not in absent.stderr


def test_a_moved_branch_changes_the_recorded_commit(hub, tmp_path):
    """apply's stale-input check compares these hashes; a new commit on main is a change, a pinned commit is not."""
    env = seatplan_env(hub, tmp_path)
    repo = hub["root"] / "MIRRORS" / "models" / "tiny" / "single"
    before = hashes(env, "tiny/single")
    pinned = hashes(env, f"tiny/single@{before['commit']}")
    (repo / "README.md").write_text("a model card, no fact changes\n")
    after_commit = git_commit(repo, "card")
    hub["commits"]["tiny/single"] = after_commit
    after = hashes(env, "tiny/single")
    assert after["commit"] == after_commit != before["commit"]
    assert {k: v for k, v in after.items() if k != "commit"} == {k: v for k, v in before.items() if k != "commit"}
    assert hashes(env, f"tiny/single@{before['commit']}") == pinned


GUARD = ("import json, sys; from pathlib import Path; from seatplan.documents.fleet_file import load_fleet; "
         "from seatplan.documents.io import read_plan; from seatplan.render.guard import changed_inputs; "
         "print(json.dumps(changed_inputs(read_plan(Path(sys.argv[1])), load_fleet(Path(sys.argv[2])))))")


def stale_inputs(env: dict[str, str], plan: Path, fleet: Path) -> list[str]:
    """apply's stale-input check (render/guard.py), run as apply runs it, in a process of its own."""
    done = subprocess.run([sys.executable, "-c", GUARD, str(plan), str(fleet)], capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_a_fleet_seat_on_a_hub_model_records_its_commit_for_apply(hub, tmp_path):
    env = seatplan_env(hub, tmp_path)
    commit = hub["commits"]["tiny/single"]
    fleet = cpu_fleet(tmp_path, {"main": ("tiny/single", free_port()), "pinned": (f"tiny/single@{commit}", free_port())},
                      kv="64MiB", total="8GiB")
    plan = tmp_path / "plan.json"
    done = seatplan(env, "plan", str(fleet), "-o", str(plan), "--json")
    assert done.returncode == 0, done.stderr
    document = json.loads(plan.read_text())
    recorded = document["inputs"]["model_facts_sha256"]
    assert recorded["main"]["commit"] == recorded["pinned"]["commit"] == commit
    assert stale_inputs(env, plan, fleet) == []
    pinned = PlannedVllmSeat.model_validate(next(seat for seat in document["seats"] if seat["name"] == "pinned"))
    assert pinned.launch is not None
    command = engine_command(pinned.launch)  # what render writes: vLLM takes the revision as a flag of its own
    revision = command.index("--revision")
    assert command[revision - 1:revision + 2] == ["tiny/single", "--revision", commit]  # vllm serve MODEL --revision REV
    # The branch moves: the seat that follows main is stale, the seat pinned to the commit is not.
    repo = hub["root"] / "MIRRORS" / "models" / "tiny" / "single"
    (repo / "NOTES.md").write_text(f"moved {random.random()}\n")
    moved = git_commit(repo, "notes")
    hub["commits"]["tiny/single"] = moved
    problems = stale_inputs(env, plan, fleet)
    assert problems == [f"seat main: tiny/single is now commit {moved} on the Hub; the plan read commit {commit}"]



# ----------------------------------------------------------------------------- a hostile Hub
# The Hub is a server seatplan does not control. HostileHub stands in front of olah (the real Hub-compatible
# server above) and answers the requests a case picks as a hostile Hub would, every other one as olah does.

Override = Callable[[str, str, str], Write | None]  # (method, path, request head) → how to answer, or None: olah


def forward(upstream: str, head: str, connection: socket.socket, edit: Callable[[bytes], bytes] | None = None,
            extra: dict[str, str] | None = None) -> None:
    """The request sent on to ``upstream`` (olah) and its answer written back, the body edited by ``edit``."""
    method, path = head.split(" ", 2)[:2]
    headers = {}
    for line in head.split("\r\n")[1:]:
        key, colon, value = line.partition(":")
        if colon and key.strip().lower() not in ("host", "connection", "accept-encoding"):
            headers[key.strip()] = value.strip()
    answer = passing_on().request(method, upstream + path, headers=headers)
    body = answer.content if edit is None else edit(answer.content)
    kept = {key: value for key, value in answer.headers.items()
            if key.lower() not in ("transfer-encoding", "content-length", "connection", "content-encoding", "server", "date")}
    kept.update(extra or {})
    length = str(len(body)) if method != "HEAD" else answer.headers.get("content-length", "0")
    lines = "".join(f"{key}: {value}\r\n" for key, value in kept.items())
    connection.sendall(f"HTTP/1.1 {answer.status_code} X\r\n{lines}Content-Length: {length}\r\nConnection: close\r\n\r\n".encode()
                       + (body if method != "HEAD" else b""))


class HostileHub(HostileServer):
    def __init__(self, upstream: str, override: Override, edit: Callable[[str, bytes], bytes] | None = None,
                 extra: dict[str, str] | None = None) -> None:
        def answer(path: str, connection: socket.socket, stop: threading.Event) -> None:
            head = self.request.head
            write = override(head.split(" ", 1)[0], path, head)
            if write is not None:
                write(connection, stop)
            else:
                forward(upstream, head, connection, None if edit is None else (lambda body: edit(path, body)), extra)
        super().__init__(answer)


def hostile_env(hub: dict, home: Path, endpoint: str, deadline_s: float = 30, **extra: str) -> dict[str, str | None]:
    """seatplan_env for a run through ``endpoint`` with ``deadline_s`` per Hub request (short where a hostile answer
    must be cut off, the default where the honest answers before it must pass on a busy machine), no HF_ setting
    inherited."""
    env: dict[str, str | None] = {key: None for key in os.environ if key.startswith("HF_")}
    env.update(seatplan_env(hub, home, HF_ENDPOINT=endpoint, HF_HUB_DOWNLOAD_TIMEOUT=f"{deadline_s:g}", **extra))
    return env


def assert_refused_cleanly(done: Measured, *words: str) -> None:
    assert not done.hung, f"still running after the limit: {done.stderr[-2000:]}"
    assert done.exit_code == 2 and "Traceback" not in done.stderr, (done.exit_code, done.stderr[-3000:])
    assert "error:" in done.stderr and "fix:" in done.stderr, done.stderr
    assert done.peak_rss_bytes < 900 << 20, f"peak memory {done.peak_rss_bytes >> 20} MiB"
    assert "\x00" not in done.stderr and GATE_TOKEN not in done.stdout + done.stderr
    for word in words:
        assert word in done.stderr, done.stderr


def upstream(hub: dict) -> str:
    return hub["endpoint"]  # the gating proxy in front of olah


def model_info(method: str, path: str) -> bool:
    return method == "GET" and path.startswith("/api/models/") and "/refs" not in path


def files_under(root: Path) -> list[Path]:
    return [path for path in root.rglob("*") if path.is_file()]


@pytest.mark.parametrize("write", [drip_headers, drip_body, processing_forever, endless_body],
                         ids=["header-drip", "body-drip", "102-flood", "endless-body"])
def test_a_hub_whose_model_info_never_ends_is_cut_off(hub, tmp_path, write):
    with HostileHub(upstream(hub), lambda method, path, head: write if model_info(method, path) else None) as server:
        done = run_measured("model", "tiny/single", "--json", env=hostile_env(hub, tmp_path, server.url, deadline_s=2))
    assert_refused_cleanly(done, server.url)


def longer_than_announced(connection: socket.socket, stop: threading.Event) -> None:
    """Content-Length: 40, then 300 MB: the rest must be neither read nor kept."""
    connection.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 40\r\n\r\n{" + b" " * 39)
    huge_body(300_000_000)(connection, stop)


@pytest.mark.parametrize("write", [endless_body, huge_body(300_000_000), drip_body, longer_than_announced],
                         ids=["endless", "300-MB", "drip", "longer-than-announced"])
def test_a_config_body_that_never_matches_its_size_writes_nothing(hub, tmp_path, write):
    def override(method: str, path: str, head: str) -> Write | None:
        return write if method == "GET" and path.endswith("/config.json") else None

    with HostileHub(upstream(hub), override) as server:
        done = run_measured("model", "tiny/single", "--json", env=hostile_env(hub, tmp_path, server.url, deadline_s=8))
    assert_refused_cleanly(done)
    assert not list((tmp_path / "xdg").rglob("config.json")), "part of a refused answer was kept"
    assert all(path.stat().st_size < 1 << 20 for path in files_under(tmp_path))


@pytest.mark.parametrize("values", [["A", 3], ["A", None], ["A", ["A"]], ["A", "../../escape.safetensors"],
                                    ["A", "a\x00.safetensors"], ["A", "x" * 300 + ".safetensors"]],
                         ids=["int", "null", "list", "dot-dot", "nul", "300-chars"])
def test_a_weight_map_of_mixed_types_or_unsafe_names_is_refused_naming_it(hub, tmp_path, values, rng):
    def edit(path: str, body: bytes) -> bytes:
        if not path.endswith("/model.safetensors.index.json"):
            return body
        index = json.loads(body)
        names = sorted(set(index["weight_map"].values()))
        tensors = list(index["weight_map"])
        rng.shuffle(tensors)
        for tensor, value in zip(tensors, values, strict=False):
            index["weight_map"][tensor] = names[0] if value == "A" else value
        return json.dumps(index).encode()

    with HostileHub(upstream(hub), lambda method, path, head: None, edit=edit) as server:
        done = run_measured("model", "tiny/sharded", "--json", env=hostile_env(hub, tmp_path, server.url))
    assert_refused_cleanly(done, "weight_map")
    assert not (tmp_path / "escape.safetensors").exists() and not list(tmp_path.rglob("escape*"))


@pytest.mark.parametrize(("field", "value", "named"), [
    ("sha", "../../../escape", "sha"), ("sha", "a" * 300, "sha"), ("sha", None, "sha"), ("sha", 12, "sha"),
    ("siblings", [{"rfilename": "model\x00.safetensors"}], "siblings"),
    ("siblings", [{"rfilename": "x" * 300 + ".safetensors"}], "siblings"),
    ("siblings", [{"rfilename": ".hidden.safetensors"}], "siblings"),
    ("siblings", "not a list", "no safetensors"), ("siblings", [{"rfilename": 7}, 3, None], "no safetensors"),
], ids=["sha-dot-dot", "sha-300", "sha-null", "sha-int", "sibling-nul", "sibling-300", "sibling-hidden", "siblings-text",
        "siblings-mixed"])
def test_what_model_info_says_becomes_a_path_only_after_a_strict_check(hub, tmp_path, field, value, named):
    def edit(path: str, body: bytes) -> bytes:
        if not path.startswith("/api/models/") or "/refs" in path:
            return body
        document = json.loads(body)
        document[field] = value
        return json.dumps(document).encode()

    with HostileHub(upstream(hub), lambda method, path, head: None, edit=edit) as server:
        done = run_measured("model", "tiny/single", "--json", env=hostile_env(hub, tmp_path, server.url))
    assert not done.hung and "Traceback" not in done.stderr, done.stderr[-3000:]
    if named == "no safetensors":  # no file list: the weights are estimated, as for a directory without them
        assert done.exit_code in (0, 2), done.stderr
    else:
        assert_refused_cleanly(done, named)
    assert not list(tmp_path.rglob("escape*")) and not list(tmp_path.parent.glob("escape*"))


def test_an_etag_naming_a_path_outside_the_cache_writes_nothing_there(hub, tmp_path):
    """hf_hub_download names its blobs by the ETag; seatplan reads no file through it, so a hostile ETag is never a path."""
    home = tmp_path / "home"
    escape = '"../../../../../escape-etag"'
    with HostileHub(upstream(hub), lambda method, path, head: None, extra={"ETag": escape, "X-Linked-Etag": escape}) as server:
        done = run_measured("model", "tiny/sharded", "--json", env=hostile_env(hub, home, server.url))
    assert done.exit_code == 0 and "Traceback" not in done.stderr, done.stderr[-3000:]
    assert not list(tmp_path.rglob("escape-etag*")) and not list(tmp_path.parent.glob("escape-etag*"))


def test_a_model_info_redirect_to_another_host_never_carries_the_token(hub, tmp_path):
    env_token = {"HF_TOKEN": GATE_TOKEN}
    with HostileHub(upstream(hub), lambda method, path, head: None) as elsewhere, \
            HostileHub(upstream(hub), lambda method, path, head: redirect_to(elsewhere.url + path) if model_info(method, path)
                       else None) as server:
        done = run_measured("model", "tiny/single", "--json", env=hostile_env(hub, tmp_path, server.url, **env_token))
    assert not done.hung and "Traceback" not in done.stderr, done.stderr[-3000:]
    assert done.exit_code in (0, 2), done.stderr
    assert elsewhere.heads, "the redirect was not followed: this test would not see a token sent on"
    assert all(GATE_TOKEN not in head for head in elsewhere.heads)
    assert any(GATE_TOKEN in head for head in server.heads)  # the token was sent, to the Hub it is for


@pytest.mark.parametrize("revision", ["r" * 300, "a/" * 120 + "b", "main/../../x"])
def test_a_revision_of_any_length_or_shape_ends_cleanly(hub, tmp_path, revision):
    done = run_measured("model", f"tiny/single@{revision}", "--json", env=hostile_env(hub, tmp_path, upstream(hub)))
    assert not done.hung and "Traceback" not in done.stderr, done.stderr[-3000:]
    assert done.exit_code == 2 and "error:" in done.stderr
    assert not list((tmp_path / "xdg").rglob("x"))


def test_revision_names_a_hub_lists_are_shown_only_when_printable(hub, tmp_path):
    def edit(path: str, body: bytes) -> bytes:
        if "/refs" not in path:
            return body
        refs = json.loads(body)
        refs["branches"] = [*refs.get("branches", []), {"name": "evil\x00\x1b[2J" + "z" * 300, "ref": "refs/heads/x",
                                                         "targetCommit": "0" * 40},
                                                        {"name": 5, "ref": "refs/heads/y", "targetCommit": "1" * 40}]
        return json.dumps(refs).encode()

    with HostileHub(upstream(hub), lambda method, path, head: None, edit=edit) as server:
        done = run_measured("model", "tiny/single@no-such-branch", "--json", env=hostile_env(hub, tmp_path, server.url))
    assert_refused_cleanly(done, "no-such-branch")
    assert "evil" not in done.stderr


def test_a_damaged_header_copy_is_detected_and_read_again(hub, tmp_path, rng):
    env = seatplan_env(hub, tmp_path)
    first = model_document(env, "tiny/sharded")
    copies = sorted((tmp_path / "xdg" / "seatplan" / "hub-headers").rglob("*.safetensors"))
    damaged = rng.choice(copies)
    size = damaged.stat().st_size
    with damaged.open("r+b") as stream:  # a header overwritten in place: same size, other bytes
        stream.seek(rng.randint(8, 40))
        stream.write(b"\xff" * 4)
    assert model_document(env, "tiny/sharded") == first
    assert damaged.stat().st_size == size
    config = next((tmp_path / "xdg" / "seatplan" / "hub-headers").rglob("config.json"))
    config.write_text(config.read_text()[: rng.randint(1, 40)])  # a config cut short
    assert model_document(env, "tiny/sharded") == first
    assert model_document({**env, "HF_HUB_OFFLINE": "1"}, "tiny/sharded") == first


def test_a_password_in_hf_endpoint_is_never_stored_or_printed(hub, tmp_path):
    password = "S3cr3t-pw-7f2c-seatplan"
    with HostileHub(upstream(hub), lambda method, path, head: None) as server:
        endpoint = server.url.replace("http://", f"http://mirror-user:{password}@")
        done = run_measured("model", "tiny/sharded", "--json", env=hostile_env(hub, tmp_path, endpoint))
        refused = run_measured("model", "tiny/single@no-such-branch", env=hostile_env(hub, tmp_path, endpoint))
    assert done.exit_code == 0, done.stderr[-2000:]
    assert refused.exit_code == 2 and "Traceback" not in refused.stderr
    assert any(header_value(head, "authorization") for head in server.heads)  # the mirror was sent its password
    records = list((tmp_path / "xdg").rglob("seatplan-hub.json"))
    assert records and all(password not in record.read_text() for record in records)
    assert "mirror-user" not in records[0].read_text() and server.url in records[0].read_text()  # user and password removed
    assert password not in done.stdout + done.stderr + refused.stdout + refused.stderr


def test_a_hub_error_quoting_the_url_shows_it_without_user_or_password(hub, tmp_path, rng):
    """Issue 48: huggingface_hub's error for a 5xx quotes the request's URL ("for url 'http://user:PASSWORD@…'"),
    which reached the JSON on stdout and stderr. A mirror that answers every model request with an error."""
    password = "pw-" + "".join(rng.choice("abcdefghijkmnpqrstuvwxyz23456789") for _ in range(rng.randint(12, 30)))
    status = rng.choice([500, 502, 503, 400, 418])
    fail = lambda method, path, head: (lambda connection, stop: respond(connection, status, b"no"))  # noqa: E731
    with HostileHub(upstream(hub), lambda method, path, head: fail(method, path, head) if model_info(method, path) else None) as server:
        endpoint = server.url.replace("http://", f"http://mirror-user:{password}@")
        done = run_measured("model", "tiny/single", "--json", env=hostile_env(hub, tmp_path, endpoint))
    assert done.exit_code == 2 and "Traceback" not in done.stderr, done.stderr[-2000:]
    assert json.loads(done.stdout)["error"]
    for text in (done.stdout, done.stderr):
        assert password not in text and "mirror-user" not in text, text
    assert server.url.removeprefix("http://") in done.stdout + done.stderr  # the host is still named


def test_a_mirror_that_ignores_range_and_announces_a_huge_file_is_read_only_to_the_header(hub, tmp_path):
    """A 200 answer to a range read, announcing the whole file (here 16 GiB more than the tiny file, past every
    answer cap): the header is read, the rest never, and the facts are the directory's."""
    extra_bytes = 16 << 30

    def override(method: str, path: str, head: str) -> Write | None:
        if method != "GET" or not path.endswith(".safetensors"):
            return None
        body = passing_on().get(upstream(hub) + path).content

        def write(connection: socket.socket, stop: threading.Event) -> None:
            connection.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % (len(body) + extra_bytes) + body)
            zeros = bytes(1 << 16)
            while not stop.is_set():  # the announced rest, for as long as the reader reads (a whole read would be 16 GiB)
                connection.sendall(zeros)
        return write

    local = hub["root"] / "MIRRORS" / "models" / "tiny" / "single"
    with HostileHub(upstream(hub), override) as server:
        done = run_measured("model", "tiny/single", "--json", env=hostile_env(hub, tmp_path, server.url))
    assert done.exit_code == 0 and "Traceback" not in done.stderr, done.stderr[-2000:]
    copy = next((tmp_path / "xdg").rglob("model.safetensors"))
    assert copy.stat().st_size == (local / "model.safetensors").stat().st_size + extra_bytes  # the size it announced
    assert copy.stat().st_blocks * 512 < 1 << 20  # a sparse copy: the header's blocks only
    assert done.peak_rss_bytes < 900 << 20
