"""One encoder per consumer of the text seatplan writes: every string that leaves seatplan goes through one.

Names (hosts, seats, served names, env keys, tags) are refused at load by ``documents.fleet`` when they hold
anything a consumer would read as syntax; the free-text values left (addresses, model paths, env values,
render flags) are encoded here for the one consumer that reads them, or refused with a fix where that
consumer has no way to carry them. docs/reliability.md lists each consumer and its rule.
"""

from __future__ import annotations

import hashlib
import ipaddress
import json
import re
import shlex
from dataclasses import dataclass
from typing import Any

import yaml

from seatplan.errors import SeatplanError

# Characters no consumer carries faithfully: C0 controls (tab aside), DEL, C1 controls (NEL is U+0085),
# and the Unicode line and paragraph separators, which Python's splitlines() and YAML read as line breaks.
_UNSAFE_CHARS = re.compile(r"[\x00-\x08\x0a-\x1f\x7f-\x9f\u2028\u2029]")
_LINE_BREAKS = "\x85\u2028\u2029"


# What every consumer accepts as a name (docs/fleet.md): an Ansible host (no range `[0:2]`, no pattern
# characters), a file name under DIR (no `/`, no leading `.`), a Compose service, a systemd instance, a
# PromQL value and a Go template left as written; env keys are POSIX names; tags go into file names.
_LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9_-]{0,61}[A-Za-z0-9])?"
HOST_NAME = re.compile(rf"(?=.{{1,253}}$){_LABEL}(?:\.{_LABEL})*")
SEAT_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,62}")
# not `os.environ/...`: LiteLLM reads a value so spelled from its environment (a key, into a model's name).
# A leading `/` is an absolute model path, the name vLLM serves an engine under when it has no --served-model-name
# (vLLM 0.32 vllm/entrypoints/launchers/api_server/app_state.py:49-52, `served_model_names = [args.model]`): argparse
# reads a word that starts with `/` as a value, and LiteLLM splits `hosted_vllm//models/x` at its first `/`.
SERVED_NAME = re.compile(r"(?!os\.environ/)(?=.{1,200}\Z)/?[A-Za-z0-9][A-Za-z0-9._:/@+-]*")
ENV_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")
TAG = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")

NAME_RULES = {
    "host name": (HOST_NAME, "letters, digits, `-` and `_` in dot-separated labels of at most 63, each starting and ending with a letter or digit (a DNS name)"),
    "seat name": (SEAT_NAME, "1 to 63 letters, digits, `.`, `_` or `-`, starting with a letter or digit"),
    "served name": (SERVED_NAME, "1 to 200 letters, digits and `. _ : / @ + -`, starting with a letter or digit (or `/` and one: "
                    "an absolute model path), not `os.environ/`"),
    "env key": (ENV_KEY, "a POSIX variable name: letters, digits and `_`, not starting with a digit, at most 128"),
    "tag": (TAG, "1 to 64 letters, digits, `.`, `_` or `-`, starting with a letter or digit"),
}


def name_problem(kind: str, name: str) -> str | None:
    """Why ``name`` is no valid ``kind`` (a key of NAME_RULES), or None when it is."""
    pattern, rule = NAME_RULES[kind]
    if pattern.fullmatch(name):
        return None
    return f"{kind} {ascii(name) if control_character(name) else repr(name)} is not {rule}"


def check_name(kind: str, name: str, where: str) -> str:
    """``name`` unchanged, or a SeatplanError saying what a ``kind`` may hold."""
    problem = name_problem(kind, name)
    if problem is not None:
        raise SeatplanError(problem, where=where, fix=f"rename it: {NAME_RULES[kind][1]}")
    return name


def address_problem(address: str) -> str | None:
    """Why ``address`` is neither a DNS name nor an IP address (engines are reached at it), or None."""
    try:
        ipaddress.ip_address(address)
        return None
    except ValueError:
        pass
    if HOST_NAME.fullmatch(address):
        return None
    shown = ascii(address) if control_character(address) else repr(address)
    return f"address {shown} is neither an IP address nor a DNS name"


def control_character(text: str) -> str | None:
    """The first character of ``text`` that no consumer carries (shown escaped), or None."""
    found = _UNSAFE_CHARS.search(text)
    return ascii(found.group())[1:-1] if found else None


