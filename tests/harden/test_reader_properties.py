"""Property tests for every reader: any input ends in a result or a located, worded error, never a traceback.

The inputs are built from each format's real lines, then damaged: fields swapped for hostile values (NaN,
10^400, negative, empty, wrong type, non-UTF-8), lines cut, duplicated, shuffled and mixed with noise. The
targets (tests/kits/fuzz_targets.py) hold each reader to the contract; a violation is a failing example that
Hypothesis shrinks. Inputs that once broke a reader are kept in tests/fuzz/corpus/ (test_fuzz_corpus.py).
"""

from __future__ import annotations

import json
import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kits import fuzz_targets as targets
from kits.paths import FIXTURES, FORMAT_FIXTURES

CHEAP = settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
SLOW = settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))

HOSTILE_NUMBERS = ["NaN", "nan", "Infinity", "-Infinity", "inf", "1e400", "-1", "0", "1e20", "100000000000000000000",
                   "3.5", "", "null", "true", "\"7\"", "[]", "{}", "0x10", "9" * 400]
noise = st.binary(max_size=64)


def damaged_lines(lines: list[str]):
    """Real lines, then each kept, dropped, cut, doubled, or its numbers replaced by hostile values."""
    def damage(line: str, how: int, value: str, cut: int) -> list[str]:
        if how == 0:
            return [line]
        if how == 1:
            return []
        if how == 2:
            return [line[: cut % (len(line) + 1)]]
        if how == 3:
            return [line, line]
        return [re.sub(r"-?\d+(?:\.\d+)?", value, line, count=1 + cut % 3)]

    return st.lists(st.tuples(st.sampled_from(lines), st.integers(0, 4), st.sampled_from(HOSTILE_NUMBERS),
                              st.integers(0, 500)), max_size=40).map(
        lambda picks: [out for line, how, value, cut in picks for out in damage(line, how, value, cut)])


def as_bytes(lines_strategy, extra=noise):
    return st.tuples(lines_strategy, extra, st.booleans()).map(
        lambda parts: ("\n".join(parts[0]) + "\n").encode("utf-8", "surrogatepass") + (parts[1] if parts[2] else b""))


def real_lines(path) -> list[str]:
    return [line for line in path.read_text(errors="replace").splitlines() if line.strip()][:400]


# ------------------------------------------------------------------------------------------- observe readers

@CHEAP
@given(as_bytes(damaged_lines(real_lines(FORMAT_FIXTURES / "nvidia_smi_query_gpu.csv"))
                .map(lambda lines: ["timestamp, index, memory.used [MiB], memory.total [MiB]"] + lines)))
def test_nvidia_smi_csv(data: bytes) -> None:
    targets.nvidia_smi(data)


@CHEAP
@given(as_bytes(damaged_lines(real_lines(FORMAT_FIXTURES / "nvidia_smi_compute_apps_with_uuid.csv"))))
def test_nvidia_smi_compute_apps_csv(data: bytes) -> None:
    targets.nvidia_smi(data)


@CHEAP
@given(as_bytes(damaged_lines(real_lines(FORMAT_FIXTURES / "dcgm_exporter_metrics.prom")
                              + real_lines(FORMAT_FIXTURES / "vllm_metrics.prom"))))
def test_prometheus_text_and_vllm_metrics(data: bytes) -> None:
    targets.prometheus(data)


@CHEAP
@given(as_bytes(damaged_lines(real_lines(FIXTURES / "vllm-startup-logs.txt"))))
def test_vllm_log(data: bytes) -> None:
    targets.vllm_log(data)


beszel_gpu = st.fixed_dictionaries({}, optional={
    "mu": st.one_of(st.floats(allow_nan=False, allow_infinity=False), st.integers(), st.text(max_size=3), st.none()),
    "mt": st.one_of(st.floats(allow_nan=False, allow_infinity=False), st.integers(-5, 10**6), st.booleans()),
})
beszel_stats = st.one_of(
    st.builds(lambda gpus: json.dumps({"g": gpus}), st.dictionaries(st.sampled_from(["0", "1", "x", "-1"]), beszel_gpu, max_size=2)),
    st.sampled_from(['{"g": {"0": {"mu": 1e400}}}', '{"g": ', '{"g": {"0": {"mu": NaN}}}', '{"g": [1]}', "null", "",
                     '{"g": {"0": 5}}', '{"cpu": 1}']),
)
beszel_created = st.one_of(st.sampled_from(["2026-11-27 10:00:00.000Z", "2026-11-27 10:10:00.123Z", "2026-02-30 00:00:00",
                                            "9999-12-31 23:59:59.999Z", "0001-01-01 00:00:00", "yesterday", ""]),
                           st.text(max_size=25))


@CHEAP
@given(st.lists(st.tuples(beszel_created, st.sampled_from(["1m", "10m", "480m", "x", ""]), beszel_stats), max_size=12))
def test_beszel_database(rows: list[tuple[str, str, str]]) -> None:
    targets.beszel("\n".join(f"{created}\t{kind}\t{stats}" for created, kind, stats in rows).encode("utf-8", "surrogatepass"))


# ------------------------------------------------------------------------------------------- model files

LLAMA = json.loads(targets.LLAMA_CONFIG.read_text())
json_hostile = st.one_of(st.integers(-3, 3), st.integers(), st.sampled_from([10**18, 2**31, 2**63, 10**400]),
                         st.floats(), st.text(max_size=4), st.none(), st.booleans(), st.lists(st.integers(0, 4), max_size=2),
                         st.dictionaries(st.sampled_from(["type", "factor", "rope_type"]), st.integers(0, 8), max_size=2))
