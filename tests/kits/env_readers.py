"""Faithful readers of an env file, as systemd's ``EnvironmentFile=`` and Compose's ``env_file:`` read it.

Neither systemd (no PID 1 here) nor a Docker engine runs on the test machine, so each reader is a line-by-line
port of the consumer's own parser, kept to its states and branches so a test can hold the writer
(``encode.env_assignment``) to both:

- :func:`systemd_env_file`: systemd ``src/basic/env-file.c`` ``parse_env_file_internal`` (the parser under
  ``load_env_file``, which ``EnvironmentFile=`` uses), commit 0002453b101dc85db2be76703a85297a59c646a9. Constants from
  ``src/basic/string-util.h`` (``WHITESPACE`` " \\t\\n\\r", ``NEWLINE`` "\\n\\r", ``COMMENTS`` "#;") and
  ``src/basic/escape.h`` (``SHELL_NEED_ESCAPE`` "\\"\\\\`$").
- :func:`compose_env_file`: compose-go ``dotenv/parser.go`` (``parse``, ``getStatementStart``, ``locateKeyName``,
  ``extractVarValue``, ``expandEscapes``) and ``dotenv/godotenv.go`` ``expandVariables`` (``template.Substitute``:
  ``$$`` is ``$``, ``$NAME`` and ``${NAME}`` are looked up, ``${NAME:-x}``/``${NAME-x}`` give a default), commit
  e70e961c3a3acebf0800b882f1afb3dbf1fb74a2.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping

WHITESPACE = " \t\n\r"
NEWLINE = "\n\r"
COMMENTS = "#;"
SHELL_NEED_ESCAPE = "\"\\`$"


def systemd_env_file(text: str) -> dict[str, str]:
    """``parse_env_file_internal`` with ``load_env_file_push`` (the last assignment of a key wins)."""
    out: dict[str, str] = {}
    key: list[str] = []
    value: list[str] = []
    state = "PRE_KEY"
    last_key_ws: int | None = None
    last_value_ws: int | None = None

    def push() -> None:
        name = "".join(key[:last_key_ws] if last_key_ws is not None else key)
        out[name] = "".join(value)

    for c in text:
        if state == "PRE_KEY":
            if c in COMMENTS:
                state = "COMMENT"
            elif c not in WHITESPACE:
                state, last_key_ws, key = "KEY", None, [c]
        elif state == "KEY":
            if c in NEWLINE:
                state, key = "PRE_KEY", []
            elif c == "=":
                state, last_value_ws, value = "PRE_VALUE", None, []
            else:
                if c not in WHITESPACE:
                    last_key_ws = None
                elif last_key_ws is None:
                    last_key_ws = len(key)
                key.append(c)
        elif state == "PRE_VALUE":
            if c in NEWLINE:
                push()
                state, key, value = "PRE_KEY", [], []
            elif c == "'":
                state = "SINGLE_QUOTE_VALUE"
            elif c == '"':
                state = "DOUBLE_QUOTE_VALUE"
            elif c == "\\":
                state = "VALUE_ESCAPE"
            elif c not in WHITESPACE:
                state = "VALUE"
                value.append(c)
        elif state == "VALUE":
            if c in NEWLINE:
                if last_value_ws is not None:
                    del value[last_value_ws:]
                push()
                state, key, value = "PRE_KEY", [], []
            elif c == "\\":
                state, last_value_ws = "VALUE_ESCAPE", None
            else:
                if c not in WHITESPACE:
                    last_value_ws = None
                elif last_value_ws is None:
                    last_value_ws = len(value)
                value.append(c)
        elif state == "VALUE_ESCAPE":
            state = "VALUE"
            if c not in NEWLINE:  # escaped newlines are eaten up entirely
                value.append(c)
        elif state == "SINGLE_QUOTE_VALUE":
            if c == "'":
                state = "PRE_VALUE"
            else:
                value.append(c)
        elif state == "DOUBLE_QUOTE_VALUE":
            if c == '"':
                state = "PRE_VALUE"
            elif c == "\\":
                state = "DOUBLE_QUOTE_VALUE_ESCAPE"
            else:
                value.append(c)
        elif state == "DOUBLE_QUOTE_VALUE_ESCAPE":
            state = "DOUBLE_QUOTE_VALUE"
            if c in SHELL_NEED_ESCAPE:
                value.append(c)
            elif c != "\n":
                value += ["\\", c]
        elif state == "COMMENT":
            if c == "\\":
                state = "COMMENT_ESCAPE"
            elif c in NEWLINE:
                state = "PRE_KEY"
        elif state == "COMMENT_ESCAPE":
            state = "PRE_KEY" if c in NEWLINE else "COMMENT"
    if state in ("PRE_VALUE", "VALUE", "VALUE_ESCAPE", "SINGLE_QUOTE_VALUE", "DOUBLE_QUOTE_VALUE", "DOUBLE_QUOTE_VALUE_ESCAPE"):
        if state == "VALUE" and last_value_ws is not None:
            del value[last_value_ws:]
        push()
    return out


class ComposeEnvError(ValueError):
    """compose-go refuses the file (``unterminated quoted value``, a bad key character)."""


GO_SPACE = "\t\v\f\r \x85\xa0"  # parser.go isSpace: a space but not a line break
ESCAPE_SEQUENCE = re.compile(r"(\\(?:[abcfnrtv$\"\\]|0\d{0,3}))")
GO_ESCAPES = {"a": "\a", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t", "v": "\v", '"': '"', "\\": "\\"}
SUBSTITUTION = re.compile(r"\$(?:(\$)|\{([A-Za-z_][A-Za-z0-9_]*)(?:(:?-)([^}]*))?\}|([A-Za-z_][A-Za-z0-9_]*))")


def expand_variables(value: str, lookup: Callable[[str], str | None]) -> str:
    """``template.Substitute`` for the forms an env file meets: ``$$``, ``$NAME``, ``${NAME}``, ``${NAME:-x}``, ``${NAME-x}``."""
    def one(match: re.Match[str]) -> str:
        if match.group(1):
            return "$"
        name = match.group(2) or match.group(5)
        found = lookup(name)
        if match.group(3) == ":-" and not found:
            return match.group(4)
        if match.group(3) == "-" and found is None:
            return match.group(4)
        return found or ""
    return SUBSTITUTION.sub(one, value)


def expand_escapes(text: str) -> str:
    def one(match: re.Match[str]) -> str:
        sequence = match.group(0)
        if sequence == "\\$":
            return "$$"  # parser.go: `\$` becomes the template's literal-dollar `$$`
        if sequence.startswith("\\0"):
            digits = sequence[2:]
            if len(digits) == 3 and all(d in "01234567" for d in digits) and int(digits, 8) < 256:
                return chr(int(digits, 8))
            return sequence  # strconv.UnquoteChar fails: the match stays as written
        return GO_ESCAPES[sequence[1]]
    return ESCAPE_SEQUENCE.sub(one, text)


def compose_env_file(text: str, environment: Mapping[str, str] | None = None) -> dict[str, str]:
    """compose-go's ``dotenv`` parse of an ``env_file`` (``GetEnvFromFile``: the lookup is the environment, then
    the file's own earlier keys)."""
    environment = environment or {}
    out: dict[str, str] = {}

    def lookup(name: str) -> str | None:
        return environment.get(name, out.get(name))

    rest = text.removeprefix("\ufeff")
    while True:
        rest = statement_start(rest)
        if not rest:
            return out
        key, rest, inherited = locate_key_name(rest)
        if inherited:
            found = lookup(key)
            if found is not None:
                out[key] = found
            continue
        value, rest = extract_value(rest, lookup)
        out[key] = value


