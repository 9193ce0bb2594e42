"""Every example under every command's ``--help`` (``clihelp.EXAMPLES``) runs on the shipped data (examples/), in
one working directory, as a user would paste it: an example that reads a file another example writes (plan.json,
usage.json, diagnose.json, rollout, plan2.json) runs after it, and each exits 0, or with the status EXIT_STATUS
gives (a check that finds what the shipped data holds).

An example that needs what this machine cannot give is parsed instead (its options read by the command's own
parsers, as click would before running it, so a renamed option or a value the parser refuses still fails here),
and PARSE_ONLY says why and which test runs that path against a real part."""

from __future__ import annotations

import shlex
import subprocess
from pathlib import Path

import pytest
import typer.main

from kits.console_blocks import shim
from kits.paths import REPO_ROOT
from seatplan.cli import app
from seatplan.clihelp import EXAMPLES

PARSE_ONLY = {
    "seatplan adopt --litellm-config /etc/litellm/config.yaml --env-dir /etc/vllm --gpus-from-host -o fleet.yaml":
        "reads the GPU host's nvidia-smi, /etc and the running engines (tests/adopt/test_adopt_vllm.py adopts real vLLM CPU engines)",
    "seatplan usage --from postgresql://litellm@db/litellm --days 7 --fleet fleet.yaml --json":
        "needs LiteLLM's database (tests/usage/test_usage_postgres.py reads a real PostgreSQL)",
    "seatplan usage --from https://gateway.example/ --key-file ~/.config/litellm-key --days 7 -o usage.json":
        "needs a LiteLLM gateway and its key (tests/usage/test_usage_api.py serves the API's shape from a real PostgreSQL)",
    "seatplan apply plan2.json --inventory rollout/ansible/inventory.yaml -o rollout --check":
        "ansible-playbook reaches gpu-box over SSH (tests/render/test_render_apply_ansible.py applies to localhost)",
    "seatplan apply plan2.json --inventory rollout/ansible/inventory.yaml -o rollout --tag night2":
        "ansible-playbook reaches gpu-box over SSH (tests/render/test_render_apply_ansible.py applies to localhost)",
    "seatplan rollback rollout --to night1":
        "undoes the releases recorded on gpu-box after night1 (tests/render/test_render_release_records.py rolls back on localhost)",
    "seatplan verify plan.json --gateway http://127.0.0.1:14000 --key-env LITELLM_MASTER_KEY":
        "needs the engines and the gateway running (tests/integration/test_verify_real.py boots real ones)",
}
# Examples whose command reports a finding by its exit status, with what the shipped data holds.
EXIT_STATUS = {
    "seatplan diagnose --beszel examples/night/beszel_data.db --plan plan.json":
        (1, "the shipped week's GPUs 0 and 2 crept past the plan's spare: the plateau check fails (docs/walkthrough.md)"),
}
ALL = [example for name in sorted(EXAMPLES) for example in EXAMPLES[name]]


def outputs(example: str) -> set[str]:
    words = shlex.split(example)
    return {words[index + 1] for index, word in enumerate(words[:-1]) if word in ("-o", "--output", ">")}


def inputs(example: str, made: set[str]) -> set[str]:
    """The files this example reads that another example writes."""
    return {word for word in shlex.split(example) if word in made} - outputs(example)


def test_every_help_example_is_run_or_parsed_with_a_reason():
    assert set(PARSE_ONLY) | set(EXIT_STATUS) <= set(ALL), sorted(set(PARSE_ONLY) | set(EXIT_STATUS) - set(ALL))
    assert all(reason.strip() for reason in PARSE_ONLY.values())


def test_the_examples_that_need_a_live_part_parse():
    commands = typer.main.get_command(app).commands  # type: ignore[attr-defined]
    for example in PARSE_ONLY:
        words = shlex.split(example.replace("~", str(Path.home())))
        assert words[0] == "seatplan"
        commands[words[1]].make_context(words[1], words[2:])  # click's parse and seatplan's parsers; nothing runs


@pytest.mark.slow
def test_every_other_help_example_runs_on_the_shipped_data(tmp_path: Path):
    (tmp_path / "examples").symlink_to(REPO_ROOT / "examples")
    environment = shim(tmp_path)
    waiting = [example for example in ALL if example not in PARSE_ONLY]
    made = set().union(*(outputs(example) for example in waiting))
    ran: list[str] = []
    while waiting:
        ready = [example for example in waiting if all((tmp_path / name).exists() for name in inputs(example, made))]
        assert ready, f"these examples read files no example writes: {waiting}"
        for example in ready:
            done = subprocess.run(["bash", "-c", example], cwd=tmp_path, env=environment, capture_output=True, text=True, timeout=600)
            assert done.returncode == EXIT_STATUS.get(example, (0, ""))[0], f"{example}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
            assert "Traceback" not in done.stderr
            for name in outputs(example):
                assert (tmp_path / name).exists(), f"{example} did not write {name}"
            waiting.remove(example)
            ran.append(example)
    assert len(ran) + len(PARSE_ONLY) == len(ALL)
