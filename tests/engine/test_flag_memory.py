"""engine.flag_memory classes every flag vLLM 0.32's server takes, and `seatplan plan` refuses a seat whose extra_args
hold one that changes the memory and is not modelled, naming it at its line with its fix.

The walk over vLLM's own parser (``make_arg_parser(FlexibleArgumentParser())`` imported in the vLLM test virtualenv):
a flag a new vLLM adds is not in the table, and the test fails until it is classed.
"""

from __future__ import annotations

import json
import random
import subprocess

import pytest

from kits.cli import run_cli
from kits.parts import require
from kits.paths import REPO_ROOT
from kits.plan import QWEN3_8B, one_host, write_fleet
from kits.vllm_engine import vllm_installed, vllm_python, vllm_venv
from seatplan.documents.fleet_file import load_fleet
from seatplan.engine import settings as engine_settings_module
from seatplan.engine.flag_memory import FLAG_MEMORY, class_of, refused_flags
from seatplan.engine.parse import flag_table
from seatplan.errors import SeatplanError
from seatplan.plan.planner import require_modelled_flags

PARSER_SCRIPT = r"""
import argparse, json
from vllm.entrypoints.launchers.cli_args import make_arg_parser
from vllm.utils.argparse_utils import FlexibleArgumentParser
parser = make_arg_parser(FlexibleArgumentParser())
out = {}
for action in parser._actions:
    if action.option_strings:
        name = next(option for option in action.option_strings if option.startswith("--"))
        switch = isinstance(action, argparse.BooleanOptionalAction) or action.nargs == 0
        for option in action.option_strings:
            out[option] = [name, switch]
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def vllm_options() -> dict[str, list]:
    require(vllm_installed(), f"the vLLM CPU engine in {vllm_venv()} (SEATPLAN_VLLM_VENV)")
    done = subprocess.run([str(vllm_python()), "-c", PARSER_SCRIPT], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    found = json.loads(done.stdout.strip().splitlines()[-1])
    assert isinstance(found, dict)
    return found


@pytest.mark.vllm
def test_every_flag_of_vllms_parser_is_classed(vllm_options):
    names = {name for name, _ in vllm_options.values()}
    unclassed = sorted(name for name in names if name not in FLAG_MEMORY)
    assert not unclassed, f"vLLM takes flags engine/flag_memory.py does not class: {unclassed}"
    assert sorted(set(FLAG_MEMORY) - names) == [], "the table classes flags vLLM 0.32 does not have"
    for option, (name, _) in vllm_options.items():  # every spelling (-tp, --no-x) reaches its long name's class
        classed = class_of(option)
        assert classed is not None and classed[0] == name, option


def _value(rng: random.Random) -> str:
    return rng.choice(["1", "4", "0", "auto", "x", '{"a": 1}', "2"])


def test_each_refused_flag_is_named_with_its_fix_and_the_others_pass():
    rng = random.Random(47)
    longs = sorted({shape.name: shape for shape in flag_table().values()}.items())
    for _ in range(400):
        words: list[str] = []
        expected: list[str] = []
        for name, shape in rng.sample(longs, rng.randint(1, 6)):
            memory = FLAG_MEMORY[name]
            if shape.kind == "switch":
                negate = rng.random() < 0.3 and f"--no-{name[2:]}" in flag_table()
                words.append(f"--no-{name[2:]}" if negate else name)
                kind = (memory.negated or memory.kind) if negate else memory.kind
                values: list[str] = []
            else:
                values = [_value(rng)] if shape.kind != "some" else [_value(rng) for _ in range(rng.randint(1, 3))]
                words += [name, *values]
                kind = memory.kind
            if kind == "not_modelled" and not (values and all(value in memory.harmless_values for value in values)):
                expected.append(words[-1 - len(values)])
            elif name == "--hf-overrides":  # modelled for RoPE scaling only, which none of these values is
                expected.append(name)
        refused = refused_flags(words)
        assert [item.flag for item in refused] == expected, words
        for item in refused:
            assert item.flag in item.message and item.fix and item.position is not None and words[item.position] == item.flag


def test_hf_overrides_are_modelled_for_rope_scaling_only():
    yarn = json.dumps({"rope_parameters": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768}})
    assert refused_flags(["--hf-overrides", yarn]) == []
    for other in ({"num_hidden_layers": 2}, {"rope_scaling": {"rope_type": "yarn", "factor": 2}, "head_dim": 64}, [1]):
        refused = refused_flags(["--hf-overrides", json.dumps(other)])
        assert [item.flag for item in refused] == ["--hf-overrides"] and "RoPE" in refused[0].fix


def test_every_modelled_flag_is_one_the_settings_read_or_one_the_estimate_holds_for():
    read = set(engine_settings_module._NUMBER_FLAGS) | set(engine_settings_module._TEXT_FLAGS) | {
        flag_table()[flag].name for flag in engine_settings_module._SWITCH_FLAGS} | engine_settings_module.FEATURE_FLAGS
    # the estimate holds either way: the NCCL part counts custom all-reduce; chunked prefill on is vLLM's default;
    # YaRN's --hf-overrides is read by engine.parse.yarn_override_factor
    holds = {"--disable-custom-all-reduce", "--enable-chunked-prefill", "--hf-overrides"}
    modelled = {name for name, memory in FLAG_MEMORY.items() if memory.kind == "modelled"}
    assert modelled == read | holds


def test_a_not_modelled_flag_stops_the_plan_at_its_line(tmp_path, capsys, monkeypatch):
    fleet = write_fleet(tmp_path, one_host(1) + f"""