def statement_start(src: str) -> str:
    while True:
        stripped = src.lstrip()  # strings.IndexFunc(!unicode.IsSpace)
        if not stripped:
            return ""
        if stripped[0] != "#":
            return stripped
        newline = stripped.find("\n")
        if newline == -1:
            return ""
        src = stripped[newline:]


def locate_key_name(src: str) -> tuple[str, str, bool]:
    if re.match(r"export\s+", src):
        src = src.removeprefix("export").lstrip(GO_SPACE)
    for index, char in enumerate(src):
        if char in GO_SPACE:
            continue
        if char in "=:\n":
            key, inherited = src[:index].rstrip(), char == "\n"
            if " " in key:
                raise ComposeEnvError("key cannot contain a space")
            return key, src[index + 1 :].lstrip(GO_SPACE), inherited
        if char in "_.-[]" or char.isalnum():
            continue
        raise ComposeEnvError(f"unexpected character {char!r} in variable name")
    raise ComposeEnvError("a key without a value at the end of the file")


def extract_value(src: str, lookup: Callable[[str], str | None]) -> tuple[str, str]:
    if not src or src[0] not in "'\"":
        value, _, rest = src.partition("\n")
        value = value.split(" #", 1)[0].rstrip()
        return expand_variables(value, lookup), rest
    quote, chars, escaped = src[0], [], False
    for index in range(1, len(src)):
        char = src[index]
        if char != quote:
            if not escaped and char == "\\":
                escaped = True
                continue
            if escaped:
                escaped = False
                chars.append("\\")
            chars.append(char)
            continue
        if escaped:  # an escaped quote of the kind that opened the value
            escaped = False
            chars.append(char)
            continue
        value = "".join(chars)
        if quote == '"':
            value = expand_variables(expand_escapes(value), lookup)
        return value, src[index + 1 :]
    raise ComposeEnvError(f"unterminated quoted value {src.split(chr(10), 1)[0]}")
