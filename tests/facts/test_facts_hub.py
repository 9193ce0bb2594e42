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
import struct
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest

from kits.facts import fixture_dir
from kits.parts import free_port, require, stop_process
from kits.rollout import cpu_fleet
from seatplan.documents.plan import PlannedSeat
from seatplan.engine.command import engine_command

pytestmark = pytest.mark.hub

GATE_TOKEN = "hf_seatplan_gate_4c1e"
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
        answer = httpx.request(method, self.server.upstream + self.path, headers=headers, timeout=30)
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
    pinned = PlannedSeat.model_validate(next(seat for seat in document["seats"] if seat["name"] == "pinned"))
    command = engine_command(pinned)  # what render writes: vLLM takes the revision as a flag of its own
    revision = command.index("--revision")
    assert command[revision - 1:revision + 2] == ["tiny/single", "--revision", commit]  # vllm serve MODEL --revision REV
    # The branch moves: the seat that follows main is stale, the seat pinned to the commit is not.
    repo = hub["root"] / "MIRRORS" / "models" / "tiny" / "single"
    (repo / "NOTES.md").write_text(f"moved {random.random()}\n")
    moved = git_commit(repo, "notes")
    hub["commits"]["tiny/single"] = moved
    problems = stale_inputs(env, plan, fleet)
    assert problems == [f"seat main: tiny/single is now commit {moved} on the Hub; the plan read commit {commit}"]

