"""The gateway's smoke task as real ansible-playbook runs it (issue 48: every apply printed "[WARNING]: Encountered 1
template error ... 'model' is undefined", since the task's name used the loop variable, which Ansible templates
before the loop defines it), and a model that fails is named while the key stays hidden (issue 43: `no_log` hid which
model failed). The gateway is a stand-in HTTP server on 127.0.0.1 answering 200, or 500 for the models a test breaks:
the tasks, their names and their loop are seatplan's own, from render/gateway.py."""

from __future__ import annotations

import http.server
import json
import os
import subprocess
import sys
import threading

import pytest
import yaml

from kits.rollout import ansible_installed
from seatplan.render.gateway import gateway_smoke_tasks
from seatplan.render.runner import ansible_playbook

KEY = "sk-test-7f3a91c2"  # the master key: it must appear in no line ansible-playbook prints


class _Answer(http.server.BaseHTTPRequestHandler):
    broken: frozenset[str] = frozenset()

    def do_POST(self) -> None:  # noqa: N802 (http.server's name)
        model = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}").get("model")
        self.send_response(500 if model in self.broken else 200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"{}")

    def log_message(self, *args: object) -> None:
        pass


def run_smoke(tmp_path, models: list[str], broken: set[str]) -> subprocess.CompletedProcess[str]:
    handler = type("Answer", (_Answer,), {"broken": frozenset(broken)})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        play = [{"hosts": "localhost", "gather_facts": False, "tasks": gateway_smoke_tasks(),
                 "vars": {"seatplan_gateway_url": f"http://127.0.0.1:{server.server_address[1]}", "seatplan_gateway_models": models,
                          "seatplan_gateway_key_env": "SEATPLAN_TEST_GATEWAY_KEY"}}]
        (tmp_path / "play.yml").write_text(yaml.safe_dump(play))
        command = [ansible_playbook(), "-i", "localhost,", "-c", "local", "-e", f"ansible_python_interpreter={sys.executable}",
                   str(tmp_path / "play.yml")]
        return subprocess.run(command, capture_output=True, text=True, timeout=300,
                              env={**os.environ, "SEATPLAN_TEST_GATEWAY_KEY": KEY, "ANSIBLE_NOCOLOR": "1"})
    finally:
        server.shutdown()


@pytest.mark.skipif(not ansible_installed(), reason="ansible-playbook is not installed")
def test_the_smoke_task_runs_without_a_template_warning(tmp_path, rng):
    models = sorted({f"m{rng.randrange(1000)}" for _ in range(rng.randint(1, 4))})
    done = run_smoke(tmp_path, models, set())
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-3000:]
    assert "undefined" not in output and "template error" not in output, output[-3000:]
    assert f"gateway: one-token completion for {', '.join(models)}" in output
    assert KEY not in output


@pytest.mark.skipif(not ansible_installed(), reason="ansible-playbook is not installed")
def test_a_failing_model_is_named_and_the_key_stays_hidden(tmp_path, rng):
    models = sorted({f"org/m{rng.randrange(1000)}" for _ in range(rng.randint(2, 5))})
    broken = set(rng.sample(models, rng.randint(1, len(models) - 1)))
    done = run_smoke(tmp_path, models, broken)
    output = done.stdout + done.stderr
    assert done.returncode != 0, output[-3000:]
    failed = [model for model in models if model in broken]
    assert f"the gateway's smoke completion failed for {', '.join(failed)} (HTTP {', '.join(['500'] * len(failed))})" in output, output[-3000:]
    assert KEY not in output
