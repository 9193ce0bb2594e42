"""A command that starts an engine, as written in a unit, an env file or a compose service → the engine's arguments.

Operators wrap ``vllm serve`` in many ways: ``exec vllm serve …``, ``env A=1 vllm serve …``, ``sh -c "cd /x && exec
vllm serve $MODEL $ARGS"``, ``/opt/venv/bin/python -m vllm.entrypoints.openai.api_server …``. Each wrapper is taken
off as sh would run it (a ``-c`` script split into words with its variables filled in from the service's
environment), so the words that reach vLLM's parser are the ones it would see; what cannot be read so (a
loop, a script file) starts no engine adopt can read, and the caller says so.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field

from seatplan.engine.parse import launcher_args
from seatplan.errors import SeatplanError

SHELLS = ("sh", "bash", "dash", "zsh", "ash")
_MAX_WRAPPERS = 4  # sh -c "exec env … bash -c …" deeper than this is no engine start anyone writes
_SHELL_VARIABLE = re.compile(r"(?<!\\)\$(?:\{(?P<braced>[A-Za-z_][A-Za-z0-9_]*)(?:(?P<op>:?[-=+?])(?P<word>[^}]*))?\}|(?P<bare>[A-Za-z_][A-Za-z0-9_]*))")
_OPERATORS = ("&&", "||", ";", "|", "&")


def referenced(text: str) -> set[str]:
    """The variables a command line names (``$VAR``, ``${VAR}``, ``${VAR:-x}``): built into the command, not the engine's environment."""
    return set(re.findall(r"\$\{?([A-Za-z_][A-Za-z0-9_]*)", text))


def split_command(text: str, where: str) -> list[str]:
    try:
        return shlex.split(text)
    except ValueError as problem:
        raise SeatplanError(f"the engine command cannot be read as shell words ({problem})", where=where,
                            fix="close the quote in that command") from None


def shell_expanded(script: str, env: Mapping[str, str]) -> str:
    """``$VAR``, ``${VAR}`` and ``${VAR:-default}`` filled in as sh would (outside single quotes); an unset one is empty.
    A command substitution (``$(…)``, backticks) is run by the shell at start, so what it prints is not known here:
    it becomes the one word :data:`SUBSTITUTED`, which adopt writes as TODO (never the command inside)."""
    out: list[str] = []
    quoted = False
    for part in re.split(r"('[^']*')", script):
        if part.startswith("'") and part.endswith("'") and len(part) >= 2 and not quoted:
            out.append(part)
            continue
        out.append(_SHELL_VARIABLE.sub(lambda match: _fill(match, env), _substitutions_marked(part)))
        quoted = quoted ^ (part.count('"') % 2 == 1)
    return "".join(out)


SUBSTITUTED = "$(...)"


def _substitutions_marked(text: str) -> str:
    """Each ``$(…)`` (nested parentheses counted, ``$((…))`` too) and each ```…``` replaced by :data:`SUBSTITUTED`; an
    unclosed one runs to the end, as sh would read it."""
    out: list[str] = []
    position = 0
    while position < len(text):
        if text.startswith("$(", position):
            depth, position = 1, position + 2
            while position < len(text) and depth:
                depth += {"(": 1, ")": -1}.get(text[position], 0)
                position += 1
            out.append(SUBSTITUTED)
        elif text[position] == "`" and (position == 0 or text[position - 1] != "\\"):
            end = text.find("`", position + 1)
            position = len(text) if end < 0 else end + 1
            out.append(SUBSTITUTED)
        else:
            out.append(text[position])
            position += 1
    return "".join(out)


def _fill(match: re.Match[str], env: Mapping[str, str]) -> str:
    name = match["braced"] or match["bare"]
    value = env.get(name)
    op, word = match["op"], match["word"] or ""
    if op in (":-", ":=") and not value:
        return word
    if op in ("-", "=") and value is None:
        return word
    if op == ":+":
        return word if value else ""
    if op == "+":
        return word if value is not None else ""
    return value or ""


def _last_command(words: list[str]) -> list[str]:
    """The last simple command of ``cd /x && exec vllm serve …`` (the one that holds the launcher, else the last)."""
    commands: list[list[str]] = [[]]
    for word in words:
        if word in _OPERATORS:
            commands.append([])
        else:
            commands[-1].append(word)
    with_launcher = [command for command in commands if launcher_args(unwrapped(command, {}, depth=_MAX_WRAPPERS)) is not None]
    return with_launcher[-1] if with_launcher else commands[-1]


