"""The commands that act (plan, render, diff, apply, rollback) on hostile fleet files, flags, tags and directories.

Every case ends in exit 0 with what was asked, or exit 2 with ``error:``/``fix:``; none may create the canary
file its payloads try to touch (the shell, Jinja, Compose and Go-template payloads all name it), and none may
write outside the directory it was given: the whole test directory is snapshotted before and after, and the
only differences allowed are under DIR (and the plan file that was asked for). The real consumers read the
results: ``ansible-playbook --check`` against this machine, bash sourcing the env files, promtool on the rules,
and the Compose specification's JSON Schema on compose.yaml.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from jsonschema import Draft7Validator

from kits.hostile import Outcome, seatplan
from kits.parts import free_port, require
from kits.render import COMPOSE_SCHEMA, QWEN3_8B, load_ansible_yaml
from kits.rollout import ansible_installed, localhost_inventory
from seatplan.render.runner import ansible_playbook

CANARY = "CANARY"
# Payloads whose only effect, if anything ran them, is to create ./CANARY or $CANARY_DIR/CANARY.
RUN_PAYLOADS = [
    "{{ lookup('pipe', 'touch CANARY; echo 127.0.0.1') }}",
    '{{ lookup("pipe", "touch CANARY") }}',
    "{% for x in [1] %}{{ lookup('pipe','touch CANARY') }}{% endfor %}",
    "x$(touch CANARY)y",
    "x`touch CANARY`y",
    "x; touch CANARY #",
    "x\ntouch CANARY",
    "x\x85touch CANARY",
    "x\u2028touch CANARY",
    "x\x00y",
    '127.0.0.1" or vector(1) or x{a="',
    "{{ printf \"%s\" \"x\" }}",
]


def quoted(text: str) -> str:
    """A YAML double-quoted scalar holding ``text`` exactly (JSON strings are YAML)."""
    return json.dumps(text)


def fleet_text(*, host: str = "cpu-box", address: str = "127.0.0.1", seat: str = "alpha", served: str | None = None,
               env: dict[str, str] | None = None, model: str | None = None, gpu_name: str = "budget", port: int | None = None) -> str:
    lines = [
        "hosts:",
        f"  - name: {quoted(host)}",
        "    device: cpu",
        f"    address: {quoted(address)}",
        "    gpus:",
        f"      - {{index: 0, total_bytes: 64GiB, name: {quoted(gpu_name)}}}",
        "policy:",
        '  vllm_version: "0.32"',
        "  creep_allowance_bytes: 0",
        "  boot_margin_bytes: 64MiB",
        "seats:",
        f"  - name: {quoted(seat)}",
        f"    model: {quoted(model or str(QWEN3_8B))}",
        f"    port: {port or 18123}",
        "    max_model_len: 1024",
        "    kv_cache_memory_bytes: 256MiB",
        "    dtype: bfloat16",
        "    enforce_eager: true",
        "    max_num_seqs: 4",
        "    max_num_batched_tokens: 1024",
        "    pin: 0",
    ]
    if served is not None:
        lines.append(f"    served_model_name: {quoted(served)}")
    if env:
        lines.append("    env:")
        lines += [f"      {quoted(key)}: {quoted(value)}" for key, value in env.items()]
    return "\n".join(lines) + "\n"


def snapshot(root: Path) -> dict[str, tuple[str, bytes | str]]:
    """Every path under ``root``: its kind, and a file's bytes or a link's target (directories by name)."""
    found: dict[str, tuple[str, bytes | str]] = {}
    for path in sorted(root.rglob("*")):
        key = path.relative_to(root).as_posix()
        if path.is_symlink():
            found[key] = ("link", os.readlink(path))
        elif path.is_file():
            found[key] = ("file", path.read_bytes())
        elif path.is_dir():
            found[key] = ("dir", "")
    return found


def changed_outside(before: dict, after: dict, allowed: list[str]) -> list[str]:
    """Paths that appeared, went or changed, other than those under ``allowed`` (relative prefixes)."""
    changed = {key for key in before.keys() | after.keys() if before.get(key) != after.get(key)}
    return sorted(key for key in changed if not any(key == prefix or key.startswith(prefix + "/") for prefix in allowed))


@pytest.fixture
def work(tmp_path, monkeypatch):
    """A directory to run in (the payloads' ./CANARY lands here) that must end without the canary."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("CANARY_DIR", str(tmp_path))
    yield tmp_path
    assert not list(tmp_path.rglob(CANARY)), "a payload ran"
    assert not list(tmp_path.rglob("*.render")), "a staging directory was left behind"


def plan_from(work: Path, text: str, name: str = "plan.json") -> tuple[Outcome, Path]:
    fleet = work / "fleet.yaml"
    fleet.write_text(text, encoding="utf-8")
    plan = work / name
    return seatplan("plan", str(fleet), "-o", str(plan), "--json"), plan


def refused_without_writing(work: Path, outcome: Outcome, *must_not_exist: Path) -> None:
    assert outcome.refused, (outcome.exit_code, outcome.stdout, outcome.stderr)
    for path in must_not_exist:
        assert not path.exists(), path


# ----------------------------------------------------------------------------- names in the fleet file


@pytest.mark.parametrize("payload", RUN_PAYLOADS + ["../../../x", "gpu[0:2]", "a,b", "-x", ".hidden", "a b", "x" * 300, "all:!x", ""])
def test_a_host_name_that_is_not_a_dns_name_is_refused_at_load(work, payload):
    outcome, plan = plan_from(work, fleet_text(host=payload))
    refused_without_writing(work, outcome, plan)
    assert "fleet.yaml:2" in outcome.stderr and "hosts[0].name" in outcome.stderr


@pytest.mark.parametrize("payload", RUN_PAYLOADS + ["a b", "http://x", "gpu[0:2]", "x:8000"])
def test_an_address_that_is_neither_ip_nor_dns_name_is_refused_at_load(work, payload):
    outcome, plan = plan_from(work, fleet_text(address=payload))
    refused_without_writing(work, outcome, plan)
    assert "hosts[0].address" in outcome.stderr


@pytest.mark.parametrize("payload", RUN_PAYLOADS + ["..", ".", "a/b", "../x", "-rf", "x" * 64, "a b"])
def test_a_seat_name_outside_the_safe_charset_is_refused_at_load(work, payload):
    outcome, plan = plan_from(work, fleet_text(seat=payload))
    refused_without_writing(work, outcome, plan)
    assert "seats[0].name" in outcome.stderr


@pytest.mark.parametrize("payload", RUN_PAYLOADS + ["a b", "-x", "x'y"])
def test_a_served_name_outside_the_safe_charset_is_refused_at_load(work, payload):
    outcome, plan = plan_from(work, fleet_text(served=payload))
    refused_without_writing(work, outcome, plan)
    assert "seats[0].served_model_name" in outcome.stderr


@pytest.mark.parametrize("key", ["x$(touch CANARY)y", "x`touch CANARY`", "x; touch CANARY #", "a\nb", "1ABC", "A-B", "A=B", "", "A B", "Ä"])
def test_an_env_key_that_is_no_posix_name_is_refused_at_load(work, key):
    outcome, plan = plan_from(work, fleet_text(env={key: "1"}))
    refused_without_writing(work, outcome, plan)
    assert "seats[0].env" in outcome.stderr


@pytest.mark.parametrize("char", ["\x00", "\x85", "\u2028", "\u2029", "\x1b", "\r", "\x7f"])
def test_a_control_character_or_nel_ls_ps_anywhere_in_the_fleet_file_is_refused_with_its_line(work, char):
    outcome, plan = plan_from(work, fleet_text(gpu_name=f"H100{char}x"))
    refused_without_writing(work, outcome, plan)
    assert "fleet.yaml:6" in outcome.stderr and "control character" in outcome.stderr


def test_a_good_fleet_still_plans(work):
    outcome, plan = plan_from(work, fleet_text(host="cpu-box.lab", seat="alpha_1.b", served="org/model:v1", env={"HF_HUB_OFFLINE": "1"}))
    assert outcome.exit_code == 0, outcome.stderr
    assert plan.is_file()


# ----------------------------------------------------------------------------- free-text values: encoded for each consumer

HOSTILE_VALUES = ["$(touch CANARY)", "`touch CANARY`", "a; touch CANARY #", '"; touch CANARY; "', "\\", "${HOME}", "$$HOME", '{{ lookup("pipe","touch CANARY") }}',
                  "%i %n", "x # y", "  lead", "Ünïcödé ✓"]


def rendered(work: Path, *flags: str, **fleet) -> Path:
    outcome, plan = plan_from(work, fleet_text(**fleet))
    assert outcome.exit_code == 0, outcome.stderr
    before = snapshot(work)
    out = seatplan("render", str(plan), "-o", str(work / "rendered"), *flags)
    assert out.exit_code == 0, out.stderr
    assert changed_outside(before, snapshot(work), ["rendered"]) == []
    return work / "rendered"


def test_env_values_read_back_exactly_in_bash_and_compose_and_run_nothing(work):
    env = {f"V{number}": value for number, value in enumerate(HOSTILE_VALUES)}
    directory = rendered(work, env=env)
    env_file = directory / "env" / "alpha.env"
    script = 'set -a; . "$1"; set +a; for key in ' + " ".join(env) + '; do printf "%s\\0" "${!key}"; done'
    shown = subprocess.run(["bash", "-c", script, "-", str(env_file)], capture_output=True, check=True, cwd=work).stdout.decode().split("\0")[:-1]
    assert shown == list(env.values())
    compose = yaml.safe_load((directory / "compose.yaml").read_text())
    environment = compose["services"]["alpha"]["environment"]
    assert {key: value.replace("$$", "$") for key, value in environment.items()} == env  # Compose reads `$$` as `$`
    assert all("$" not in value.replace("$$", "") for value in environment.values())


@pytest.mark.parametrize("env", [{"X": "it's"}, {"X": "a\nb"}, {"X": "a\rb"}])
def test_an_env_value_no_env_file_can_carry_is_refused_at_load(work, env):
    outcome, plan = plan_from(work, fleet_text(env=env))
    refused_without_writing(work, outcome, plan)
    assert "seats[0].env" in outcome.stderr


@pytest.mark.parametrize("piece", ["${HOME}", "$(touch CANARY)", "a:b", "$HOME", "sp ace", '{{ lookup("pipe","touch CANARY") }}'])
def test_an_absolute_model_path_reaches_compose_whole_and_uninterpolated(work, piece):
    model = work / f"models/m{piece}x"
    model.mkdir(parents=True)
    shutil.copy(QWEN3_8B / "config.json", model / "config.json")
    directory = rendered(work, model=str(model))
    service = yaml.safe_load((directory / "compose.yaml").read_text())["services"]["alpha"]
    volume = service["volumes"][0]
    assert volume["type"] == "bind" and volume["read_only"] is True
    assert volume["source"].replace("$$", "$") == str(model) == volume["target"].replace("$$", "$")
    assert str(model).replace("$", "$$") in service["command"]
    schema_ok(directory / "compose.yaml")
    env_command = subprocess.run(["bash", "-c", 'set -a; . "$1"; set +a; eval "printf \'%s\\0\' $SEATPLAN_COMMAND"', "-", str(directory / "env" / "alpha.env")],
                                 capture_output=True, check=True, cwd=work).stdout.decode().split("\0")
    assert str(model) in env_command


def schema_ok(compose_file: Path) -> None:
    errors = list(Draft7Validator(json.loads(COMPOSE_SCHEMA.read_text())).iter_errors(yaml.safe_load(compose_file.read_text())))
    assert errors == [], errors[0].message if errors else ""


def test_prometheus_rules_pass_promtool_and_match_only_the_planned_instance(work):
    tool = shutil.which("promtool")
    require(tool is not None, "promtool (Debian's prometheus package)")
    directory = rendered(work)
    checked = subprocess.run([tool, "check", "rules", str(directory / "prometheus" / "seatplan.rules.yaml")], capture_output=True, text=True)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    rules = yaml.safe_load((directory / "prometheus" / "seatplan.rules.yaml").read_text())["groups"][0]["rules"]
    assert all('instance="127.0.0.1:18123"' in rule["expr"] for rule in rules)


# ----------------------------------------------------------------------------- render flags


@pytest.mark.parametrize(("flag", "value"), [
    ("--host-dir", "/srv/x\nExecStartPre=/bin/touch /tmp/CANARY"),
    ("--host-dir", "relative/dir"),
    ("--host-dir", "/srv/../etc"),
    ("--verify-gateway", "{{ lookup('pipe','touch CANARY') }}"),
    ("--verify-gateway", "http://gw:4000 --key-env X"),
    ("--bind", "0.0.0.0; touch CANARY"),
    ("--image", "vllm/vllm-openai:latest\nprivileged: true"),
    ("--restart-script", "/x\ntouch CANARY"),
    ("--launcher", "vllm 'serve"),
    ("--launcher", "vllm serve\x85"),
])
def test_a_render_flag_no_consumer_can_carry_is_refused_before_anything_is_written(work, flag, value):
    outcome, plan = plan_from(work, fleet_text())
    extra = ["--restart", "script"] if flag == "--restart-script" else []
    out = seatplan("render", str(plan), "-o", str(work / "rendered"), flag, value, *extra)
    refused_without_writing(work, out, work / "rendered")


def test_systemd_unit_escapes_percent_and_refuses_what_it_cannot_carry(work):
    directory = rendered(work, "--restart", "systemd", "--host-dir", "/srv/seat%plan")
    unit = (directory / "systemd" / "seatplan-vllm@.service").read_text()
    assert "EnvironmentFile=/srv/seat%%plan/env/%i.env" in unit
    assert "ExecStart=/srv/seat%%plan/bin/seatplan-engine.sh\n" in unit  # the launcher: no shell line for systemd to expand
    outcome = seatplan("render", str(work / "plan.json"), "-o", str(work / "other"), "--restart", "systemd", "--host-dir", "/srv/a b")
    refused_without_writing(work, outcome, work / "other")


# ----------------------------------------------------------------------------- Ansible: the real ansible-playbook


@pytest.fixture
def ansible(work):
    require(ansible_installed(), "ansible-playbook (pip install ansible-core)")
    return work


# under the test's directory (``{work}``), so that what a broken quoting would create lands where the snapshot sees it
HOSTILE_HOST_DIRS = ["{work}/srv/x; touch CANARY", "{work}/srv/{{{{ lookup('pipe','touch CANARY') }}}}", "{work}/srv/$(touch CANARY)", "{work}/srv/`touch CANARY`"]


@pytest.mark.ansible
def test_apply_check_against_localhost_runs_no_payload_from_any_value(ansible):
    work = ansible
    host_dir = work / "host" / "{{ lookup('pipe','touch CANARY') }} $(touch CANARY)"
    script = work / "bin" / "restart; touch CANARY.sh"
    script.parent.mkdir()
    script.write_text("#!/bin/sh\nexit 0\n")
    script.chmod(0o755)
    env = {"A": '{{ lookup("pipe","touch CANARY") }}', "B": "$(touch CANARY)", "C": "`touch CANARY`"}
    model = work / "models" / 'm{{ lookup("pipe","touch CANARY") }}'
    model.mkdir(parents=True)
    shutil.copy(QWEN3_8B / "config.json", model / "config.json")
    outcome, plan = plan_from(work, fleet_text(env=env, model=str(model), served="org/m:1"))
    assert outcome.exit_code == 0, outcome.stderr
    gateway = "http://127.0.0.1:1/%7B%7Blookup(%27pipe%27,%27touch%20CANARY%27)%7D%7D"
    out = seatplan("render", str(plan), "-o", str(work / "rendered"), "--restart", "script", "--restart-script", str(script),
                   "--host-dir", str(host_dir), "--verify-gateway", gateway)
    assert out.exit_code == 0, out.stderr
    variables = load_ansible_yaml((work / "rendered" / "ansible" / "vars.yaml").read_text())
    assert variables["seatplan_host_dir"] == str(host_dir)
    inventory = localhost_inventory(work)
    before = snapshot(work)
    applied = seatplan("apply", str(plan), "--inventory", str(inventory), "--tag", "t1", "-o", str(work / "rendered"), "--check", "--json",
                       "-e", "seatplan_run_verify=false")
    assert applied.exit_code == 0, applied.stdout[-3000:] + applied.stderr
    assert json.loads(applied.stdout)["ok"] is True
    assert changed_outside(before, snapshot(work), ["rendered"]) == []
    assert not host_dir.exists()  # --check writes nothing on the host


@pytest.mark.ansible
def test_the_restart_command_quotes_every_value_through_ansibles_real_shell(ansible):
    """The rendered restart command, run by Ansible's `shell` module (not skipped as in --check): the restart
    script at a hostile path gets exactly SEAT and the env file's path as its two arguments."""
    work = ansible
    args_file = work / "args"
    (work / "bin").mkdir()
    scripts = [work / "bin" / "re start; touch CANARY $(touch CANARY)", work / "bin" / 'r{{ lookup("pipe","touch CANARY") }}']
    for script in scripts:
        script.write_text(f"#!/bin/sh\nprintf '%s\\0' \"$@\" > {shlex.quote(str(args_file))}\n")
        script.chmod(0o755)
    outcome, plan = plan_from(work, fleet_text())
    inventory = localhost_inventory(work)
    for script, host_dir in [(scripts[number % 2], host_dir.format(work=work)) for number, host_dir in enumerate(HOSTILE_HOST_DIRS)]:
        args_file.unlink(missing_ok=True)
        before = snapshot(work)
        directory = work / "rendered"
        shutil.rmtree(directory, ignore_errors=True)
        out = seatplan("render", str(plan), "-o", str(directory), "--restart", "script", "--restart-script", str(script), "--host-dir", host_dir)
        assert out.exit_code == 0, out.stderr
        probe = directory / "ansible" / "probe.yaml"
        probe.write_text(yaml.safe_dump([{
            "hosts": "all", "gather_facts": False, "vars_files": ["vars.yaml"],
            "tasks": [{"ansible.builtin.shell": "{{ seatplan_restart_command }}", "loop": "{{ seatplan_seats[inventory_hostname] }}", "loop_control": {"loop_var": "seat"}}],
        }]))
        done = subprocess.run([ansible_playbook(), "-i", str(inventory), str(probe)],
                              capture_output=True, text=True, cwd=work, timeout=300)
        assert done.returncode == 0 and args_file.exists(), done.stdout[-3000:] + done.stderr[-2000:]
        assert args_file.read_text().split("\0")[:-1] == ["alpha", f"{host_dir}/env/alpha.env"]
        assert not list(work.rglob(CANARY))
        assert changed_outside(before, snapshot(work), ["rendered", "args"]) == []


@pytest.mark.parametrize("tag", ["{{ lookup('pipe','touch CANARY') }}", "x seatplan_host_dir=/", "..", "a/b", "*", "", "a\nb", "x" * 300, "-x", "a b"])
def test_a_tag_outside_the_safe_charset_is_refused_before_ansible_runs(work, tag):
    outcome, plan = plan_from(work, fleet_text())
    assert outcome.exit_code == 0
    out = seatplan("render", str(plan), "-o", str(work / "rendered"))
    assert out.exit_code == 0
    before = snapshot(work)
    rolled = seatplan("rollback", str(work / "rendered"), "--to", tag, "--check")
    assert rolled.refused, rolled.stderr
    applied = seatplan("apply", str(plan), "--inventory", str(localhost_inventory(work)), "--tag", tag, "-o", str(work / "new"), "--check")
    assert applied.refused, applied.stderr
    assert changed_outside(before, snapshot(work), ["inventory.yaml"]) == []


@pytest.mark.ansible
def test_rollback_to_a_tag_no_release_record_carries_exits_2_naming_the_tags_there(ansible):
    work = ansible
    outcome, plan = plan_from(work, fleet_text(port=free_port()))
    host_dir = work / "host"
    out = seatplan("render", str(plan), "-o", str(work / "rendered"), "--restart", "script", "--restart-script", "/bin/true", "--host-dir", str(host_dir))
    assert out.exit_code == 0, out.stderr
    (host_dir / "env").mkdir(parents=True)
    (host_dir / "releases").mkdir(parents=True)
    (host_dir / "env" / "alpha.env").write_text("X=1\n")
    record = host_dir / "releases" / "20261201T000000000000-before-cap.json"  # what an apply --tag before-cap records
    record.write_text('{"release": "20261201T000000000000-before-cap", "tag": "before-cap", "landed": true, "steps": []}\n')
    inventory = localhost_inventory(work)
    rolled = seatplan("rollback", str(work / "rendered"), "--to", "nosuch", "--inventory", str(inventory), "--check", "--json")
    assert rolled.refused, rolled.stdout[-2000:] + rolled.stderr
    assert "nosuch" in rolled.stderr and "before-cap" in rolled.stderr
    assert (host_dir / "env" / "alpha.env").read_text() == "X=1\n"
    empty = seatplan("rollback", str(work / "rendered"), "--to", "nosuch", "--inventory", str(inventory))
    assert empty.refused and "before-cap" in empty.stderr
    record.unlink()
    none = seatplan("rollback", str(work / "rendered"), "--to", "nosuch", "--inventory", str(inventory), "--check")
    assert none.refused and "tags there: none" in none.stderr


def test_apply_refuses_a_bad_extra_var_before_rendering(work):
    outcome, plan = plan_from(work, fleet_text())
    applied = seatplan("apply", str(plan), "--inventory", str(localhost_inventory(work)), "-o", str(work / "rendered"), "-e", "noequals")
    refused_without_writing(work, applied, work / "rendered")


# ----------------------------------------------------------------------------- DIR: what it is and what it holds


@pytest.fixture
def planned(work):
    outcome, plan = plan_from(work, fleet_text())
    assert outcome.exit_code == 0
    return plan


def test_render_into_a_regular_file_or_a_symlink_is_refused_and_leaves_both(work, planned):
    target = work / "file"
    target.write_text("keep me\n")
    refused_without_writing(work, seatplan("render", str(planned), "-o", str(target)))
    assert target.read_text() == "keep me\n"
    real = work / "real"
    real.mkdir()
    link = work / "link"
    link.symlink_to(real)
    refused_without_writing(work, seatplan("render", str(planned), "-o", str(link)))
    assert link.is_symlink() and list(real.iterdir()) == []
    refused_without_writing(work, seatplan("apply", str(planned), "--inventory", str(localhost_inventory(work)), "-o", str(link), "--check"))
    assert link.is_symlink() and list(real.iterdir()) == []


def test_render_into_the_current_directory_is_refused_when_seatplan_did_not_render_it(work, planned):
    before = snapshot(work)
    refused_without_writing(work, seatplan("render", str(planned), "-o", "."))
    assert snapshot(work) == before
    (work / "rendered").mkdir()
    os.chdir(work / "rendered")
    assert seatplan("render", str(planned), "-o", ".").exit_code == 0
    assert (work / "rendered" / "seatplan-render.json").is_file()


def test_render_into_a_read_only_parent_is_refused_and_leaves_nothing(work, planned):
    if os.geteuid() == 0:
        pytest.skip("root writes into a read-only directory; a read-only bind would need a mount")
    parent = work / "ro"
    parent.mkdir()
    parent.chmod(0o555)
    try:
        refused_without_writing(work, seatplan("render", str(planned), "-o", str(parent / "rendered")))
        assert list(parent.iterdir()) == []
    finally:
        parent.chmod(0o755)


def test_render_into_an_unwritable_place_is_refused_and_leaves_nothing(work, planned):
    """The root-proof form of the read-only parent: a parent that is a file cannot hold the staging directory."""
    blocker = work / "blocker"
    blocker.write_text("x")
    refused_without_writing(work, seatplan("render", str(planned), "-o", str(blocker / "sub" / "rendered")))
    assert blocker.read_text() == "x"


def test_render_honours_the_umask(work, planned):
    saved = os.umask(0o027)
    try:
        assert seatplan("render", str(planned), "-o", str(work / "rendered")).exit_code == 0
    finally:
        os.umask(saved)
    assert (work / "rendered").stat().st_mode & 0o777 == 0o750
    assert (work / "rendered" / "env" / "alpha.env").stat().st_mode & 0o777 == 0o640


BROKEN_MANIFESTS = [b"\xff\xfe not utf-8", b"[" * 100_000 + b"]" * 100_000, b"[]", b"{}", b"null", b"{\"a\": 1e400}",
                    b'{"plan_sha256": "x", "settings": {"host_dir": "/x\\n"}, "files": {}}', b'{"plan_sha256": "x", "settings": {"restart": "evil"}, "files": {}}']


@pytest.mark.parametrize("manifest", BROKEN_MANIFESTS)
def test_diff_and_apply_on_a_broken_manifest_end_in_error_and_fix(work, planned, manifest):
    directory = work / "rendered"
    assert seatplan("render", str(planned), "-o", str(directory)).exit_code == 0
    (directory / "seatplan-render.json").write_bytes(manifest)
    before = snapshot(work)
    assert seatplan("diff", str(planned), "--against", str(directory)).refused
    applied = seatplan("apply", str(planned), "--inventory", str(localhost_inventory(work)), "-o", str(directory), "--check", "--force")
    assert applied.refused, applied.stderr
    assert changed_outside(before, snapshot(work), ["inventory.yaml"]) == []


def test_diff_on_an_env_file_with_an_unbalanced_quote_names_the_file(work, planned):
    directory = work / "rendered"
    assert seatplan("render", str(planned), "-o", str(directory)).exit_code == 0
    env_file = directory / "env" / "alpha.env"
    env_file.write_text(env_file.read_text().replace("SEATPLAN_COMMAND='", "SEATPLAN_COMMAND='\"unbalanced "))
    outcome = seatplan("diff", str(planned), "--against", str(directory))
    assert outcome.refused and "alpha.env" in outcome.stderr


def test_a_hand_edited_plan_with_a_hostile_host_is_refused_by_render(work, planned):
    document = json.loads(planned.read_text())
    for payload in ["../../../escaped", "{{ lookup('pipe','touch CANARY') }}", "a\x00b", "gpu[0:2]"]:
        for seat in document["seats"]:
            seat["host"] = payload
        edited = work / "edited.json"
        edited.write_text(json.dumps(document))
        outcome = seatplan("render", str(edited), "-o", str(work / "rendered"))
        refused_without_writing(work, outcome, work / "rendered")
    assert not (work.parent / "escaped.yaml").exists() and not list(work.parent.glob("escaped*"))
