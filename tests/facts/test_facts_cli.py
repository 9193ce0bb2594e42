"""``seatplan model`` through the real entry point: the JSON document, the breakdown, and bad input
(exit code 2, the file and field named, never a traceback)."""

from __future__ import annotations

import json
import struct

import pytest

from kits.facts import fixture_dir, write_config

LLAMA = str(fixture_dir("meta-llama--Llama-3.1-8B"))
REQUIRED_KEYS = {"kv_bytes_per_token", "block_size", "bytes_per_block", "num_blocks", "kv_cache_tokens", "max_concurrency",
                 "request_kv_bytes", "max_model_len_fit", "weights_bytes", "weights_exact", "max_context_derived",
                 "max_context_published", "layer_groups"}


def _json(cli, *args: str) -> dict:
    completed = cli("model", *args, "--json")
    assert completed.exit_code == 0, completed.stderr
    return json.loads(completed.stdout)


def test_json_document_has_the_promised_figures(cli):
    document = _json(cli, LLAMA, "--kv-cache-memory-bytes", "20GiB", "--max-model-len", "131072")
    assert REQUIRED_KEYS <= set(document)
    assert (document["num_blocks"], document["kv_cache_tokens"], round(document["max_concurrency"], 2)) == (10240, 163840, 1.25)
    assert document["request_kv_bytes"] == 16 * 2**30
    assert document["max_model_len_fit"] == 131072
    assert document["capacity"]["num_blocks"] == 10240
    assert document["layer_groups"][0]["kind"] == "full_attention"
    assert len(document["layer_groups"][0]["layers"]) == 32 and document["layer_groups"][0]["page_bytes"] == 16 * 2 * 8 * 128 * 2


def test_json_without_a_budget_leaves_capacity_null(cli):
    document = _json(cli, LLAMA)
    assert document["num_blocks"] is None and document["max_model_len_fit"] is None
    assert document["request_kv_bytes"] == 16 * 2**30 and document["max_model_len"] == 131072


