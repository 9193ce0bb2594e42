"""The one reader of an engine's command line and env file: adopt reads hand-written commands with it, render
diffs and verify and upgrade-check read back what ``engine.command`` wrote.

vLLM's own parser (vLLM 0.32 ``vllm/utils/argparse_utils.py:119`` ``FlexibleArgumentParser``, an ``argparse``
parser built by ``vllm/entrypoints/launchers/cli_args.py:421`` ``make_arg_parser``) is followed rule by rule:
``--flag value`` and ``--flag=value`` alike, the last occurrence wins, ``_`` and ``-`` alike in a flag's name,
``-O3`` for ``--optimization-level 3``, a unique prefix of a flag for the flag (argparse's ``allow_abbrev``,
which vLLM leaves on), switches that take no value (``--enforce-eager``, ``--no-enable-prefix-caching``), flags
that take several values (``--lora-modules a=x b=y``, ``--served-model-name a b``), and vLLM's value syntax for
token counts and bytes (:func:`human_readable_int`). Which flag takes how many values, and which are counts,
is vLLM 0.32's own table (``vllm_flags.json``, dumped from its parser by ``tests/engine/vllm_flag_table.py``
and compared with it by ``tests/engine/test_vllm_args.py``). A flag the table lacks (an older or newer
release's) takes the next word when that word is no flag, as argparse would read it.
"""

from __future__ import annotations

import bisect
import functools
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

from seatplan.errors import SeatplanError

