"""Issue #15's list of hostile inputs, each reproduced through the real command line.

Each input once gave a traceback, a hang, unbounded memory, non-JSON output, or a silent "no findings"; each
must now end in a located ``error:`` with a ``fix:`` (exit 2), or a result that counts and reports what it
left out. Every input that once broke something is also kept in tests/fuzz/corpus/ (test_fuzz_corpus.py).
"""

from __future__ import annotations

import json
import shutil
import sqlite3
import struct
from pathlib import Path

import pytest

from kits.hostile import seatplan, strict_json
from kits.paths import FORMAT_FIXTURES, MODEL_FIXTURES
from seatplan.documents.plan import PLAN_VERSION
from seatplan.fileio import atomic_write_json
from seatplan.output import emit_json
from seatplan.units import human_bytes

LLAMA_8B = MODEL_FIXTURES / "meta-llama--Llama-3.1-8B-Instruct"
NVIDIA_SMI = FORMAT_FIXTURES / "nvidia_smi_query_gpu.csv"
BESZEL = FORMAT_FIXTURES / "beszel_data.db"
pytestmark = pytest.mark.timeout(120)


def fleet_text(model: Path = LLAMA_8B, seat_extra: str = "") -> str:
    return (
        "hosts:\n  - name: box\n    gpus:\n      - {index: 0, name: H100, total_bytes: 80GiB}\n"
        f"seats:\n  - {{name: chat, model: {model}, port: 8000{seat_extra}}}\n"
    )


def refused(outcome, *words: str) -> None:
    assert outcome.refused, (outcome.exit_code, outcome.stderr[-2000:], outcome.stdout[-500:])
    for word in words:
        assert word.lower() in outcome.stderr.lower(), outcome.stderr


# ------------------------------------------------------------------------------------------- fleet YAML

def billion_laughs(levels: int = 9) -> str:
    lines = ['a0: &a0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for level in range(1, levels):
        refs = ",".join(f"*a{level - 1}" for _ in range(9))
        lines.append(f"a{level}: &a{level} [{refs}]")
    return "\n".join(lines) + f"\nhosts: *a{levels - 1}\n"


@pytest.mark.timeout(30)
def test_yaml_alias_bomb_is_refused_quickly(tmp_path: Path) -> None:
    path = tmp_path / "fleet.yaml"
    path.write_text(billion_laughs())
    refused(seatplan("plan", str(path), "--json"), "alias")


@pytest.mark.timeout(30)
def test_yaml_nested_fifty_thousand_deep_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "fleet.yaml"
    path.write_text("hosts: " + "[" * 50_000 + "]" * 50_000 + "\n")
    refused(seatplan("plan", str(path), "--json"), "nest")


def test_oversized_fleet_file_is_refused_before_parsing(tmp_path: Path) -> None:
    path = tmp_path / "fleet.yaml"
    path.write_text(fleet_text() + "# " + "x" * (9 << 20) + "\n")
    refused(seatplan("plan", str(path), "--json"), "bytes")


def test_non_utf8_fleet_file_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "fleet.yaml"
    path.write_bytes(fleet_text().encode() + b"# \xff\xfe\n")
    refused(seatplan("plan", str(path), "--json"))


def test_max_model_len_zero_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "fleet.yaml"
    path.write_text(fleet_text(seat_extra=", max_model_len: 0"))
    refused(seatplan("plan", str(path), "--json"), "max_model_len")


# ------------------------------------------------------------------------------------------- model facts

def model_copy(tmp_path: Path, **config_changes) -> Path:
    target = tmp_path / "model"
    shutil.copytree(LLAMA_8B, target)
    config = json.loads((target / "config.json").read_text())
    config.update(config_changes)
    (target / "config.json").write_text(json.dumps(config))
    return target


def test_absurd_kv_head_count_is_refused(tmp_path: Path) -> None:
    model = model_copy(tmp_path, num_key_value_heads=10**18)
    refused(seatplan("model", str(model), "--json"), "num_key_value_heads")


def test_tp_size_vllm_refuses_is_refused_with_vllms_reason(tmp_path: Path) -> None:
    # phi-4's shape: 40 attention heads, 10 KV heads; TP 8 divides neither way, and vLLM's QKVParallelLinear asserts.
    model = model_copy(tmp_path, num_attention_heads=40, num_key_value_heads=10, hidden_size=5120, head_dim=128)
    refused(seatplan("model", str(model), "--tp", "8", "--json"), "10", "8", "divisible")
    # 40 heads are not divisible by TP 3 either: vLLM's ModelConfig says so before any layer is built.
    refused(seatplan("model", str(model), "--tp", "3", "--json"), "must be divisible by tensor parallel size")
    assert seatplan("model", str(model), "--tp", "2", "--json").exit_code == 0
    # Fewer KV heads than TP is vLLM's replication, when TP is a multiple of them.
    assert seatplan("model", str(model_copy(tmp_path / "b", num_key_value_heads=2)), "--tp", "8", "--json").exit_code == 0


def safetensors(path: Path, header: bytes | dict, data_bytes: int = 0) -> Path:
    raw = header if isinstance(header, bytes) else json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + b"\0" * data_bytes)
    return path


