"""Rendered files name the variables that hold keys, never the keys; a key pasted where a variable's name goes is
refused without being quoted (render and verify). The session-end scan (tests/conftest.py) checks every file too."""

from __future__ import annotations

import pytest

from kits.leaks import TEST_SECRETS
from kits.rollout import run_seatplan

GATEWAY_KEY, ENGINE_KEY = TEST_SECRETS[1], TEST_SECRETS[0]


def test_rendered_files_reference_the_key_variables_and_hold_no_key(demo_plan_path, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("LITELLM_MASTER_KEY", GATEWAY_KEY)
    monkeypatch.setenv("VLLM_API_KEY", ENGINE_KEY)
    code, out, err = run_seatplan(capsys, monkeypatch, "render", str(demo_plan_path), "-o", str(tmp_path / "rendered"),
                                  "--engine-key-env", "VLLM_API_KEY", "--verify-gateway", "http://gw:4000")
    assert code == 0, err
    files = {path: path.read_bytes() for path in (tmp_path / "rendered").rglob("*") if path.is_file()}
    assert len(files) > 5
    assert not [path for path, data in files.items() for secret in TEST_SECRETS if secret.encode() in data]
    litellm = (tmp_path / "rendered" / "litellm" / "config.yaml").read_text()
    assert "os.environ/LITELLM_MASTER_KEY" in litellm and "os.environ/VLLM_API_KEY" in litellm
    assert "--key-env LITELLM_MASTER_KEY" in (tmp_path / "rendered" / "ansible" / "vars.yaml").read_text()


@pytest.mark.parametrize("flag", ["--gateway-key-env", "--engine-key-env"])
def test_a_key_given_as_the_variable_name_is_refused_unquoted(demo_plan_path, tmp_path, capsys, monkeypatch, flag):
    code, out, err = run_seatplan(capsys, monkeypatch, "render", str(demo_plan_path), "-o", str(tmp_path / "rendered"), flag, GATEWAY_KEY)
    assert code == 2 and flag in err and "fix:" in err
    assert GATEWAY_KEY not in out + err and not (tmp_path / "rendered").exists()


def test_verify_refuses_a_key_given_as_the_variable_name_unquoted(demo_plan_path, capsys, monkeypatch):
    code, out, err = run_seatplan(capsys, monkeypatch, "verify", str(demo_plan_path), "--gateway", "http://127.0.0.1:9", "--key-env", GATEWAY_KEY)
    assert code == 2 and "--key-env" in err
    assert GATEWAY_KEY not in out + err
