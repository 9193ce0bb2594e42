"""The engine codec: what engine.command writes, engine.parse reads back; the URLs an engine answers on.

Arguments, values and addresses are drawn at random over what fleet files carry: model paths and names,
whole numbers from 1 to 2**40, JSON overrides, switches, IPv4, IPv6 (full, compressed, zone-free) and
host names; and hostile text that must be refused rather than written into a URL or an env file.
"""

from __future__ import annotations

import ipaddress
import json
import subprocess

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from seatplan.encode import env_assignment as env_value
from seatplan.engine.command import MODULE_LAUNCHER, shell_line
from seatplan.engine.endpoint import base_url, health_url, instance_label, url_host
from seatplan.engine.parse import flag_table, parse_args, parse_command_line, parse_env, split_shell_line, yarn_override_factor
from seatplan.errors import SeatplanError

_PRINTABLE = st.characters(min_codepoint=0x20, max_codepoint=0x2FF, blacklist_characters="'", blacklist_categories=("Cc",))
_VALUE = st.one_of(
    st.integers(1, 2**40).map(str),
    st.text(_PRINTABLE, min_size=1, max_size=30).filter(lambda text: not text.startswith("-")),  # argparse takes no "-x" as a value
    st.dictionaries(st.text("abcdefgh_", min_size=1, max_size=8), st.integers(0, 10**6), max_size=3).map(json.dumps),
)
# vLLM's own one-value flags and switches (its parser's table), and flags it does not have (a newer release's): no
# vLLM flag starts with --zz, so none is an abbreviation of one
_ONE_VALUE = sorted(name for name, shape in flag_table().items() if shape.kind == "value" and name.startswith("--") and name != "--model")
_SWITCHES = sorted(name for name, shape in flag_table().items() if shape.kind == "switch" and name.startswith("--"))
_FLAG = st.one_of(st.from_regex(r"--zz[a-z0-9-]{0,18}", fullmatch=True), st.sampled_from(_ONE_VALUE), st.sampled_from(_SWITCHES))


@st.composite
def command_lines(draw: st.DrawFn) -> tuple[list[str], dict[str, str | None]]:
    """A launcher, a model and flags as engine.command builds them, with what vLLM's parser reads from them."""
    # argparse reads any word starting with "-" (not a negative number) as an option, so vLLM cannot be given such a
    # model on its command line at all (engine.parse.read_vllm_args follows vLLM's parser there)
    model = draw(st.text(_PRINTABLE, min_size=1, max_size=40).filter(lambda text: not text.startswith("-")))
    serve = draw(st.booleans())
    args = ["vllm", "serve", model] if serve else [*MODULE_LAUNCHER, "--model", model]
    expected: dict[str, str | None] = {"--model": model}
    for flag, value in draw(st.lists(st.tuples(_FLAG, st.one_of(st.none(), _VALUE)), max_size=12)):
        shape = flag_table().get(flag)
        if shape is not None:
            value = None if shape.kind == "switch" else value if value is not None else "1"
            for other in [name for name in expected if name in flag_table() and flag_table()[name].name == shape.name]:
                del expected[other]  # --x and --no-x: the last one wins
        if value is None:
            args.append(flag)
        elif draw(st.booleans()):
            args.append(f"{flag}={value}")
        else:
            args += [flag, value]
        expected[flag] = value  # the last occurrence wins, as in argparse
    return args, expected


@settings(max_examples=300, deadline=None)
@given(command_lines())
def test_a_command_line_reads_back_through_its_env_file(case):
    args, expected = case
    assert parse_args(args) == expected
    line = shell_line(args)
    assert split_shell_line(line) == args
    text = env_value("SEATPLAN_COMMAND", line) + "\n"
    assert parse_env(text) == {"SEATPLAN_COMMAND": line}
    assert parse_command_line(parse_env(text)["SEATPLAN_COMMAND"]) == expected