def test_tensor_whose_shape_disagrees_with_its_bytes_is_refused(tmp_path: Path) -> None:
    model = model_copy(tmp_path)
    safetensors(model / "model.safetensors",
                {"w": {"dtype": "F64", "shape": [10**12, 10**12], "data_offsets": [0, 8]}}, data_bytes=8)
    (model / "model.safetensors.index.json").unlink(missing_ok=True)
    refused(seatplan("model", str(model), "--json"), "shape")


def test_safetensors_header_nested_fifty_thousand_deep_is_refused(tmp_path: Path) -> None:
    model = model_copy(tmp_path)
    safetensors(model / "model.safetensors", b'{"w":' + b"[" * 50_000 + b"]" * 50_000 + b"}")
    (model / "model.safetensors.index.json").unlink(missing_ok=True)
    refused(seatplan("model", str(model), "--json"), "model.safetensors")


def test_index_total_size_beyond_any_hardware_is_refused(tmp_path: Path) -> None:
    model = model_copy(tmp_path)
    index = {"metadata": {"total_size": 10**30}, "weight_map": {"w": "model-00001-of-00002.safetensors"}}
    (model / "model.safetensors.index.json").write_text(json.dumps(index))
    refused(seatplan("model", str(model), "--json"), "total_size")


def test_human_bytes_of_a_googol_and_beyond_does_not_overflow() -> None:
    assert human_bytes(10**400).endswith("GiB")
    assert human_bytes(-(10**400)).startswith("-")
    assert human_bytes(float("nan")) == "nan B"
    assert human_bytes(float("inf")) == "inf B"


# ------------------------------------------------------------------------------------------- documents

@pytest.fixture
def plan_fleet(tmp_path: Path) -> Path:
    path = tmp_path / "fleet.yaml"
    path.write_text(fleet_text())
    return path


@pytest.mark.parametrize("option", ["--usage", "--observed"])
@pytest.mark.parametrize("content", [
    b"{}",
    b'{"models": {}}',
    b'{"seats": {}}',
    b"[" * 50_000 + b"]" * 50_000,
    b'{"kind": "seatplan.usage", "version": 1, "models": {"x": ' + b"[" * 50_000 + b"]" * 50_000 + b"}}",
    b'{"kind": "seatplan.usage", "version": 1, "models": {}, "source": "\xff\xfe"}',
    b'{"kind": "seatplan.plan", "version": 1}',
    b'{"kind": "seatplan.usage", "version": 99, "models": {}}',
    b"",
], ids=["empty-object", "untagged-usage", "untagged-observed", "deep-array", "deep-inside", "not-utf8", "a-plan",
        "future-version", "empty-file"])
def test_wrong_damaged_or_untagged_documents_are_refused(tmp_path: Path, plan_fleet: Path, option: str,
                                                          content: bytes) -> None:
    document = tmp_path / "document.json"
    document.write_bytes(content)
    if option == "--observed" and content.startswith(b'{"kind": "seatplan.usage", "version": 1, "models": {}}'):
        pytest.skip("a usage document given as observed: covered by the a-plan case")
    refused(seatplan("plan", str(plan_fleet), option, str(document), "--json"), str(document))