def refuse_controls(text: str, what: str, fix: str) -> str:
    """``text`` unchanged, or a SeatplanError naming the control character."""
    bad = control_character(text)
    if bad is not None:
        raise SeatplanError(f"{what} holds the control character {bad}, which no file seatplan writes can carry", where=what, fix=fix)
    return text


# ----------------------------------------------------------------------------- shell


def shell_word(text: str) -> str:
    """One POSIX sh word that reads back as ``text`` exactly (single quotes; NUL and controls refused)."""
    refuse_controls(text, "a word for the shell", "remove the control character")
    return shlex.quote(text)


# ----------------------------------------------------------------------------- YAML that Ansible templates


@dataclass(frozen=True)
class Unsafe:
    """A string Ansible must take as data: written ``!unsafe '...'``, so no ``{{ }}`` or ``{% %}`` in it is ever run."""

    text: str


def ansible_unsafe(value: Any) -> Any:
    """``value`` with every string in it (keys aside) marked :class:`Unsafe`; Jinja written by seatplan stays plain."""
    if isinstance(value, str):
        return Unsafe(value)
    if isinstance(value, dict):
        return {key: ansible_unsafe(item) for key, item in value.items()}
    if isinstance(value, list):
        return [ansible_unsafe(item) for item in value]
    return value


class YamlDumper(yaml.SafeDumper):
    """seatplan's YAML: no ``&id001`` anchors (every file reads on its own), ``!unsafe`` for :class:`Unsafe`,
    and a string holding a line break YAML would misread (NEL, LS, PS) written double-quoted, where the
    emitter escapes it."""

    def ignore_aliases(self, data: object) -> bool:
        return True


def _represent_str(dumper: yaml.SafeDumper, text: str) -> yaml.ScalarNode:
    style = '"' if any(char in text for char in _LINE_BREAKS) else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", text, style=style)


def _represent_unsafe(dumper: yaml.SafeDumper, value: Unsafe) -> yaml.ScalarNode:
    style = '"' if any(char in value.text for char in _LINE_BREAKS) else "'"
    return dumper.represent_scalar("!unsafe", value.text, style=style)


YamlDumper.add_representer(str, _represent_str)
YamlDumper.add_representer(Unsafe, _represent_unsafe)


def dump_yaml(document: object) -> str:
    return yaml.dump(document, Dumper=YamlDumper, sort_keys=False, default_flow_style=False, width=1000, allow_unicode=True)


class BlockText(str):
    """A file's text inside a YAML document (a ConfigMap's config.yaml), written as a ``|`` block a reader can read;
    PyYAML falls back to a quoted scalar for text a block cannot hold (trailing spaces, a line break YAML misreads)."""


def _represent_block(dumper: yaml.SafeDumper, text: BlockText) -> yaml.ScalarNode:
    style = '"' if any(char in text for char in _LINE_BREAKS) else "|"
    return dumper.represent_scalar("tag:yaml.org,2002:str", str(text), style=style)


YamlDumper.add_representer(BlockText, _represent_block)


# ----------------------------------------------------------------------------- Compose


def compose_literal(text: str) -> str:
    """Compose interpolates ``$VAR``, ``${VAR}`` and ``${VAR:-x}`` everywhere in compose.yaml; ``$$`` is a literal ``$``."""
    return text.replace("$", "$$")


# ----------------------------------------------------------------------------- Kubernetes


# Service names are DNS-1035 labels (a letter first); every object of a seat shares its Service's name.
KUBERNETES_NAME = re.compile(r"[a-z]([-a-z0-9]{0,61}[a-z0-9])?")


def kubernetes_name(seat: str) -> str:
    """The seat's name as Kubernetes takes it: unchanged where it already is a DNS-1035 label, else lower-cased with
    every other character a `-` and 8 hex digits of the name's SHA-256 added, so `Qwen.A` and `qwen-a` stay apart."""
    if KUBERNETES_NAME.fullmatch(seat):
        return seat
    plain = re.sub(r"[^a-z0-9]+", "-", seat.lower()).strip("-") or "seat"
    stem = plain if plain[0].isalpha() else f"s-{plain}"
    return f"{stem[:53].rstrip('-')}-{hashlib.sha256(seat.encode('utf-8')).hexdigest()[:8]}"