@settings(max_examples=25, deadline=None)
@given(command_lines())
def test_sh_reads_the_line_as_the_parser_does(case):
    """The parser is held to sh itself: the line sourced from an env file and eval'd, as the restart script does."""
    args, _ = case
    env = env_value("SEATPLAN_COMMAND", shell_line(args)) + "\n"
    script = '. /dev/stdin; eval "set -- $SEATPLAN_COMMAND"; for word in "$@"; do printf "%s\\0" "$word"; done'
    out = subprocess.run(["sh", "-c", script], input=env.encode(), capture_output=True, check=True).stdout
    assert out.decode().split("\0")[:-1] == split_shell_line(parse_env(env)["SEATPLAN_COMMAND"]) == args


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(st.from_regex(r"[A-Z_][A-Z0-9_]{0,15}", fullmatch=True), st.text(_PRINTABLE, max_size=40), max_size=8))
@example(values={"A": "`\\"})  # a draw that once failed this test: the codec refuses it, as below
def test_env_values_read_back(values):
    # A value ending in a backslash that holds a backquote has no spelling all of sh, systemd and Compose read alike
    # (encode.env_assignment): it is refused, naming the key; every other value reads back as written.
    carried = {key: value for key, value in values.items() if not (value.endswith("\\") and "`" in value)}
    for key in values.keys() - carried.keys():
        with pytest.raises(SeatplanError, match=f"the value of {key} ends in a backslash and holds a backquote"):
            env_value(key, values[key])
    text = "# header\n" + "\n".join(env_value(key, value) for key, value in carried.items()) + "\n"
    assert parse_env(text) == carried


@pytest.mark.parametrize("breaker", ["it's", "two\nlines"])
def test_env_breakers_are_refused(breaker):
    with pytest.raises(SeatplanError, match="single quote|control character"):
        env_value("X", breaker)
    with pytest.raises(SeatplanError, match="single quote|control character"):
        shell_line(["vllm", breaker])


def test_yarn_factor_from_text_or_structure():
    overrides = {"rope_parameters": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768}}
    assert yarn_override_factor(overrides) == yarn_override_factor(json.dumps(overrides)) == 4.0
    assert yarn_override_factor({"rope_scaling": {"type": "yarn", "factor": 1.0}}) is None
    assert yarn_override_factor("not json") is None


@settings(max_examples=300, deadline=None)
@given(st.ip_addresses(v=6), st.integers(1, 65535))
def test_ipv6_addresses_are_bracketed(address, port):
    text = str(address) if address.version == 6 else address.compressed
    for spelling in {text, address.exploded}:
        url = base_url(spelling, port)
        assert url == f"http://[{spelling}]:{port}"
        assert health_url(spelling, port) == f"{url}/health"
        assert instance_label(spelling, port) == f"[{spelling}]:{port}"
        host = url.removeprefix("http://").rsplit(":", 1)[0]
        assert ipaddress.ip_address(host.strip("[]")) == address


@settings(max_examples=200, deadline=None)
@given(st.one_of(st.ip_addresses(v=4).map(str), st.from_regex(r"[a-z0-9]([a-z0-9-]{0,20}[a-z0-9])?(\.[a-z0-9]{1,10}){0,3}", fullmatch=True)),
       st.one_of(st.none(), st.integers(1, 65535)))
def test_ipv4_and_names_are_as_written(address, port):
    assert base_url(address, port) == f"http://{address}:{8000 if port is None else port}"  # vLLM's default --port


@settings(max_examples=200, deadline=None)
@given(st.text(min_size=1, max_size=30).filter(lambda text: any(ch in text for ch in "/@?#[] :'\"\n$`{}")))
def test_hostile_addresses_are_refused(address):
    try:
        ipaddress.ip_address(address.strip("[]"))
    except ValueError:
        with pytest.raises(SeatplanError, match="neither an IP address nor a DNS name|only an IPv6 address goes in brackets"):
            url_host(address)
    else:
        assert url_host(address).startswith(("[", *"0123456789"))
