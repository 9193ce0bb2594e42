"""One target per reader: bytes in, "accepted" or "refused" out, an exception for a bug.

The Hypothesis properties (tests/harden/test_reader_properties.py), the coverage-guided fuzzer
(fuzz_readers.py, atheris) and the corpus replay (test_fuzz_corpus.py) all drive readers through these, so
each holds every reader to the same contract:

- a reader ends in a result or a :class:`SeatplanError` naming where and how to fix it; any other exception,
  a hang or unbounded memory is a bug;
- what it accepts is plausible (finite readings, instants between 1970 and 9999, sizes hardware can hold);
- JSON it would print is strict;
- the compiled CSV reader either stops with a reason or agrees with DuckDB.

Each call is tallied per reader and outcome (``TALLY``) for the reliability figures (docs/reliability.md).
"""

from __future__ import annotations

import json
import math
import shutil
import sqlite3
import tempfile
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np

from kits.paths import REPO_ROOT
from seatplan.documents.fleet_file import load_fleet
from seatplan.documents.io import read_observed, read_plan, read_usage
from seatplan.errors import SeatplanError
from seatplan.facts.api import load_model_facts
from seatplan.facts.weights import DTYPE_BYTES, read_safetensors_header
from seatplan.jsontext import dumps_strict
from seatplan.observe.inputs import read_vllm_logs, read_vllm_metrics
from seatplan.observe.sources.beszel import read_beszel
from seatplan.observe.sources.nvidia_smi import read_nvidia_smi
from seatplan.observe.sources.prometheus import read_prometheus_text
from seatplan.output import to_jsonable
from seatplan.units import MAX_PLAUSIBLE_BYTES
from seatplan.usage import csvscan
from seatplan.usage.queries import Window
from seatplan.usage.seat_map import SeatMap
from seatplan.usage.sources import open_source, require_records
from seatplan.usage.summary import collect_usage, require_calls
from seatplan.usage.sweep import default_runaway_rule, lowest_runaway_threshold_tokens

REPO_TESTS = REPO_ROOT / "tests"
LLAMA_CONFIG = REPO_TESTS / "fixtures" / "models" / "meta-llama--Llama-3.1-8B-Instruct" / "config.json"
SPEND_CSV_HEADER = (REPO_TESTS / "fixtures" / "formats" / "litellm_spend_logs.csv").read_text().splitlines()[0] + "\n"
LATEST_EPOCH_S = 253_402_300_799

TALLY: Counter[tuple[str, str]] = Counter()


class PropertyViolated(AssertionError):
    """A reader accepted something it must not, or answered in a way the contract forbids."""


@contextmanager
def scratch() -> Iterator[Path]:
    directory = Path(tempfile.mkdtemp(prefix="seatplan-fuzz-"))
    try:
        yield directory
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def judged(reader: str, run: Callable[[], None]) -> str:
    """Run one reader; "accepted" or "refused" (a located, worded SeatplanError); anything else propagates."""
    try:
        run()
    except SeatplanError as problem:
        if not problem.where or not problem.fix or not problem.message:
            raise PropertyViolated(f"{reader}: an error without where/fix: {problem!r} where={problem.where!r} "
                                   f"fix={problem.fix!r}") from problem
        TALLY[(reader, "refused")] += 1
        return "refused"
    TALLY[(reader, "accepted")] += 1
    return "accepted"


def judged_file(reader: str, name: str, data: bytes, run: Callable[[Path], None]) -> str:
    """``data`` written to a scratch file ``name``, then :func:`judged` with ``run(path)``."""
    with scratch() as directory:
        path = directory / name
        path.write_bytes(data)
        return judged(reader, lambda: run(path))


def check(condition: bool, message: str) -> None:
    if not condition:
        raise PropertyViolated(message)


def strict_json(document: object) -> None:
    """What ``--json`` would print must be strict JSON."""
    text = dumps_strict(to_jsonable(document))
    json.loads(text, parse_constant=lambda constant: (_ for _ in ()).throw(PropertyViolated(constant)))


# ------------------------------------------------------------------------------------------- the targets

def fleet(data: bytes) -> str:
    return judged_file("fleet YAML", "fleet.yaml", data, load_fleet)


def config(data: bytes) -> str:
    with scratch() as directory:
        (directory / "config.json").write_bytes(data)

        def run() -> None:
            facts = load_model_facts(directory)
            for name in ("weights_total_bytes", "kv_bytes_per_token", "bytes_per_block", "state_bytes_per_request"):
                value = getattr(facts, name)
                check(0 <= value <= MAX_PLAUSIBLE_BYTES, f"config accepted with {name} = {value}")
            strict_json(facts)
        return judged("config.json", run)


def safetensors(data: bytes) -> str:
    def run(path: Path) -> None:
        for tensor in read_safetensors_header(path):
            check(0 <= tensor.nbytes <= len(data), f"tensor {tensor.name!r} claims {tensor.nbytes} bytes of {len(data)}")
            if tensor.dtype in DTYPE_BYTES:
                check(math.prod(tensor.shape) * DTYPE_BYTES[tensor.dtype] == tensor.nbytes, "shape disagrees with bytes")
    return judged_file("safetensors header", "model.safetensors", data, run)


