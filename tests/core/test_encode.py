"""Each encoder of seatplan.encode against the real consumer it writes for, over names and values drawn by Hypothesis.

bash reads the shell words and env files, PyYAML and (tests/harden/test_hostile_ops.py) Ansible read the YAML,
promtool reads the PromQL strings and the Go-templated annotations. Compose has no engine here (no Docker
daemon), so its interpolation rule is checked against a stand-in written from the Compose specification's
"Interpolation" section: `$$` is a literal `$`, `$VAR` and `${VAR...}` are substituted.
"""

from __future__ import annotations

import re
import shutil
import subprocess

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kits.env_readers import compose_env_file, systemd_env_file
from kits.parts import require
from kits.render import load_ansible_yaml
from seatplan.encode import (
    NAME_RULES,
    Unsafe,
    address_problem,
    ansible_unsafe,
    compose_literal,
    control_character,
    dump_yaml,
    env_assignment,
    go_template_text,
    name_problem,
    promql_string,
    shell_word,
    systemd_path,
)
from seatplan.errors import SeatplanError

SLOW = settings(max_examples=30, deadline=None, suppress_health_check=list(HealthCheck))
CHEAP = settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
# What attackers reach for, mixed into otherwise random text: shell, Jinja, Go template, PromQL, Compose, YAML syntax.
PAYLOAD_PIECES = ["$(touch CANARY)", "`touch CANARY`", "; touch CANARY #", "{{ lookup('pipe', 'touch CANARY') }}", "{% raw %}", '"', "'",
                  "\\", "${HOME}", "$$", "%i", ":", "#", "\n", "\x00", "\x85", "\u2028", "\u2029", "\x1b[31m", "}}", "{{", " or vector(1)"]
texts = st.lists(st.one_of(st.text(max_size=12), st.sampled_from(PAYLOAD_PIECES)), max_size=6).map("".join)
plain_texts = texts.filter(lambda text: control_character(text) is None)


def compose_interpolate(text: str, environment: dict[str, str]) -> str:
    """The stand-in for Compose's interpolation (see the module docstring)."""
    pattern = re.compile(r"\$(?:(\$)|\{([^}]*)\}|([A-Za-z_][A-Za-z0-9_]*))")
    return pattern.sub(lambda match: "$" if match.group(1) else environment.get((match.group(2) or match.group(3)).split(":")[0].split("-")[0], ""), text)


@SLOW
@given(texts)
def test_a_shell_word_reads_back_exactly_in_bash_and_runs_nothing(tmp_path_factory, text):
    directory = tmp_path_factory.mktemp("shell")
    if control_character(text) is not None:
        with pytest.raises(SeatplanError):
            shell_word(text)
        return
    done = subprocess.run(["bash", "-c", f"printf %s {shell_word(text)}"], capture_output=True, cwd=directory, check=True)
    assert done.stdout.decode("utf-8", "surrogateescape") == text
    assert not (directory / "CANARY").exists()


@SLOW
@given(st.from_regex(NAME_RULES["env key"][0], fullmatch=True), texts)
def test_an_env_assignment_sourced_by_bash_gives_the_value_or_is_refused(tmp_path_factory, key, value):
    directory = tmp_path_factory.mktemp("env")
    # bash variables with a meaning of their own ($_ is the last argument of the previous command)
    if key in {"_", "PATH", "IFS", "BASH_ENV", "ENV", "PS4", "SHELLOPTS", "BASHOPTS"} or key.startswith("BASH"):
        key = "SEATPLAN_" + key
    try:
        line = env_assignment(key, value)
    except SeatplanError as problem:
        assert "'" in value or control_character(value) is not None or (value.endswith("\\") and "`" in value), problem
        return
    (directory / "seat.env").write_text(line + "\n", encoding="utf-8")
    done = subprocess.run(["bash", "-c", f'set -a; . ./seat.env; set +a; printf %s "${key}"'], capture_output=True, cwd=directory, check=True)
    assert done.stdout.decode("utf-8") == value
    assert not (directory / "CANARY").exists()
    # Compose and systemd, by the line-by-line ports of their env-file readers (tests/kits/env_readers.py)
    assert compose_env_file(line + "\n", {})[key] == value
    assert systemd_env_file(line + "\n")[key] == value


@CHEAP
@given(st.recursive(texts | st.integers() | st.booleans(),
                    lambda children: st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=5), children, max_size=3), max_leaves=8))