def test_a_usage_report_is_not_an_observations_file_and_back(tmp_path: Path, plan_fleet: Path) -> None:
    usage = tmp_path / "usage.json"
    made = seatplan("usage", "--from", str(FORMAT_FIXTURES / "litellm_spend_logs.csv"), "-o", str(usage), "--json")
    assert made.exit_code == 0, made.stderr
    observed = tmp_path / "observed.json"
    made = seatplan("diagnose", "--nvidia-smi", str(NVIDIA_SMI), "-o", str(observed), "--json")
    assert made.exit_code == 0, made.stderr
    refused(seatplan("plan", str(plan_fleet), "--observed", str(usage), "--json"), "seatplan.usage")
    refused(seatplan("plan", str(plan_fleet), "--usage", str(observed), "--json"), "seatplan.diagnose")
    assert seatplan("plan", str(plan_fleet), "--usage", str(usage), "--observed", str(observed), "--json").exit_code == 0


def test_the_plan_document_carries_its_kind_and_is_checked_where_read(tmp_path: Path, plan_fleet: Path) -> None:
    plan = tmp_path / "plan.json"
    outcome = seatplan("plan", str(plan_fleet), "-o", str(plan), "--json")
    assert outcome.exit_code == 0, outcome.stderr
    document = json.loads(plan.read_text())
    assert (document["kind"], document["version"]) == ("seatplan.plan", PLAN_VERSION)
    usage = tmp_path / "usage.json"
    usage.write_text(json.dumps({"kind": "seatplan.usage", "version": 1, "models": {}}))
    refused(seatplan("diagnose", "--nvidia-smi", str(NVIDIA_SMI), "--plan", str(usage), "--json"), "seatplan.usage")
    checked = seatplan("diagnose", "--nvidia-smi", str(NVIDIA_SMI), "--plan", str(plan), "--json")
    assert checked.exit_code in (0, 1, 3) and checked.json()["verdicts"]  # read and checked (1/3: the plan's verdict)


def test_observations_written_by_diagnose_carry_their_kind(tmp_path: Path) -> None:
    observed = tmp_path / "observed.json"
    assert seatplan("diagnose", "--nvidia-smi", str(NVIDIA_SMI), "-o", str(observed), "--json").exit_code == 0
    document = json.loads(observed.read_text())
    # One diagnose document (issue 20): its kind, and the observations plan --observed reads inside it.
    assert (document["kind"], document["version"]) == ("seatplan.diagnose", 1)
    assert (document["observed"]["kind"], document["observed"]["version"]) == ("seatplan.observed", 1)


# ------------------------------------------------------------------------------------------- observe readers

@pytest.mark.parametrize("content", ["", "\n\n", "hello world\nthis is not a log\n", "\x00\x01\x02" * 100,
                                     "timestamp, index, memory.used [MiB]\n"],
                         ids=["empty", "blank", "prose", "binary", "smi-csv"])
@pytest.mark.parametrize("option", ["--vllm-log", "--prometheus", "--vllm-metrics", "--nvidia-smi"])
def test_files_in_which_a_reader_recognises_nothing_are_an_error_saying_what_it_expected(
        tmp_path: Path, option: str, content: str) -> None:
    path = tmp_path / "input.txt"
    path.write_text(content)
    outcome = seatplan("diagnose", option, str(path), "--json")
    refused(outcome, str(path), "expected")


def test_a_prometheus_timestamp_of_ten_to_the_twenty_is_rejected_and_counted(tmp_path: Path) -> None:
    path = tmp_path / "scrape.prom"
    good = FORMAT_FIXTURES.joinpath("vllm_metrics.prom").read_text()
    path.write_text(good + 'vllm:num_requests_running{model_name="m"} 3 100000000000000000000\n')
    outcome = seatplan("diagnose", "--vllm-metrics", str(path), "--json")
    assert outcome.exit_code == 0, outcome.stderr
    assert "1 line" in outcome.stderr and "timestamp" in outcome.stderr
    outcome.json()


def test_nan_samples_never_reach_the_json_output(tmp_path: Path) -> None:
    path = tmp_path / "smi.csv"
    lines = NVIDIA_SMI.read_text().splitlines()
    path.write_text("\n".join(lines + ["2026/11/27 10:58:00.211, 0, NaN MiB, 81559 MiB",
                                       "2026/11/27 10:58:00.211, 1, inf MiB, 81559 MiB"]) + "\n")
    observed = tmp_path / "observed.json"
    outcome = seatplan("diagnose", "--nvidia-smi", str(path), "-o", str(observed), "--json")
    assert outcome.exit_code == 0, outcome.stderr
    outcome.json()
    strict_json(observed.read_text())