def kubernetes_literal(text: str) -> str:
    """A container's command, args and env values expand ``$(VAR)``, and ``$$`` is one ``$`` (k8s.io/kubernetes
    third_party/forked/golang/expansion/expand.go): every ``$`` doubled reads back as written."""
    refuse_controls(text, "a value in a Kubernetes manifest", "remove the control character from the fleet file")
    return text.replace("$", "$$")


# ----------------------------------------------------------------------------- PromQL


def promql_string(text: str) -> str:
    """A PromQL string literal (double-quoted, Go escapes) that matches ``text`` exactly."""
    refuse_controls(text, "a PromQL label value", "remove the control character from the fleet file")
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


# ----------------------------------------------------------------------------- Go templates (Prometheus labels, annotations)


def go_template_text(text: str) -> str:
    """Text for a field Prometheus runs as a Go template: fleet text goes in only as a Go string constant
    ``{{ "..." }}``, which the template prints and never evaluates; seatplan's own text passes as written."""
    refuse_controls(text, "an alert label or annotation", "remove the control character from the fleet file")
    if not any(char in text for char in "{}\\\"`"):
        return text
    return "{{ " + json.dumps(text, ensure_ascii=False) + " }}"


# ----------------------------------------------------------------------------- systemd


def systemd_path(path: str, what: str) -> str:
    """An absolute path for a unit file setting: ``%`` doubled (systemd's specifiers); a control character,
    a backslash or a quote, which systemd reads as escapes or line continuations, refused."""
    refuse_controls(path, what, f"give {what} as a plain absolute path")
    if not path.startswith("/") or any(char in path for char in "\\\"' "):
        raise SeatplanError(f"{what} {path!r} is not a plain absolute path that a systemd unit can name", where=what,
                            fix=f"give {what} as an absolute path without spaces, quotes or backslashes")
    return path.replace("%", "%%")


# ----------------------------------------------------------------------------- env files (sh, systemd EnvironmentFile, Compose env_file)


def env_assignment(key: str, value: str) -> str:
    """``KEY=value`` that sh (``set -a; . FILE``), systemd's ``EnvironmentFile=`` and Compose's ``env_file`` all read
    back as ``value``; a value none of the three can carry is refused.

    - bare where ``shlex`` needs no quotes (no ``$``, ``\\``, quote, ``#`` or space);
    - else in single quotes: literal for all three (systemd src/basic/env-file.c ``SINGLE_QUOTE_VALUE``; compose-go
      dotenv/parser.go ``extractVarValue`` keeps ``\\X`` as written and does not interpolate) but for a value ending
      in a backslash: compose-go reads ``\\'`` as an escaped quote, so the value would run on into the next line;
    - such a value goes in double quotes with ``\\``, ``"`` and ``$`` escaped: systemd unescapes exactly those
      (``SHELL_NEED_ESCAPE`` = ``"\\`$``), compose-go's ``expandEscapes`` turns ``\\\\`` into ``\\`` and ``\\$``
      into ``$$`` (a literal ``$`` after interpolation), sh reads all three. A backquote cannot join them: sh would
      run it, and ``\\``` is two characters to compose-go and one to systemd.
    """
    check_name("env key", key, key)
    refuse_controls(value, f"the value of {key}", "change that value in the fleet file")
    if "'" in value:
        # sh and Compose end single quotes at the next quote, with no escape inside them that all three share
        raise SeatplanError(f"the value of {key} holds a single quote, which an env file cannot carry for all of sh, systemd and Compose",
                            where=key, fix="change that value in the fleet file")
    if value and shlex.quote(value) == value:
        return f"{key}={value}"
    if not value.endswith("\\"):
        return f"{key}='{value}'"
    if "`" in value:
        raise SeatplanError(f"the value of {key} ends in a backslash and holds a backquote, which an env file cannot carry for all of "
                            "sh, systemd and Compose", where=key, fix="change that value in the fleet file")
    escaped = value.replace("\\", "\\\\").replace('"', '\\"').replace("$", "\\$")
    return f'{key}="{escaped}"'