def unwrapped(words: list[str], env: Mapping[str, str], depth: int = 0) -> list[str]:
    """The command with ``exec``, ``env A=1`` and ``sh -c SCRIPT`` taken off (the script's variables from ``env``)."""
    words = list(words)
    while words and depth < _MAX_WRAPPERS:
        program = words[0].rsplit("/", 1)[-1]
        if program in ("exec", "nohup"):
            words = words[1:]
        elif program == "env":
            words = words[1:]
            while words and (words[0].startswith("-") or re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", words[0])):
                words = words[1:]
        elif program in SHELLS:
            script = _script(words[1:])
            if script is None:
                return words
            try:
                inner = _shell_words(shell_expanded(script, env))
            except ValueError:
                return words
            words = _last_command(inner)
            depth += 1
        else:
            return words
    return words


def _script(args: list[str]) -> str | None:
    """The SCRIPT of ``sh [-e -x -l …] -c SCRIPT`` (a combined ``-lc``/``-ec`` too); None if it runs a script file."""
    for position, word in enumerate(args):
        if word.startswith("-") and not word.startswith("--") and "c" in word[1:]:
            return args[position + 1] if position + 1 < len(args) else None
        if not word.startswith("-"):
            return None
    return None


def _shell_words(script: str) -> list[str]:
    lexer = shlex.shlex(script, posix=True, punctuation_chars="&|;")
    lexer.whitespace_split = True
    return list(lexer)


def engine_words(words: list[str], env: Mapping[str, str]) -> list[str] | None:
    """The engine's arguments (after ``vllm serve`` or the module launcher), wrappers taken off; None if it starts none."""
    return launcher_args(unwrapped(words, env))


def sourced_files(words: list[str], env: Mapping[str, str]) -> list[str]:
    """The files a ``sh -c`` script sources before it starts the engine (``bash -c 'source /etc/vllm/x.env && exec vllm
    serve $MODEL $ARGS'``, ``. FILE`` alike), in order: their variables are the script's, as an ``EnvironmentFile=``'s are."""
    words = list(words)
    while words and words[0].rsplit("/", 1)[-1] in ("exec", "nohup"):
        words = words[1:]
    if not words or words[0].rsplit("/", 1)[-1] not in SHELLS:
        return []
    script = _script(words[1:])
    if script is None:
        return []
    try:
        inner = _shell_words(shell_expanded(script, env))
    except ValueError:
        return []
    starts = [0] + [position + 1 for position, word in enumerate(inner) if word in _OPERATORS]
    return [inner[start + 1] for start in starts if start + 1 < len(inner) and inner[start] in ("source", ".")]


def engine_launcher(words: list[str], env: Mapping[str, str]) -> list[str] | None:
    """The words that start vLLM's server before its arguments (``/opt/vllm/bin/vllm serve``), wrappers taken off; None if it starts none."""
    bare = unwrapped(words, env)
    args = launcher_args(bare)
    return None if args is None else bare[: len(bare) - len(args)]


# `docker run` / `podman run` options that take a value (the Docker CLI reference, "docker container run"); every other
# option before the image is a switch. The image's entrypoint is vLLM's server where the image is vLLM's.
_DOCKER_VALUED = {"-p", "--publish", "-e", "--env", "--env-file", "-v", "--volume", "--name", "--gpus", "--ipc", "--shm-size",
                  "--network", "--net", "-w", "--workdir", "--entrypoint", "--runtime", "--restart", "--mount", "--device", "-u",
                  "--user", "-l", "--label", "--cpus", "--memory", "-m", "--ulimit", "--log-driver", "--log-opt", "--add-host",
                  "--hostname", "-h", "--pull", "--platform", "--cidfile", "--security-opt", "--cap-add", "--cap-drop",
                  "--group-add", "--tmpfs", "--cpuset-cpus", "--pid", "--userns", "--stop-signal", "--stop-timeout"}


@dataclass
class DockerRun:
    """A ``docker run … IMAGE ARGS`` that starts vLLM's image: the engine's arguments and what the run names around them."""

    args: list[str]
    image: str
    gpus: list[str] | None = None  # --gpus device=0,1 (None: all, a count, or none named)
    ports: list[str] = field(default_factory=list)  # -p values as written
    env: dict[str, str] = field(default_factory=dict)  # -e KEY=VALUE
    env_files: list[str] = field(default_factory=list)


def docker_run(words: list[str]) -> DockerRun | None:
    """``docker run`` (or podman) of vLLM's image, with the server as its entrypoint; None for anything else."""
    words = unwrapped(words, {})
    if len(words) < 3 or words[0].rsplit("/", 1)[-1] not in ("docker", "podman") or words[1] != "run":
        return None
    options: list[tuple[str, str]] = []
    position = 2
    while position < len(words) and words[position].startswith("-"):
        name, equals, value = words[position].partition("=")
        if not equals and name in _DOCKER_VALUED and position + 1 < len(words):
            value, position = words[position + 1], position + 1
        options.append((name, value))
        position += 1
    if position >= len(words) or "vllm" not in words[position] or any(name == "--entrypoint" for name, _ in options):
        return None
    found = DockerRun(args=words[position + 1 :], image=words[position])
    for name, value in options:
        if name == "--gpus":
            device = value.strip("'\"")
            found.gpus = device.removeprefix("device=").split(",") if device.startswith("device=") else None
        elif name in ("-p", "--publish"):
            found.ports.append(value)
        elif name in ("-e", "--env") and "=" in value:
            key, _, item = value.partition("=")
            found.env[key] = item
        elif name == "--env-file":
            found.env_files.append(value)
    return found