def test_one_bad_nvidia_smi_timestamp_is_rejected_and_counted(tmp_path: Path) -> None:
    path = tmp_path / "smi.csv"
    lines = NVIDIA_SMI.read_text().splitlines()
    path.write_text("\n".join(lines[:3] + ["2026/13/45 99:58:00.211, 0, 73921 MiB, 81559 MiB"] + lines[3:]) + "\n")
    outcome = seatplan("diagnose", "--nvidia-smi", str(path), "--json")
    assert outcome.exit_code == 0, outcome.stderr
    assert f"{path}:4" in outcome.stderr and "1 line" in outcome.stderr
    whole = seatplan("diagnose", "--nvidia-smi", str(NVIDIA_SMI), "--json").json()
    assert outcome.json()["gpus"] == whole["gpus"]


@pytest.mark.parametrize("damage", [
    "'{\"g\": {\"0\": {\"mu\": '",  # one row that is not JSON
    "json_set(stats, '$.g.0.mu', json('1e400'))",  # one reading beyond a double: never printed as Infinity
], ids=["not-json", "1e400"])
def test_one_bad_beszel_row_is_rejected_and_counted(tmp_path: Path, damage: str) -> None:
    path = tmp_path / "data.db"
    shutil.copy(BESZEL, path)
    with sqlite3.connect(path) as db:
        row = db.execute("SELECT id FROM system_stats WHERE json_extract(stats, '$.g') IS NOT NULL LIMIT 1").fetchone()
        db.execute(f"UPDATE system_stats SET stats = {damage} WHERE id = ?", row)
    outcome = seatplan("diagnose", "--beszel", str(path), "--json")
    assert outcome.exit_code == 0, outcome.stderr
    assert "1 row" in outcome.stderr and str(path) in outcome.stderr
    assert outcome.json()["gpus"]


def test_a_file_that_is_not_a_beszel_database_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "data.db"
    path.write_bytes(b"SQLite format 3\0" + b"\xff" * 4000)
    refused(seatplan("diagnose", "--beszel", str(path), "--json"), "Beszel")


# ------------------------------------------------------------------------------------------- usage

@pytest.mark.parametrize("days", ["nan", "inf", "-inf", "1e300", "0", "-1", "400000"])
def test_usage_days_that_are_no_window_are_refused(days: str) -> None:
    refused(seatplan("usage", "--from", str(FORMAT_FIXTURES / "litellm_spend_logs.csv"), "--days", days), "--days")


@pytest.mark.parametrize("name, content", [
    ("empty.jsonl", ""),
    ("wrong.jsonl", '{"a": 1, "b": 2}\n{"a": 3, "b": 4}\n'),
    ("header.csv", FORMAT_FIXTURES.joinpath("litellm_spend_logs.csv").read_text().splitlines()[0] + "\n"),
    ("empty.csv", ""),
    ("garbage.csv", "\x00\xff\xfe garbage\n"),
])
def test_spend_logs_with_no_rows_are_refused(tmp_path: Path, name: str, content: str) -> None:
    path = tmp_path / name
    path.write_text(content, encoding="utf-8", errors="surrogateescape")
    refused(seatplan("usage", "--from", str(path), "--json"), str(path))


def test_usage_json_output_is_strict(tmp_path: Path) -> None:
    outcome = seatplan("usage", "--from", str(FORMAT_FIXTURES / "litellm_spend_logs.csv"), "--json")
    assert outcome.exit_code == 0, outcome.stderr
    assert outcome.json()["kind"] == "seatplan.usage"


def test_output_json_turns_non_finite_numbers_into_null(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    document = {"a": float("nan"), "b": [float("inf"), 1.5], "c": {"d": float("-inf")}}
    emit_json(document)
    assert strict_json(capsys.readouterr().out) == {"a": None, "b": [None, 1.5], "c": {"d": None}}
    atomic_write_json(tmp_path / "x.json", document)
    assert strict_json((tmp_path / "x.json").read_text()) == {"a": None, "b": [None, 1.5], "c": {"d": None}}
