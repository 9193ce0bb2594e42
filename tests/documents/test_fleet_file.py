"""The fleet file: sizes, unknown keys with suggestions, impossible values, every error naming its line."""

from __future__ import annotations

import jsonschema
import pytest
import yaml

from kits.plan import LLAMA_8B, GiB, one_host, write_fleet
from seatplan.documents.fleet import Fleet as FleetModel
from seatplan.documents.fleet_file import load_fleet, parse_fleet
from seatplan.errors import SeatplanError


def _error(tmp_path, text: str) -> SeatplanError:
    path = write_fleet(tmp_path, text)
    with pytest.raises(SeatplanError) as caught:
        load_fleet(path)
    return caught.value


def test_sizes_accept_binary_units_fractions_and_plain_bytes():
    fleet, _ = parse_fleet(
        one_host(1, "96GiB")
        + f"""
seats:
  - {{name: a, model: {LLAMA_8B}, kv_cache_memory_bytes: 22GiB}}
  - {{name: b, model: {LLAMA_8B}, kv_cache_memory_bytes: 1073741824}}
  - {{name: speech, engine: fixed, memory_cap_bytes: 0.5GiB}}
policy:
  rounding_step_bytes: 0.5GiB
""",
        "fleet.yaml",
    )
    assert fleet.hosts[0].gpus[0].total_bytes == 96 * GiB
    assert fleet.seats[0].kv_cache_memory_bytes == 22 * GiB
    assert fleet.seats[1].kv_cache_memory_bytes == GiB
    assert fleet.seats[2].memory_cap_bytes == GiB // 2
    assert fleet.policy.rounding_step_bytes == GiB // 2
    assert fleet.policy.kv_factor == 1.25  # the default


def test_unknown_key_names_its_line_and_suggests_the_right_key(tmp_path):
    error = _error(
        tmp_path,
        one_host()
        + f"""
seats:
  - name: a
    model: {LLAMA_8B}
  - name: b
    model: {LLAMA_8B}
    max_model_length: 4096
""",
    )
    # hosts take lines 1-5, a blank line, "seats:" on line 7, the misspelt key on line 12
    assert error.where == f"{tmp_path / 'fleet.yaml'}:12"
    assert error.message == "seats[1].max_model_length: unknown key; did you mean max_model_len?"
    assert str(error).startswith(f"{tmp_path / 'fleet.yaml'}:12: seats[1].max_model_length: unknown key; did you mean max_model_len?")


def test_unknown_policy_key_suggests_from_the_policy_fields(tmp_path):
    error = _error(tmp_path, one_host() + f"seats:\n  - {{name: a, model: {LLAMA_8B}}}\npolicy:\n  headroom: 1GiB\n")
    assert error.where.endswith(":9")
    assert "policy.headroom: unknown key; did you mean headroom_bytes?" in error.message


def test_negative_size_is_an_error_on_its_line(tmp_path):
    error = _error(tmp_path, one_host() + f"seats:\n  - name: a\n    model: {LLAMA_8B}\n    kv_cache_memory_bytes: -3GiB\n")
    assert error.where.endswith(":9")
    assert "seats[0].kv_cache_memory_bytes" in error.message and "negative" in error.message


def test_tensor_parallel_must_be_a_power_of_two_and_fit_a_host(tmp_path):
    error = _error(tmp_path, one_host(4) + f"seats:\n  - name: a\n    model: {LLAMA_8B}\n    tensor_parallel_size: 3\n")
    assert error.where.endswith(":11")
    assert "tensor_parallel_size 3 is not a power of two" in error.message
    error = _error(tmp_path, one_host(2) + f"seats:\n  - name: a\n    model: {LLAMA_8B}\n    tensor_parallel_size: 4\n")
    assert "more than the 2 GPUs of the largest host" in error.message


def test_pin_to_a_missing_gpu_and_two_seats_on_one_port(tmp_path):
    error = _error(
        tmp_path,
        one_host(2)
        + f"""
seats:
  - name: a
    model: {LLAMA_8B}
    port: 8000
  - name: b
    model: {LLAMA_8B}
    port: 8000
    pin: 5
""",
    )
    assert error.where.endswith(":13")  # the first problem, by line: the port
    assert "seats[1].port: port 8000 is also used by seats[0]" in error.message
    assert ":14: seats[1].pin: pin to GPU 5, which the fleet does not declare" in error.message


def test_pin_to_a_keep_clear_gpu_is_refused(tmp_path):
    error = _error(tmp_path, one_host(2, keep_clear=(1,)) + f"seats:\n  - {{name: a, model: {LLAMA_8B}, pin: 1}}\n")
    assert "keep_clear" in error.message and error.where.endswith(":7")


def test_fixed_seat_needs_a_cap_and_vllm_seat_a_model(tmp_path):
    error = _error(tmp_path, one_host() + "seats:\n  - {name: speech, engine: fixed}\n  - {name: b}\n")
    assert "fixed seat needs memory_cap_bytes" in error.message
    assert "seats[1]: a vllm seat needs a model" in error.message


def test_yaml_syntax_error_and_duplicate_key_name_their_lines(tmp_path):
    error = _error(tmp_path, one_host() + "seats:\n  - name: a\n    model: [unclosed\n")
    assert "not valid YAML" in error.message
    error = _error(tmp_path, one_host() + f"seats:\n  - name: a\n    model: {LLAMA_8B}\n    port: 1\n    port: 2\n")
    assert error.where.endswith(":10") and "key given twice" in error.message


def test_current_layout_must_name_declared_seats(tmp_path):
    error = _error(tmp_path, one_host() + f"seats:\n  - {{name: alpha, model: {LLAMA_8B}}}\ncurrent_layout:\n  alpah: 0\n")
    assert "did you mean alpha?" in error.message and error.where.endswith(":9")


def test_schema_accepts_the_demo_fleet_and_rejects_unknown_keys():
    schema = FleetModel.model_json_schema()
    demo = yaml.safe_load((LLAMA_8B.parents[3] / "examples" / "demo" / "fleet.yaml").read_text())
    jsonschema.validate(demo, schema)
    demo["seats"][0]["max_model_length"] = 4096
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(demo, schema)
