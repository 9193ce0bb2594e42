"""The vLLM version table: one parser, behaviour rows by release, and flags checked against vLLM's own parser."""

from __future__ import annotations

import json
import subprocess

import pytest

from kits.parts import require
from kits.vllm_engine import vllm_installed, vllm_python, vllm_venv
from seatplan import versions
from seatplan.engine.command import unsupported_flags
from seatplan.engine.parse import flag_table
from seatplan.facts.models import EngineSettings, parse_vllm_version
from seatplan.observe.findings import KV_BYTES_FLAG_SINCE, version_tuple
from seatplan.plan.footprint import version_key


@pytest.mark.parametrize("text, expected", [
    ("0.10.2", (0, 10, 2)),
    ("v0.32.0", (0, 32, 0)),
    ("0.9.0.1", (0, 9, 0, 1)),
    ("0.29.1rc1.dev339+g1234abc", (0, 29, 1)),
    ("0.10.2+cu128", (0, 10, 2)),
    (" 0.32 ", (0, 32)),
])
def test_release_reads_the_release_numbers(text, expected):
    assert versions.release(text) == expected


@pytest.mark.parametrize("text", ["", "latest", "v", "32"])
def test_release_refuses_text_without_a_version(text):
    with pytest.raises(ValueError, match="cannot read vLLM version"):
        versions.release(text)
    assert versions.try_release(text) is None


@pytest.mark.parametrize("text", ["0.7.3", "0.33.0", "1.0"])
def test_modelled_refuses_versions_outside_the_formulas(text):
    with pytest.raises(ValueError, match="outside the range"):
        versions.modelled(text)


def test_every_stage_parses_with_the_one_parser():
    assert parse_vllm_version is versions.modelled
    assert version_key("0.29.1rc1.dev339") == versions.release("0.29.1rc1.dev339") == (0, 29, 1)
    assert version_tuple("0.10.1.1+cu126") == (0, 10, 1, 1)
    assert version_tuple("garbage") == ()
    assert KV_BYTES_FLAG_SINCE == versions.since("kv_bytes_flag") == (0, 10, 2)
    assert EngineSettings(vllm_version="v0.21.0").version == (0, 21, 0)


@pytest.mark.parametrize("key, older, newer", [
    ("kv_bytes_flag", "0.10.1", "0.10.2"),
    ("yarn_context_not_scaled", "0.29", "0.30"),
    ("explicit_max_tokens_clamped_to_context", "0.31.2", "0.32.0"),
    ("kv_size_tokens_from_concurrency", "0.20", "0.21"),
    ("hybrid_kv_cache_manager", "0.9.0.1", "0.9.1"),
    ("hf_overrides_rope_parameters", "0.11.0", "0.11.1"),
])
def test_behaviours_switch_at_the_release_the_sources_name(key, older, newer):
    assert not versions.has(key, versions.release(older))
    assert versions.has(key, versions.release(newer))


def test_a_bounded_behaviour_holds_only_inside_its_releases():
    assert [versions.has("log_estimate_dropped", versions.release(v)) for v in ("0.8.4", "0.8.5", "0.9.0.1", "0.9.1")] == [
        False, True, True, False]
    assert versions.has("model_generation_config_cap_is_ceiling", (0, 16)) and not versions.has(
        "model_generation_config_cap_is_ceiling", (0, 17))


def test_behaviour_changes_lists_exactly_the_rows_that_differ():
    changed = {row.key for row in versions.behaviour_changes((0, 29), (0, 30))}
    assert changed == {"yarn_context_not_scaled"}
    assert versions.behaviour_changes((0, 32), (0, 32)) == []
    keys = [row.key for row in versions.BEHAVIOURS]
    assert len(keys) == len(set(keys))


def test_flag_problems_name_the_release_that_adds_or_removes_the_flag():
    assert versions.flag_since("--kv-cache-memory-bytes") == (0, 10, 2)
    assert versions.flag_since("--kv-cache-memory-bytes=1024") == (0, 10, 2)
    assert versions.flag_since("--not-a-vllm-flag") is None
    args = ["--model", "m", "--kv-cache-memory-bytes", "1", "--rope-scaling", "{}"]
    assert versions.flag_problems(args, (0, 10, 1)) == [
        "--kv-cache-memory-bytes needs vLLM 0.10.2 or later, not 0.10.1"]
    problems = versions.flag_problems(args, (0, 32))
    assert len(problems) == 1 and problems[0].startswith("--rope-scaling was removed in vLLM 0.11.1")


VLLM_FLAGS_SCRIPT = """
import json
from vllm.entrypoints.launchers.cli_args import make_arg_parser
from vllm.utils.argparse_utils import FlexibleArgumentParser
print(json.dumps(sorted(make_arg_parser(FlexibleArgumentParser())._option_string_actions)))
"""


@pytest.mark.vllm
def test_the_flag_table_agrees_with_vllm_0_32s_own_argument_parser():
    require(vllm_installed(), f"the vLLM CPU engine in {vllm_venv()} (SEATPLAN_VLLM_VENV)")
    done = subprocess.run([str(vllm_python()), "-c", VLLM_FLAGS_SCRIPT], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    parser_flags = set(json.loads(done.stdout.strip().splitlines()[-1]))
    newest = (0, 32)
    assert {row.name for row in versions.FLAGS if row.at(newest)} <= parser_flags
    assert not {row.name for row in versions.FLAGS if not row.at(newest)} & parser_flags


def _unique_prefix(name: str) -> str:
    """The shortest start of ``name`` that vLLM 0.32's parser reads as ``name`` alone (argparse's allow_abbrev)."""
    table = flag_table()
    for cut in range(3, len(name) + 1):
        if {table[other].name for other in table if other.startswith(name[:cut])} == {table[name].name}:
            return name[:cut]
    return name


def test_flag_problems_are_the_same_for_every_spelling_vllm_reads_alike(rng):
    """A flag the table knows, spelled ``--flag v``, ``--flag=v`` or a unique prefix, draws the same sentence:
    the judge reads the command line as the engine's own reader does (engine.parse.read_vllm_args)."""
    table = flag_table()
    known = [row.name for row in versions.FLAGS if row.name in table]
    releases = sorted({row.since for row in versions.FLAGS} | {row.until for row in versions.FLAGS if row.until})
    for _ in range(200):
        chosen = rng.sample(known, rng.randint(1, min(6, len(known))))
        version = ".".join(map(str, rng.choice(releases)))
        spellings: list[list[str]] = [["--model", "m"] for _ in range(3)]
        for name in chosen:
            takes_value = table[name].kind != "switch"
            value = [str(rng.randint(1, 1 << 20))] if takes_value else []
            spellings[0] += [name, *value]
            spellings[1] += [f"{name}={value[0]}"] if takes_value else [name]
            spellings[2] += [_unique_prefix(name), *value]
        problems = [unsupported_flags(words, version) for words in spellings]
        assert problems[0] == problems[1] == problems[2], (spellings, version)
        expected = [problem for name in dict.fromkeys(chosen) if (problem := versions.flag_problem(name, versions.modelled(version)))]
        assert problems[0] == expected, (spellings, version)
