"""engine.parse reads a vLLM command line as vLLM 0.32's own parser does, held to that parser itself.

The parser is imported from the vLLM test virtualenv (``make_arg_parser(FlexibleArgumentParser())``, what
``vllm serve`` and the module launcher build): random command lines over its real flags (one value, several
values, switches and their ``--no-`` forms, short forms, ``_`` for ``-``, ``--flag=value``, unique prefixes,
repeated flags, ``human_readable_int`` counts such as ``32K``/``25.6k``/``auto``) are parsed by both, and every
value must agree; lines vLLM refuses (an ambiguous prefix, a switch given a value, a flag without its value)
must be reported as problems. The stored flag table is compared with the parser's own.
"""

from __future__ import annotations

import json
import random
import subprocess

import pytest
import yaml

from kits.parts import require
from kits.vllm_engine import vllm_installed, vllm_python, vllm_venv
from seatplan.engine.parse import config_file_args, flag_table, human_readable_int, read_vllm_args, with_config

pytestmark = pytest.mark.vllm

# Each flag's destination, type and choices, and (second call) each command line as vLLM's parser reads it.
VLLM_SCRIPT = r"""
import argparse, json, sys
from vllm.entrypoints.launchers.cli_args import make_arg_parser
from vllm.utils.argparse_utils import FlexibleArgumentParser, human_readable_int, human_readable_int_or_auto
parser = make_arg_parser(FlexibleArgumentParser())
parser.exit_on_error = False
def error(message):
    raise ValueError(message)
parser.error = error
request = json.load(sys.stdin)
if request == "meta":
    meta = {}
    for action in parser._actions:
        if action.option_strings and not isinstance(action, argparse._HelpAction):
            read = action.type
            if getattr(read, "__name__", "") == "_optional_type" and read.__closure__:
                read = read.__closure__[0].cell_contents
            kind = {human_readable_int: "human", human_readable_int_or_auto: "human", int: "int", str: "str", None: "str"}.get(read, "other")
            for option in action.option_strings:
                meta[option] = [action.dest, kind, action.choices is not None]
    print(json.dumps(meta))
else:
    out = []
    for line in request:
        try:
            ns = parser.parse_args(line)
            out.append({k: (v if isinstance(v, (str, int, float, bool, type(None))) else [str(x) for x in v] if isinstance(v, list) else str(v))
                        for k, v in vars(ns).items()})
        except (ValueError, SystemExit, argparse.ArgumentError, TypeError) as problem:
            out.append({"error": str(problem)})
    print(json.dumps(out))
"""