def test_unsafe_yaml_reads_back_as_written_and_every_string_is_tagged(document):
    text = dump_yaml(ansible_unsafe(document))
    assert load_ansible_yaml(text) == document
    node = yaml.compose(text, Loader=type("Plain", (yaml.SafeLoader,), {}))
    stack = [node] if node is not None else []
    while stack:
        current = stack.pop()
        if isinstance(current, yaml.MappingNode):
            stack += [value for _, value in current.value]
        elif isinstance(current, yaml.SequenceNode):
            stack += current.value
        elif isinstance(current.value, str) and current.tag not in ("tag:yaml.org,2002:int", "tag:yaml.org,2002:bool"):
            assert current.tag == "!unsafe", (current.value, text)


@CHEAP
@given(texts)
def test_seatplans_yaml_writer_keeps_nel_ls_ps_and_every_character(text):
    assert yaml.safe_load(dump_yaml({"value": text}))["value"] == text
    assert load_ansible_yaml(dump_yaml({"value": Unsafe(text)}))["value"] == text


@CHEAP
@given(texts, st.dictionaries(st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,8}", fullmatch=True), st.text(max_size=5), max_size=3))
def test_compose_literal_survives_compose_interpolation(text, environment):
    assert compose_interpolate(compose_literal(text), environment) == text


def promtool() -> str:
    found = shutil.which("promtool")
    require(found is not None, "promtool (Debian's prometheus package)")
    return found  # type: ignore[return-value]


@SLOW
@given(plain_texts.filter(lambda text: text != ""))
def test_promql_strings_and_go_template_text_match_and_print_exactly_in_promtool(tmp_path_factory, text):
    """A series whose label holds ``text``: the rule's matcher selects it (and nothing else), and the alert's
    label and annotation print ``text`` itself, not what a template in it would make."""
    tool = promtool()
    directory = tmp_path_factory.mktemp("promtool")
    rules = {"groups": [{"name": "t", "rules": [{
        "alert": "Probe",
        "expr": f"probe{{host={promql_string(text)}}} == 1",
        "labels": {"shown": go_template_text(text)},
        "annotations": {"summary": "host " + go_template_text(text) + " value {{ $value }}"},
    }]}]}
    (directory / "rules.yaml").write_text(dump_yaml(rules), encoding="utf-8")
    other = text + "x"
    tests = {"rule_files": ["rules.yaml"], "evaluation_interval": "1m", "tests": [{
        "interval": "1m",
        "input_series": [{"series": f"probe{{host={promql_string(text)}}}", "values": "1"},
                         {"series": f"probe{{host={promql_string(other)}}}", "values": "1"}],
        "alert_rule_test": [{"eval_time": "0m", "alertname": "Probe", "exp_alerts": [{
            "exp_labels": {"host": text, "shown": text},
            "exp_annotations": {"summary": f"host {text} value 1"},
        }]}],
    }]}
    (directory / "tests.yaml").write_text(dump_yaml(tests), encoding="utf-8")
    checked = subprocess.run([tool, "check", "rules", "rules.yaml"], capture_output=True, text=True, cwd=directory)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    tested = subprocess.run([tool, "test", "rules", "tests.yaml"], capture_output=True, text=True, cwd=directory)
    assert tested.returncode == 0, (text, tested.stdout + tested.stderr)


@CHEAP
@given(texts)
def test_systemd_paths_double_percent_or_refuse(text):
    path = "/" + text
    try:
        written = systemd_path(path, "--host-dir")
    except SeatplanError:
        assert control_character(path) or any(char in path for char in "\\\"' ")
        return
    assert written.replace("%%", "%") == path and "\n" not in written
    assert re.fullmatch(r"(?:[^%]|%%)*", written)


@CHEAP
@given(texts, st.sampled_from(sorted(NAME_RULES)))
def test_a_name_that_passes_holds_nothing_any_consumer_reads_as_syntax(text, kind):
    if name_problem(kind, text) is not None:
        return
    assert not set(text) & set(" \t\n\"'`$;&|<>(){}[]*?!~#%\\,=") and ".." not in text.split("/")
    # a served name may be an absolute model path (vLLM serves an engine without --served-model-name under its --model);
    # it names no file seatplan writes, and argparse and LiteLLM read a leading `/` as part of the name
    assert not text.startswith((".", "-", "/")) or (kind == "served name" and text.startswith("/") and text[1:2].isalnum())
    assert shell_word(text) == text and compose_literal(text) == text and go_template_text(text) == text


@pytest.mark.parametrize("address", ["127.0.0.1", "::1", "gpu-box", "gpu-box.lab.example", "10.0.0.7"])
def test_addresses_an_engine_is_reached_at(address):
    assert address_problem(address) is None


@pytest.mark.parametrize("address", ['127.0.0.1" or vector(1) or x{a="', "{{ lookup('pipe','id') }}", "a b", "a\nb", "gpu[0:2]", "", "http://x", "x:8000"])
def test_addresses_no_consumer_can_carry_are_refused(address):
    assert address_problem(address) is not None