seats:
  - name: chat
    model: {QWEN3_8B}
    port: 8001
    max_model_len: 8192
    extra_args:
      - --seed
      - "7"
      - --enable_expert_parallel
      - --pipeline-parallel-size=2
""")
    lines = fleet.read_text(encoding="utf-8").splitlines()
    lora, loras = lines.index("      - --enable_expert_parallel") + 1, lines.index("      - --pipeline-parallel-size=2") + 1
    with pytest.raises(SeatplanError) as caught:
        require_modelled_flags(load_fleet(fleet))
    assert caught.value.where == f"{fleet}:{lora}" and "--enable-expert-parallel" in caught.value.message
    assert f"{fleet}:{loras}: seats[0] (chat): extra_args --pipeline-parallel-size" in caught.value.message
    result = run_cli(capsys, monkeypatch, "plan", str(fleet))
    assert result.exit_code != 0 and "--enable-expert-parallel" in result.stderr and "memory_cap_bytes" in result.stderr
    assert not list(tmp_path.glob("*.json"))


def test_a_flag_of_the_fleets_own_keys_names_the_key(tmp_path):
    fleet = write_fleet(tmp_path, one_host(1) + f"""
seats:
  - {{name: chat, model: {QWEN3_8B}, port: 8001, extra_args: [--max-model-len, 32K]}}
""")
    with pytest.raises(SeatplanError) as caught:
        require_modelled_flags(load_fleet(fleet))
    assert "max_model_len" in (caught.value.fix or "")


def test_flags_that_do_not_change_memory_plan(tmp_path, capsys, monkeypatch):
    fleet = write_fleet(tmp_path, one_host(1) + f"""
seats:
  - name: chat
    model: {QWEN3_8B}
    port: 8001
    max_model_len: 8192
    extra_args: [--seed, "7", --no-enable-expert-parallel, --load-format, safetensors, -O2, --enable-prefix-caching, --disable-log-stats]
""")
    require_modelled_flags(load_fleet(fleet))
    result = run_cli(capsys, monkeypatch, "plan", str(fleet))
    assert result.exit_code == 0, result.stderr


def test_the_fleet_reference_shows_the_refusal_a_plan_prints(tmp_path, capsys, monkeypatch):
    """docs/fleet.md's "extra_args" example is what `seatplan plan` prints for a fleet with the flag at that line."""
    page = (REPO_ROOT / "docs" / "fleet.md").read_text(encoding="utf-8")
    section = page[page.index("## extra_args"):page.index("## Secrets")]
    shown = [line for line in section.splitlines() if line.startswith(("error:", "fix:"))]
    line = int(shown[0].split(":")[2])
    head = one_host(1) + f"seats:\n  - name: chat\n    model: {QWEN3_8B}\n    port: 8001\n    extra_args:\n"
    padding = "".join(f"      - --seed\n      - \"{number}\"\n" for number in range((line - head.count(chr(10)) - 1) // 2))
    text = head + padding + "      - --enable-expert-parallel\n"
    assert text.count("\n") == line, "the example's line cannot be reached with --seed pairs"
    (tmp_path / "fleet.yaml").write_text(text, encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    result = run_cli(capsys, monkeypatch, "plan", "fleet.yaml")
    printed = [line.rstrip() for line in result.stderr.splitlines()]
    assert result.exit_code != 0 and all(line in printed for line in shown), result.stderr