def _vllm(request: object) -> object:
    done = subprocess.run([str(vllm_python()), "-c", VLLM_SCRIPT], input=json.dumps(request), capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def meta() -> dict[str, list]:
    require(vllm_installed(), f"the vLLM CPU engine in {vllm_venv()} (SEATPLAN_VLLM_VENV)")
    found = _vllm("meta")
    assert isinstance(found, dict)
    return found


def test_the_stored_flag_table_is_vllms_own():
    require(vllm_installed(), f"the vLLM CPU engine in {vllm_venv()} (SEATPLAN_VLLM_VENV)")
    done = subprocess.run([str(vllm_python()), "tests/engine/vllm_flag_table.py"], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    dumped = json.loads(done.stdout[done.stdout.index('{"vllm"'):])
    assert {option: tuple(shape) for option, shape in dumped["flags"].items()} == {
        option: (shape.name, shape.kind, shape.number) for option, shape in flag_table().items()}, \
        "regenerate: vllm python tests/engine/vllm_flag_table.py > src/seatplan/engine/vllm_flags.json"


def _count(rng: random.Random, human: bool) -> str:
    """A count as operators write it: plain, with _ or +, or (where vLLM reads it so) 32K, 32k, 25.6k."""
    number = rng.choice([rng.randrange(1, 200), rng.randrange(1, 2**20), rng.randrange(1, 2**40)])
    forms = [str(number), f"{number:_}", f"+{number}"]
    if human:
        forms += [f"{rng.randrange(1, 999)}{rng.choice('kKmMgG')}", f"{rng.randrange(1, 99)}.{rng.randrange(0, 99)}{rng.choice('kmg')}"]
    return rng.choice(forms)


def _prefix(rng: random.Random, option: str) -> str:
    """A unique prefix of ``option`` (argparse takes it for the option), or the option itself."""
    longs = [name for name in flag_table() if name.startswith("--")]
    unique = [length for length in range(3, len(option)) if sum(name.startswith(option[:length]) for name in longs) == 1]
    return option[: rng.choice(unique)] if unique and rng.random() < 0.3 else option


def _line(rng: random.Random, usable: list[str], meta: dict[str, list]) -> list[str]:
    words = ["org/model-" + str(rng.randrange(100))] if rng.random() < 0.7 else ["--model", "org/m" + str(rng.randrange(100))]
    for _ in range(rng.randrange(0, 12)):
        option = rng.choice(usable)
        shape = flag_table()[option]
        spelled = _prefix(rng, option) if option.startswith("--") else option
        if spelled.startswith("--") and rng.random() < 0.2:
            spelled = "--" + spelled[2:].replace("-", "_")
        if shape.kind == "switch":
            words.append(spelled)
            continue
        kind = meta[option][1]
        values = [_count(rng, shape.number in ("human", "human_or_auto")) if kind in ("int", "human") else rng.choice(["a", "b=c", "x/y", "0.5", "{}"])
                  for _ in range(rng.randrange(1, 4) if shape.kind == "some" else 1)]
        if option == "--max-model-len" and rng.random() < 0.2:
            values = [rng.choice(["-1", "auto", "AUTO"])]
        if len(values) == 1 and rng.random() < 0.4:
            words.append(f"{spelled}={values[0]}")
        else:
            words += [spelled, *values]
    return words


def _bad_line(rng: random.Random) -> list[str]:
    """A line vLLM refuses: an ambiguous prefix, a switch given a value, a one-value flag at the end."""
    return rng.choice([["m", "--max", "1"], ["m", "--enforce-eager=1"], ["m", "--port"], ["m", "--max-model-len", "1.5K"],
                       ["m", "--served-model-name=a", "b"], ["m", "--kv-cache-memory-bytes", "12x"]])


def test_random_command_lines_read_as_vllms_parser_reads_them(rng, meta):
    # flags with a free value (no choices) of a type read here: a string, an int or a human-readable count; every switch
    usable = sorted(option for option, shape in flag_table().items()
                    if option in meta and option not in ("--model", "--config", "--help")
                    and (shape.kind == "switch" or (shape.kind in ("value", "some") and not meta[option][2] and meta[option][1] in ("str", "int", "human")))
                    and not option.startswith(("--api-key", "--lora-modules", "--tool-server", "--middleware", "--chat-template")))
    lines = [_line(rng, usable, meta) for _ in range(400)] + [_bad_line(rng) for _ in range(20)]
    answers = _vllm(lines)
    assert isinstance(answers, list)
    accepted = sum("error" not in answer for answer in answers)
    assert accepted >= 380, f"only {accepted} of {len(lines)} lines were vLLM's: the generator drifted"
    for line, answer in zip(lines, answers):
        read = read_vllm_args(line)
        if "error" in answer:
            bad_number = any(_refuses_number(read, flag) for flag in read.flags)
            assert read.problems or read.unknown or bad_number, (line, answer)
            continue
        assert not read.problems, (line, read.problems)
        assert read.model == (answer["model"] if "--model" in read.flags else answer["model_tag"]), line
        for flag, value in read.flags.items():
            dest, kind, _ = meta[flag]
            shape = flag_table()[flag]
            if shape.kind == "switch":
                assert answer[dest] is (not flag.startswith("--no-")) or answer[dest] == (not flag.startswith("--no-")), (line, flag)
            elif kind in ("int", "human"):
                expected = answer[dest][-1] if isinstance(answer[dest], list) else answer[dest]
                assert read.whole(flag) == int(expected), (line, flag, value, answer[dest])
            else:
                assert value == answer[dest], (line, flag)


def _refuses_number(read, flag: str) -> bool:
    try:
        read.whole(flag)
    except ValueError:
        return True
    return False


def test_human_readable_int_is_vllms_own_rule():
    # vLLM 0.32 vllm/utils/argparse_utils.py:29: lower case is decimal, upper case binary
    assert human_readable_int("32K") == 32768
    assert human_readable_int("32k") == 32000
    assert human_readable_int("25.6k") == 25600
    assert human_readable_int("1_024") == 1024
    for refused in ("1.5K", "٣٢K", "²", "12x", "1" * 40):
        with pytest.raises(ValueError):
            human_readable_int(refused)


def test_config_files_read_as_vllms_parser_reads_them(rng, meta, tmp_path):
    """``--config FILE.yaml`` (vLLM 0.32 vllm/utils/argparse_utils.py:510, 568): random files of counts, switches set
    true or false and text, with flags also on the command line (the command line wins), parsed by vLLM itself."""
    counts = ["max-model-len", "max-num-seqs", "max-num-batched-tokens", "kv-cache-memory-bytes", "port"]
    switches = ["enforce-eager", "enable-prefix-caching", "async-scheduling"]
    lines, expected_words = [], []
    for number in range(60):
        config = {}
        for key in rng.sample(counts, rng.randint(1, 4)):
            human = flag_table()[f"--{key}"].number in ("human", "human_or_auto")
            config[key] = rng.choice([rng.randrange(1, 1 << 20), f"{rng.randrange(1, 64)}K" if human else rng.randrange(1, 512)])
            if key == "port":
                config[key] = rng.randrange(1024, 65535)
        for key in rng.sample(switches, rng.randint(0, 2)):
            config[key] = rng.random() < 0.5
        config["served-model-name"] = f"m{number}"
        path = tmp_path / f"c{number}.yaml"
        path.write_text(yaml.safe_dump(config))
        line = ["org/model", "--config", str(path)]
        if rng.random() < 0.5:
            line += ["--max-num-seqs", str(rng.randrange(1, 512))]  # given twice: the command line wins
        lines.append(line)
        expected_words.append(with_config(line, config_file_args(config)))
    answers = _vllm(lines)
    assert isinstance(answers, list)
    for line, words, answer in zip(lines, expected_words, answers):
        assert "error" not in answer, (line, answer)
        read = read_vllm_args(words)
        assert read.model == answer["model_tag"]
        for flag in read.flags:
            dest, kind, _ = meta[flag]
            if flag_table()[flag].kind == "switch":
                assert answer[dest] == (not flag.startswith("--no-")), (line, flag)
            elif kind in ("int", "human"):
                assert read.whole(flag) == answer[dest], (line, flag)
            else:
                assert read.value(flag) == (answer[dest][-1] if isinstance(answer[dest], list) else answer[dest]), (line, flag)