@pytest.mark.parametrize("budget, num_blocks", [("5.5G", int(5.5 * 2**30) // 2**21), ("22GiB", 22 * 512), ("20g", 20 * 10**9 // 2**21)])
def test_budget_spellings(cli, budget, num_blocks):
    assert _json(cli, LLAMA, "--kv-cache-memory-bytes", budget)["num_blocks"] == num_blocks


def test_flags_reach_the_settings(cli):
    document = _json(cli, str(fixture_dir("openai--gpt-oss-120b")), "--kv-cache-memory-bytes", "20GiB", "--max-model-len", "131072",
                     "--disable-hybrid-kv-cache-manager", "--tp", "2", "--kv-cache-dtype", "fp8", "--device", "cuda",
                     "--vllm-version", "0.31", "--no-prefix-caching", "--max-num-batched-tokens", "4096", "--block-size", "32")
    settings = document["settings"]
    assert (settings["tensor_parallel_size"], settings["kv_cache_dtype"], settings["prefix_caching"]) == (2, "fp8", False)
    assert (settings["hybrid_kv_cache_manager"], settings["max_num_batched_tokens"], settings["block_size"]) == (False, 4096, 32)
    assert document["kv_bytes_per_token"] == 36 * 2 * 4 * 64 * 1
    assert document["block_size"] == 32


def test_readable_breakdown(cli):
    completed = cli("model", str(fixture_dir("Qwen--Qwen3-Next-80B-A3B-Thinking")), "--kv-cache-memory-bytes", "20GiB",
                        "--no-prefix-caching", env={"COLUMNS": "200"})
    assert completed.exit_code == 0, completed.stderr
    assert "GPU KV cache size: 868,047 tokens, Maximum concurrency for 262,144 tokens per request: 3.31x" in completed.stdout
    assert "Setting attention block size to 544 tokens" in completed.stdout
    assert "full_attention" in completed.stdout and "mamba" in completed.stdout


def _fails(cli, args: list[str], *fragments: str) -> None:
    completed = cli("model", *args)
    assert completed.exit_code == 2, (completed.stdout, completed.stderr)
    assert "Traceback" not in completed.stderr and completed.stdout == ""
    for fragment in fragments:
        assert fragment in completed.stderr, completed.stderr


def test_missing_model_directory(cli, tmp_path):
    _fails(cli, [str(tmp_path / "nowhere")], str(tmp_path / "nowhere"))


def test_missing_config_json(cli, tmp_path):
    (tmp_path / "empty").mkdir()
    _fails(cli, [str(tmp_path / "empty")], str(tmp_path / "empty" / "config.json"), "missing")


def test_malformed_config_json_names_the_line(cli, tmp_path):
    directory = tmp_path / "broken"
    directory.mkdir()
    (directory / "config.json").write_text('{\n  "num_hidden_layers": 2,\n  "hidden_size": ,\n}\n')
    _fails(cli, [str(directory)], f"{directory / 'config.json'}:3:", "not valid JSON")


def test_config_that_is_not_an_object(cli, tmp_path):
    directory = tmp_path / "list"
    directory.mkdir()
    (directory / "config.json").write_text("[1, 2]")
    _fails(cli, [str(directory)], "JSON object")


def test_config_without_layer_count(cli, tmp_path):
    directory = write_config(tmp_path / "nolayers", {"architectures": ["LlamaForCausalLM"], "hidden_size": 64,
                                                     "num_attention_heads": 4})
    _fails(cli, [str(directory)], f"{directory / 'config.json'}: num_hidden_layers")


def test_config_with_a_damaged_value(cli, tmp_path):
    directory = write_config(tmp_path / "bad", {"architectures": ["LlamaForCausalLM"], "hidden_size": 64,
                                                "num_hidden_layers": "two", "num_attention_heads": 4})
    _fails(cli, [str(directory)], "num_hidden_layers", "'two'")


def test_unknown_architecture_without_attention_info(cli, tmp_path):
    directory = write_config(tmp_path / "mystery", {"architectures": ["MysteryNet"], "num_hidden_layers": 4, "hidden_size": 64})
    _fails(cli, [str(directory)], "MysteryNet", "num_attention_heads")


def test_absurd_safetensors_header(cli, tmp_path):
    directory = write_config(tmp_path / "weights", json.loads((fixture_dir("Qwen--Qwen3-0.6B") / "config.json").read_text()))
    (directory / "model.safetensors").write_bytes(struct.pack("<Q", 1 << 62) + b"{}")
    _fails(cli, [str(directory)], str(directory / "model.safetensors"), "header length")


def test_malformed_generation_config(cli, tmp_path):
    directory = write_config(tmp_path / "gen", json.loads((fixture_dir("Qwen--Qwen3-0.6B") / "config.json").read_text()))
    (directory / "generation_config.json").write_text("{oops")
    _fails(cli, [str(directory)], "generation_config.json")


@pytest.mark.parametrize(
    "args, fragment",
    [
        (["--kv-cache-memory-bytes", "lots"], "--kv-cache-memory-bytes"),
        (["--kv-cache-memory-bytes", "5XB"], "unknown unit"),
        (["--max-model-len", "long"], "--max-model-len"),
        (["--vllm-version", "0.5"], "--vllm-version"),
        (["--vllm-version", "banana"], "--vllm-version"),
        (["--device", "tpu"], "--device"),
        (["--kv-cache-dtype", "int3"], "--kv-cache-dtype"),
        (["--dtype", "float8"], "--dtype"),
        (["--tp", "0"], "--tp"),
    ],
)
def test_bad_options(cli, args, fragment):
    _fails(cli, [LLAMA, *args], fragment)


def test_length_above_the_derived_maximum_is_flagged(cli):
    document = _json(cli, str(fixture_dir("Qwen--Qwen3-8B")), "--max-model-len", "131072", "--kv-cache-memory-bytes", "40GiB")
    assert document["max_context_derived"] == 40960
    assert any("VLLM_ALLOW_LONG_MAX_MODEL_LEN" in warning for warning in document["warnings"])
    assert _json(cli, str(fixture_dir("Qwen--Qwen3-8B")))["warnings"] == []


# models/Org--Name is how the demo names its directories: the Hub refuses "--" in an id, so it is a missing path
# (it was a traceback from huggingface_hub's validator), as is a bare name.
@pytest.mark.parametrize("relative", ["./no-such-model", "../no-such-model", "models/a/b/no-such-model", "models/Qwen--Qwen3-8B", "no-such-model"])
def test_a_relative_model_path_that_is_missing_names_the_absolute_path_tried(cli, relative, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    completed = cli("model", relative, env={"COLUMNS": "500"})
    assert completed.exit_code == 2
    assert f"looked for {(tmp_path / relative).resolve()}" in completed.stderr
    assert "Traceback" not in completed.stderr


def test_a_file_given_as_the_model_directory_is_named_a_file(cli, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "fleet.yaml").write_text("hosts: []\n")
    completed = cli("model", "fleet.yaml", env={"COLUMNS": "500"})
    assert completed.exit_code == 2 and "Traceback" not in completed.stderr
    assert "error: fleet.yaml: is a file, not a model directory" in completed.stderr and "config.json" in completed.stderr


def test_the_breakdown_wraps_under_its_values_at_80_columns(cli):
    """Every line below the table is indented (a value wrapped to the margin read as a new label), fits 80 columns,
    and the one line vLLM itself prints stays whole, as in its log."""
    completed = cli("model", str(fixture_dir("Qwen--Qwen3-8B")), "--kv-cache-memory-bytes", "20GiB",
                        env={"COLUMNS": "80"})
    assert completed.exit_code == 0, completed.stderr
    lines = [line.rstrip() for line in completed.stdout.splitlines()]
    below = lines[next(index for index, line in enumerate(lines) if line.startswith("└")) + 1:]
    log_line = next(line for line in below if "GPU KV cache size:" in line)
    assert log_line.strip().endswith("x") and "Maximum concurrency for 40,960 tokens per request" in log_line
    assert all(line.startswith("  ") for line in below if line), "\n".join(below)
    assert all(len(line) <= 80 for line in below if line != log_line), "\n".join(below)
    assert all(line.startswith("  ") for line in lines[1:lines.index(next(line for line in lines if "KV cache groups" in line))])