MODEL_KEY = "model"  # the positional model of `vllm serve MODEL`, under the name --model gives it
# The words that end a launcher (`vllm serve`, `python -m vllm.entrypoints.openai.api_server`): what follows is the engine's arguments.
LAUNCHER_ENDS = ("serve", "vllm.entrypoints.openai.api_server")
# argparse takes a word that looks like a negative number as a value when the parser has no such option (vLLM's has none).
_NEGATIVE_NUMBER = re.compile(r"^-\d+$|^-\d*\.\d+$")
_WHOLE = re.compile(r"[+-]?[0-9]+(?:_[0-9]+)*", re.ASCII)  # int()'s syntax, ASCII digits only (foreign text)
_HUMAN = re.compile(r"([0-9]+(?:\.[0-9]+)?)([kKmMgGtT])", re.ASCII)
_DECIMAL = {"k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12}
_BINARY = {"K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}
MAX_WHOLE_DIGITS = 30  # no count or size vLLM takes has more; a longer one is a hostile or broken file


@dataclass(frozen=True)
class FlagShape:
    """One option of vLLM's server parser: the long name it is known by, how many values it takes, and whether
    its value is a count read by ``human_readable_int`` (``human``), also ``-1``/``auto`` (``human_or_auto``), or ``int``."""

    name: str
    kind: str  # switch | value | optional | some (nargs="+") | any (nargs="*")
    number: str | None


@functools.cache
def flag_table() -> dict[str, FlagShape]:
    """vLLM 0.32's options (``vllm_flags.json``), each option string → its shape."""
    text = resources.files("seatplan.engine").joinpath("vllm_flags.json").read_text(encoding="utf-8")
    return {option: FlagShape(*shape) for option, shape in json.loads(text)["flags"].items()}


@functools.cache
def _sorted_options() -> tuple[str, ...]:
    """The table's option strings in order: the options a prefix names are one run of them (found by bisection,
    so a command of many flags is read in time linear in its length, not the table's size per flag)."""
    return tuple(sorted(flag_table()))


@functools.cache
def _table_position() -> dict[str, int]:
    return {option: position for position, option in enumerate(flag_table())}


def _starting_with(prefix: str) -> list[str]:
    """The options ``prefix`` begins, in the table's order (the first is the spelling kept)."""
    options = _sorted_options()
    start = bisect.bisect_left(options, prefix)
    end = start
    while end < len(options) and options[end].startswith(prefix):
        end += 1
    return sorted(options[start:end], key=_table_position().__getitem__)


def human_readable_int(text: str) -> int:
    """vLLM's reader of token counts and byte sizes (vLLM 0.32 ``vllm/utils/argparse_utils.py:29``): ``32k`` is
    32,000 and ``32K`` 32,768 (decimal ``k m g t``, binary ``K M G T``), ``25.6k`` is 25,600, a decimal with a
    binary suffix is refused, anything else is ``int()``'s. Only ASCII digits (vLLM's ``regex`` ``\\d`` also takes
    other scripts' digits, which no operator means): a ``ValueError`` saying why otherwise."""
    value = text.strip()
    match = _HUMAN.fullmatch(value)
    if match:
        number, suffix = match.groups()
        if len(number) > MAX_WHOLE_DIGITS:
            raise ValueError(f"{value[:40]!r} has more than {MAX_WHOLE_DIGITS} digits")
        if suffix in _DECIMAL:
            return int(float(number) * _DECIMAL[suffix])  # vLLM's own arithmetic, float rounding included
        if "." in number:
            raise ValueError(f"{value!r}: decimals are not allowed with the binary suffix {suffix} (vLLM refuses it; "
                             f"{number}{suffix.lower()} is the decimal one)")
        return int(number) * _BINARY[suffix]
    return strict_whole(value)


def strict_whole(text: str) -> int:
    """``int()`` of a whole number as vLLM's ``type=int`` reads it (sign, ``1_000``), ASCII digits only, bounded."""
    value = text.strip()
    if not _WHOLE.fullmatch(value) or len(value) > MAX_WHOLE_DIGITS:
        raise ValueError(f"{value[:40]!r} is not a whole number")
    return int(value)


@dataclass
class VllmArgs:
    """A vLLM command line as vLLM's parser reads it.

    ``flags``: each flag under its long name as vLLM knows it (an abbreviation, ``_`` or a short form spelled
    out), the last occurrence's value: a string, a list for a flag of several values, None for a switch.
    ``written``: each occurrence in order, spelled out (``[flag, *values]``), for arguments kept as given."""

    model: str | None = None
    flags: dict[str, str | list[str] | None] = field(default_factory=dict)
    written: list[list[str]] = field(default_factory=list)
    unknown: list[str] = field(default_factory=list)  # flags vLLM 0.32's parser does not have
    problems: list[str] = field(default_factory=list)  # what vLLM's parser would refuse
    # The key in ``flags`` each option's long name is set under (--x and --no-x share one): found without
    # scanning ``flags``, which made a command of n flags take n² steps.
    _set_as: dict[str, str] = field(default_factory=dict, repr=False, compare=False)

    def value(self, flag: str) -> str | None:
        """A one-value flag's value (a list's last, as a flag of several values read as one)."""
        found = self.flags.get(flag)
        return found[-1] if isinstance(found, list) and found else found if isinstance(found, str) else None

    def whole(self, flag: str) -> int | None:
        """A count flag's value read as vLLM reads it (``--max-model-len 32K`` is 32,768); None when not given.
        A value vLLM would refuse raises ``ValueError`` naming the flag."""
        text = self.value(flag)
        if text is None:
            return None
        shape = flag_table().get(flag)
        number = shape.number if shape else None
        try:
            if number == "human_or_auto" and (text.strip() == "-1" or text.strip().lower() == "auto"):
                return -1
            return human_readable_int(text) if number in ("human", "human_or_auto") else strict_whole(text)
        except ValueError as problem:
            raise ValueError(f"{flag} {problem}") from None


def _spelled(words: Sequence[str]) -> list[str]:
    """FlexibleArgumentParser.parse_args' rewriting: ``_`` → ``-`` in a ``--`` name (up to its first ``.``), ``-O3``,
    ``-O=3`` and ``-O 3`` → ``--optimization-level 3`` (vLLM 0.32 vllm/utils/argparse_utils.py:344-371)."""
    out: list[str] = []
    for position, word in enumerate(words):
        if word.startswith("--"):
            key, equals, value = word.partition("=")
            head, dot, tail = key[2:].partition(".")
            out.append("--" + head.replace("_", "-") + dot + tail + equals + value)
        elif word.startswith("-O") and word != "-O":
            out += ["--optimization-level", word[3:] if word[2] == "=" else word[2:]]
        elif word == "-O" and position + 1 < len(words) and words[position + 1] in {"0", "1", "2", "3"}:
            out.append("--optimization-level")
        else:
            out.append(word)
    return out


def _is_flag(word: str) -> bool:
    """argparse's test (Python 3.11 ``_parse_optional``): a word starting with ``-`` is a flag unless it is ``-``,
    a negative number, or holds a space and names no flag."""
    if not word.startswith("-") or word == "-":
        return False
    if word in flag_table() or word.split("=", 1)[0] in flag_table() or (word.startswith("--") and "=" in word):
        return True  # (argparse reads an unknown --x=a b as a positional; vLLM refuses it either way, a flag it is here)
    return not _NEGATIVE_NUMBER.match(word) and " " not in word


def _resolve(word: str) -> tuple[str | None, str | None, str]:
    """A flag word → (the option string it names, its ``=`` value, why it names none)."""
    table = flag_table()
    if word in table:
        return word, None, ""
    option, equals, explicit = word.partition("=")
    if equals and option in table:
        return option, explicit, ""
    prefix = option if word.startswith("--") else word
    matches = _starting_with(prefix)
    if not word.startswith("--"):
        found = set(_starting_with(word)) | ({word[:2]} if word[:2] in table else set())
        matches = sorted((name for name in found if not name.startswith("--")), key=_table_position().__getitem__)
        explicit_short = word[2:] if word[:2] in table else None
        if len(matches) == 1:
            return matches[0], explicit_short if matches[0] == word[:2] else None, ""
    elif len(matches) == 1:
        return matches[0], explicit if equals else None, ""
    if len({table[name].name for name in matches}) > 1:
        return None, None, f"{option[:60]!r} is ambiguous (it could be {', '.join(sorted(matches)[:4])}): vLLM refuses it"
    if matches:  # several spellings of one option (--x and --no-x share no prefix; -dph and --data-... do not either)
        return matches[0], explicit if equals else None, ""
    return None, explicit if equals else None, ""


def read_vllm_args(words: Sequence[str]) -> VllmArgs:
    """The engine's arguments (the words after ``vllm serve`` or the module launcher) as vLLM 0.32's parser reads them."""
    result = VllmArgs()
    table = flag_table()
    spelled = _spelled(words)
    plain = [False] * len(spelled)  # words after "--" are values, never flags
    for position, word in enumerate(spelled):
        if word == "--":
            plain[position + 1 :] = [True] * (len(spelled) - position - 1)
            break
    position = 0
    while position < len(spelled):
        word = spelled[position]
        position += 1
        if word == "--" and not plain[position - 1]:
            continue
        if plain[position - 1] or not _is_flag(word):
            if result.model is None and "--model" not in result.flags:
                result.model = word
            else:
                result.problems.append(f"{word[:60]!r} is an argument vLLM's parser does not take (unrecognized arguments)")
            continue
        option, explicit, why = _resolve(word)
        if why:
            result.problems.append(why)
            continue
        shape = table.get(option) if option else None
        flag = option if option and option.startswith("--") else shape.name if shape else word.split("=", 1)[0]
        if shape is None:
            if flag.split(".", 1)[0] not in table:
                result.unknown.append(flag)
            shape = FlagShape(flag, "value" if explicit is not None or (position < len(spelled) and not _is_flag(spelled[position])) else "switch", None)
        values: list[str] = []
        if explicit is not None:
            if shape.kind == "switch":
                result.problems.append(f"{flag} takes no value ({word[:60]!r}): vLLM refuses it")
                continue
            values = [explicit]
        else:
            while position < len(spelled) and (plain[position] or not _is_flag(spelled[position])) and (
                    shape.kind in ("some", "any") or (shape.kind in ("value", "optional") and not values)):
                values.append(spelled[position])
                position += 1
            if shape.kind in ("value", "some") and not values:
                result.problems.append(f"{flag} expects {'a value' if shape.kind == 'value' else 'at least one value'}: vLLM refuses it")
                continue
        _set(result, flag, shape, values)
    if "--model" in result.flags:
        result.model = result.value("--model")
    return result


def _set(result: VllmArgs, flag: str, shape: FlagShape, values: list[str]) -> None:
    other = result._set_as.pop(shape.name, None)
    if other is not None:
        del result.flags[other]  # --x and --no-x set one value: the last one given wins
    result._set_as[shape.name] = flag
    result.flags[flag] = (values if shape.kind in ("some", "any") else values[0]) if values else None
    result.written.append([flag, *values])


def config_file_args(config: Mapping[str, Any]) -> list[str]:
    """A ``--config FILE.yaml`` mapping as the words vLLM puts in its place (vLLM 0.32 vllm/utils/argparse_utils.py:568
    ``load_config_file``): ``key: value`` → ``--key value``; true → ``--key``; false → ``--no-key`` where that switch
    exists, else nothing; a list → ``--key`` and each item; a mapping → ``--key`` and its JSON."""
    words: list[str] = []
    for key, value in config.items():
        if isinstance(value, bool):
            if value:
                words.append(f"--{key}")
            elif f"--no-{key}" in flag_table():
                words.append(f"--no-{key}")
        elif isinstance(value, list):
            if value:
                words += [f"--{key}", *(str(item) for item in value)]
        elif isinstance(value, dict):
            words += [f"--{key}", json.dumps(value)]
        else:
            words += [f"--{key}", str(value)]
    return words


def with_config(args: Sequence[str], config_words: Sequence[str]) -> list[str]:
    """The engine's arguments with ``--config FILE`` replaced by the file's words where vLLM puts them (vLLM 0.32
    vllm/utils/argparse_utils.py:510 ``_pull_args_from_config``): after the positional model, before the other
    flags, so a flag on the command line wins over the file."""
    words = list(args)
    index = words.index("--config")
    rest = words[:index] + words[index + 2 :]
    if rest and not rest[0].startswith("-"):
        return [rest[0], *config_words, *rest[1:]]
    return [*config_words, *rest]


def launcher_args(words: Sequence[str]) -> list[str] | None:
    """The words after the launcher (``vllm serve``, ``python -m vllm.entrypoints.openai.api_server``); None if none is there."""
    for position, word in enumerate(words):
        if word in LAUNCHER_ENDS and (word != "serve" or (position and words[position - 1].endswith("vllm"))):
            return list(words[position + 1 :])
    return None


def parse_args(args: Sequence[str]) -> dict[str, str | None]:
    """``--flag value`` pairs of a command (from after its launcher, when it has one), each flag under vLLM's long
    name, the last one winning; a switch maps to None, a flag of several values to them joined by a space. The
    model (positional or ``--model``) is under ``--model``, as vLLM reads it."""
    after = launcher_args(args)
    read = read_vllm_args(after if after is not None else args)
    flags: dict[str, str | None] = {"--model": read.model} if read.model is not None else {}
    for flag, value in read.flags.items():
        if flag != "--model":
            flags[flag] = " ".join(value) if isinstance(value, list) else value
    return flags


def parse_command_line(line: str) -> dict[str, str | None]:
    """A command written as one shell line (an env file's ``SEATPLAN_COMMAND``) read back into its flags."""
    return parse_args(split_shell_line(line))


def split_shell_line(line: str) -> list[str]:
    """The words of a line ``engine.command.shell_line`` wrote, as sh reads them.

    Bare words, and double-quoted ones in which a backslash escapes ``\\``, ``"``, ``$`` and a backtick
    (POSIX sh, 2.2.3); ``shlex`` keeps the backslash before ``$`` and a backtick, which sh does not.
    """
    words: list[str] = []
    position = 0
    while position < len(line):
        if line[position] == " ":
            position += 1
            continue
        word, position = _word(line, position)
        words.append(word)
    return words


def _word(line: str, position: int) -> tuple[str, int]:
    if line[position] != '"':
        end = line.find(" ", position)
        end = len(line) if end < 0 else end
        return line[position:end], end
    characters: list[str] = []
    position += 1
    while position < len(line) and line[position] != '"':
        if line[position] == "\\" and position + 1 < len(line) and line[position + 1] in '\\"$`':
            position += 1
        characters.append(line[position])
        position += 1
    if position >= len(line):
        raise SeatplanError("the engine command has an unclosed double quote", where="SEATPLAN_COMMAND",
                            fix="render it again with `seatplan render`")
    return "".join(characters), position + 1


def parse_env(text: str) -> dict[str, str]:
    """``KEY=value`` and ``KEY='value'`` lines as ``encode.env_assignment`` writes them; comments skipped."""
    values = {}
    # Only "\n" ends a line for sh, systemd and Compose; str.splitlines would also split at U+0085 or U+2028
    # inside a value.
    for line in text.split("\n"):
        if not line.strip() or line.lstrip().startswith("#") or "=" not in line:
            continue
        key, value = line.split("=", 1)
        values[key.strip()] = env_value_of(value)
    return values


DOUBLE_QUOTE_ESCAPE = re.compile(r'\\([\\"$`])')


def env_value_of(written: str) -> str:
    """One value as ``encode.env_assignment`` writes it: bare, ``'…'``, or ``"…"`` with ``\\`` ``"`` ``$`` escaped."""
    if len(written) >= 2 and written[0] == written[-1] == "'":
        return written[1:-1]
    if len(written) >= 2 and written[0] == written[-1] == '"':
        return DOUBLE_QUOTE_ESCAPE.sub(r"\1", written[1:-1])
    return written


def int_flag(flags: Mapping[str, str | None], flag: str) -> int | None:
    """A whole-number flag's value; a value that is none is an error naming the flag."""
    value = flags.get(flag)
    if value is None:
        return None
    shape = flag_table().get(flag)
    try:
        return human_readable_int(value) if shape is not None and shape.number in ("human", "human_or_auto") else strict_whole(value)
    except ValueError as problem:
        raise SeatplanError(f"{flag} {problem}", where=f"vllm_args {flag}", fix="re-plan, or fix the seat's extra_args") from None


def yarn_override_factor(hf_overrides: str | Mapping[str, Any] | None) -> float | None:
    """The YaRN factor an ``--hf-overrides`` switches on (under ``rope_parameters`` or ``rope_scaling``)."""
    if isinstance(hf_overrides, str):
        try:
            overrides: Any = json.loads(hf_overrides) if hf_overrides else {}
        except ValueError:
            return None
    else:
        overrides = hf_overrides or {}
    for key in ("rope_parameters", "rope_scaling"):
        rope = overrides.get(key) if isinstance(overrides, dict) else None
        if isinstance(rope, dict) and (rope.get("rope_type") or rope.get("type")) == "yarn":
            factor = rope.get("factor")
            return float(factor) if isinstance(factor, (int, float)) and factor > 1 else None
    return None