def vllm_log(data: bytes) -> str:
    def run(path: Path) -> None:
        boots, stats = read_vllm_logs([str(path)], year=2026)
        check(bool(boots or stats), "a vLLM log accepted with nothing found in it")
        strict_json([boot.model_dump(mode="json") for boot in boots] + [stat.model_dump(mode="json") for stat in stats])
    return judged_file("vLLM log", "vllm.log", data, run)


def _check_series(series, reader: str) -> None:
    for one in series:
        check(bool(((one.times_s >= 0) & (one.times_s <= LATEST_EPOCH_S)).all()), f"{reader}: a time outside 1970..9999")
        used = one.used_mib[~np.isnan(one.used_mib)]
        check(bool((np.isfinite(used) & (used >= 0)).all()), f"{reader}: a reading that is not a finite MiB count")


def nvidia_smi(data: bytes) -> str:
    def run(path: Path) -> None:
        series, processes = read_nvidia_smi(path)
        check(bool(series or processes), "an nvidia-smi CSV accepted with no reading")
        _check_series(series, "nvidia-smi")
        check(all(math.isfinite(p.used_mib) or math.isnan(p.used_mib) for p in processes), "a process reading is infinite")
    return judged_file("nvidia-smi CSV", "smi.csv", data, run)


def prometheus(data: bytes) -> str:
    def run(path: Path) -> None:
        series, stats = read_prometheus_text(path)
        check(bool(series or stats), "exposition text accepted with nothing found in it")
        _check_series(series, "Prometheus text")
        strict_json([stat.model_dump(mode="json") for stat in stats])

    def metrics(path: Path) -> None:
        stats = read_vllm_metrics([str(path)])
        check(bool(stats), "a /metrics file accepted with no vLLM gauge")
        strict_json([stat.model_dump(mode="json") for stat in stats])
    judged_file("vLLM /metrics", "metrics.txt", data, metrics)
    return judged_file("Prometheus text", "scrape.prom", data, run)


BESZEL_SCHEMA = (
    "CREATE TABLE systems (id TEXT PRIMARY KEY NOT NULL, name TEXT DEFAULT '' NOT NULL);"
    "CREATE TABLE system_stats (created TEXT DEFAULT '' NOT NULL, id TEXT PRIMARY KEY NOT NULL, stats JSON DEFAULT NULL,"
    " system TEXT DEFAULT '' NOT NULL, type TEXT DEFAULT '' NOT NULL);"
    "INSERT INTO systems VALUES ('sys1', 'gpu-node');"
)


def beszel(data: bytes) -> str:
    """Rows of a hub database from the bytes: each line is ``created<TAB>type<TAB>stats``."""
    with scratch() as directory:
        path = directory / "data.db"
        connection = sqlite3.connect(path)
        connection.executescript(BESZEL_SCHEMA)
        for number, line in enumerate(data.decode("utf-8", "replace").split("\n")):
            created, _, rest = line.partition("\t")
            record_type, _, stats = rest.partition("\t")
            connection.execute("INSERT INTO system_stats VALUES (?, ?, ?, 'sys1', ?)", (created, f"r{number}", stats, record_type))
        connection.commit()
        connection.close()

        def run() -> None:
            series = read_beszel(path)
            check(bool(series), "a Beszel database accepted with no GPU reading")
            _check_series(series, "Beszel")
        return judged("Beszel database", run)


def document(data: bytes) -> str:
    with scratch() as directory:
        path = directory / "document.json"
        path.write_bytes(data)
        outcomes = [judged(f"{name} document", lambda read=read: read(path))
                    for name, read in (("usage", read_usage), ("observed", read_observed), ("plan", read_plan))]
        check(outcomes.count("accepted") <= 1, "one document read as two kinds")
        return "accepted" if "accepted" in outcomes else "refused"


def _usage(path: Path, fast: bool):
    rule = default_runaway_rule(None)
    require_records(str(path))
    with open_source(str(path), lowest_runaway_threshold_tokens(rule, []), fast_csv=fast) as source:
        report = collect_usage(source, Window(), SeatMap(), rule)
        require_calls(report)
        return report, source.reader


def spend_csv(data: bytes) -> str:
    """A spend-log CSV (the real header, then the bytes): the compiled reader stops with a reason or agrees with DuckDB."""
    def run(path: Path) -> None:
        slow, slow_reader = _usage(path, fast=False)
        check(slow_reader == "duckdb", "the DuckDB reading was not DuckDB's")
        strict_json(slow)
        if csvscan.available():
            fast, reader = _usage(path, fast=True)
            if reader == "fast":
                check(fast.model_dump(exclude={"reader"}) == slow.model_dump(exclude={"reader"}),
                      "the compiled CSV reader took the file and disagrees with DuckDB")
            else:
                check(fast.reader.startswith("DuckDB"), f"the compiled reader stopped without a reason: {fast.reader!r}")
    return judged_file("spend-log CSV", "spend.csv", SPEND_CSV_HEADER.encode() + data, run)


def spend_jsonl(data: bytes) -> str:
    return judged_file("spend-log JSONL", "spend.jsonl", data, lambda path: strict_json(_usage(path, fast=False)[0]))


TARGETS: dict[str, Callable[[bytes], str]] = {
    "fleet": fleet, "config": config, "safetensors": safetensors, "vllm_log": vllm_log, "nvidia_smi": nvidia_smi,
    "prometheus": prometheus, "beszel": beszel, "document": document, "spend_csv": spend_csv, "spend_jsonl": spend_jsonl,
}