config_keys = st.sampled_from(sorted(LLAMA) + ["head_dim", "sliding_window", "layer_types", "num_experts", "kv_lora_rank",
                                               "text_config", "quantization_config", "n_head_kv", "torch_dtype"])


def _config_bytes(changes: dict, deep: int, tail: bytes) -> bytes:
    config = dict(LLAMA)
    config.update(changes)
    text = json.dumps(config, allow_nan=True).encode()
    if deep:
        text = text[:-1] + b', "x": ' + b"[" * deep + b"]" * deep + b"}"
    return text + tail


@CHEAP
@given(st.builds(_config_bytes, st.dictionaries(config_keys, json_hostile, max_size=4), st.sampled_from([0, 0, 0, 70, 5000]),
                 st.sampled_from([b"", b"", b"\xff", b"}"])))
def test_config_json(data: bytes) -> None:
    targets.config(data)


def _safetensors_bytes(tensors: list, declared_extra: int, data_bytes: int, tail: bytes) -> bytes:
    header = json.dumps({name: {"dtype": dtype, "shape": shape, "data_offsets": offsets}
                         for name, dtype, shape, offsets in tensors}).encode() + tail
    return (len(header) + declared_extra).to_bytes(8, "little") + header + b"\0" * data_bytes


@CHEAP
@given(st.builds(_safetensors_bytes,
                 st.lists(st.tuples(st.sampled_from(["w", "model.embed_tokens.weight", "__metadata__"]),
                                    st.sampled_from(["F16", "BF16", "F64", "I8", "Q4", ""]),
                                    st.lists(st.one_of(st.integers(0, 8), st.integers(), st.just(10**12)), max_size=3),
                                    st.lists(st.integers(-2, 64), min_size=0, max_size=3)), max_size=3),
                 st.sampled_from([0, 0, 1, -1, 2**40]), st.integers(0, 64), st.sampled_from([b"", b"\xff", b"[" * 3000])))
def test_safetensors_header(data: bytes) -> None:
    if len(data) >= 8 and int.from_bytes(data[:8], "little") >= 2**63:
        data = data[8:]
    targets.safetensors(data)


# ------------------------------------------------------------------------------------------- fleet and documents

FLEET = (FIXTURES.parent.parent / "examples" / "demo" / "fleet.yaml")


FLEET_LINES = FLEET.read_text().splitlines()


def _fleet_with(position: int, value: str) -> list[str]:
    """The demo fleet whole, with one number or word of one line swapped for a hostile value."""
    lines = list(FLEET_LINES)
    index = position % len(lines)
    lines[index] = re.sub(r"(?<=: )[^,{}\[\]\n]+", value, lines[index], count=1)
    return lines


@CHEAP
@given(as_bytes(st.one_of(damaged_lines(FLEET_LINES), st.builds(_fleet_with, st.integers(0, 10_000), st.sampled_from(
    HOSTILE_NUMBERS + ["*a", "&a x", "!!binary AAAA", "'", "published", "1e400GiB", "-5GiB", "0"]))),
                st.sampled_from([b"", b"a: &a [*a]", b"x: !!python/object:os.system ls", b"- [" * 200, b"\t\x00"])))
def test_fleet_yaml(data: bytes) -> None:
    targets.fleet(data)


documents = st.one_of(
    st.builds(lambda kind, version, body: json.dumps({"kind": kind, "version": version, **body}).encode(),
              st.sampled_from(["seatplan.usage", "seatplan.observed", "seatplan.plan", "other", None]),
              st.sampled_from([1, 0, 2, "1", None, 1.0]),
              st.dictionaries(st.sampled_from(["models", "seats", "gpus", "rejected_rows"]),
                              st.one_of(st.dictionaries(st.text(max_size=3), st.integers(), max_size=2), st.lists(st.integers(), max_size=2),
                                        st.integers(), st.none()), max_size=3)),
    st.binary(max_size=40),
    st.sampled_from([b"[" * 5000, b'{"kind": "seatplan.usage", "version": 1, "models": {"m": {"calls": 1e400}}}', b"NaN"]),
)


@CHEAP
@given(documents)
def test_documents(data: bytes) -> None:
    targets.document(data)


# ------------------------------------------------------------------------------------------- spend logs

SPEND_LINES = real_lines(FORMAT_FIXTURES / "litellm_spend_logs.csv")[1:60]
JSONL_LINES = real_lines(FORMAT_FIXTURES / "litellm_spend_logs.jsonl")[:60]


@SLOW
@given(as_bytes(damaged_lines(SPEND_LINES), st.sampled_from([b"", b"\xff\xfe", b'"', b",,,\n"])))
def test_spend_log_csv(data: bytes) -> None:
    targets.spend_csv(data)


@SLOW
@given(as_bytes(damaged_lines(JSONL_LINES), st.sampled_from([b"", b"\xff\xfe", b"[", b"{}\n"])))
def test_spend_log_jsonl(data: bytes) -> None:
    targets.spend_jsonl(data)


@pytest.mark.parametrize("data", [b"", b"\n", b"garbage\n", b"\x00" * 10])
def test_spend_logs_with_nothing_are_refused(data: bytes) -> None:
    assert targets.spend_csv(data) == "refused"
    assert targets.spend_jsonl(data) == "refused"
