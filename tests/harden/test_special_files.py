"""Outputs and inputs that are no regular file (issue 30 item 6), and whole numbers from foreign text (item 7).

``-o`` to a character device writes to it and leaves it a device (the atomic write's rename would put a regular
file where ``/dev/null`` was, as root); ``-o`` to a FIFO or a folder is an error before the work. An input that is a
FIFO (a read would wait for a writer for ever) or a device (``/dev/zero`` never ends) is an error naming it, for
every kind of input file. Every run is the real entry point, in-process, under this module's timeout mark: a hang
fails the test.
"""

from __future__ import annotations

import os
import stat
import unicodedata
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kits.paths import MODEL_FIXTURES
from kits.plan import one_host, write_fleet
from seatplan.errors import SeatplanError
from seatplan.fileio import atomic_write_text
from seatplan.units import MAX_WHOLE_NUMBER_DIGITS, strict_whole_number, whole_number

pytestmark = pytest.mark.timeout(120)
QWEN3_8B = MODEL_FIXTURES / "Qwen--Qwen3-8B"


def fleet(tmp_path: Path) -> Path:
    return write_fleet(tmp_path, one_host(gpus=1) + f"seats:\n  - {{name: qwen, model: {QWEN3_8B}, port: 8000, max_model_len: 8192}}\n")


def fifo(tmp_path: Path, name: str) -> Path:
    path = tmp_path / name
    os.mkfifo(path)
    return path


def test_o_to_a_character_device_writes_to_it_and_leaves_it_a_device(cli, tmp_path):
    done = cli("plan", str(fleet(tmp_path)), "-o", os.devnull, "--json")
    assert done.exit_code == 0, done.stderr
    assert stat.S_ISCHR(os.stat(os.devnull).st_mode)
    assert not list(Path(os.devnull).parent.glob(".null.*.tmp"))


def test_the_atomic_write_to_a_device_neither_reads_it_nor_replaces_it(tmp_path):
    """/dev/zero read as "the old content" would never end; written as a device it takes the bytes and stays."""
    assert atomic_write_text("/dev/zero", "x" * 1000) is None
    assert stat.S_ISCHR(os.stat("/dev/zero").st_mode)


@pytest.mark.parametrize("kind", ["fifo", "folder"])
def test_o_to_a_fifo_or_a_folder_is_an_error_before_the_work(cli, tmp_path, kind):
    target = fifo(tmp_path, "out.json") if kind == "fifo" else tmp_path / "out"
    target.mkdir() if kind == "folder" else None
    done = cli("plan", str(fleet(tmp_path)), "-o", str(target), "--json")
    assert done.exit_code == 2 and "Traceback" not in done.stderr
    assert ("FIFO" if kind == "fifo" else "folder") in done.stderr and "fix:" in done.stderr
    assert stat.S_ISFIFO(target.stat().st_mode) if kind == "fifo" else target.is_dir()


def plan_fleet(path: Path, tmp_path: Path) -> list[str]:
    return ["plan", str(path)]


def plan_usage(path: Path, tmp_path: Path) -> list[str]:
    return ["plan", str(fleet(tmp_path)), "--usage", str(path)]


def diagnose_smi(path: Path, tmp_path: Path) -> list[str]:
    return ["diagnose", "--nvidia-smi", str(path)]


def diagnose_log(path: Path, tmp_path: Path) -> list[str]:
    return ["diagnose", "--vllm-log", str(path)]


def diagnose_prometheus_text(path: Path, tmp_path: Path) -> list[str]:
    return ["diagnose", "--prometheus", str(path)]


def diagnose_metrics(path: Path, tmp_path: Path) -> list[str]:
    return ["diagnose", "--vllm-metrics", str(path)]


def usage_export(path: Path, tmp_path: Path) -> list[str]:
    return ["usage", "--from", str(path)]


def usage_key_file(path: Path, tmp_path: Path) -> list[str]:
    return ["usage", "--from", "http://127.0.0.1:9/", "--key-env", "SEATPLAN_NO_SUCH_KEY", "--key-file", str(path)]


READERS: dict[str, tuple[str, Callable[[Path, Path], list[str]]]] = {
    "fleet": ("fleet.yaml", plan_fleet), "usage-document": ("usage.json", plan_usage), "nvidia-smi": ("smi.csv", diagnose_smi),
    "vllm-log": ("vllm.log", diagnose_log), "exposition": ("dcgm.prom", diagnose_prometheus_text),
    "metrics": ("metrics.prom", diagnose_metrics), "spend-export": ("spend.csv", usage_export),
    "secret-file": ("key", usage_key_file),
}


@pytest.mark.parametrize("reader", READERS)
@pytest.mark.parametrize("kind", ["fifo", "device"])
def test_an_input_that_is_a_fifo_or_a_device_is_an_error_never_a_hang(cli, tmp_path, reader, kind):
    name, command = READERS[reader]
    path = fifo(tmp_path, name) if kind == "fifo" else tmp_path / name
    if kind == "device":
        path.symlink_to("/dev/zero")  # named as the reader expects (a suffix picks the format), a device behind it
    done = cli(*command(path, tmp_path), env={"SEATPLAN_NO_SUCH_KEY": None})
    assert done.exit_code == 2, done.stderr
    assert "Traceback" not in done.stderr and "fix:" in done.stderr
    assert ("FIFO" if kind == "fifo" else "character device") in done.stderr, done.stderr


def test_a_model_directory_whose_config_is_a_fifo_is_an_error(cli, tmp_path):
    model = tmp_path / "model"
    model.mkdir()
    os.mkfifo(model / "config.json")
    done = cli("model", str(model))
    assert done.exit_code == 2 and "FIFO" in done.stderr and "Traceback" not in done.stderr


# ----------------------------------------------------------------------------- whole numbers from foreign text

UNICODE_DIGITS = [character for character in map(chr, range(0x80, 0x3000))
                  if unicodedata.category(character) == "Nd" or character.isdigit()]


@given(st.integers(min_value=0, max_value=10**MAX_WHOLE_NUMBER_DIGITS - 1), st.sampled_from(["", " ", "\t"]))
def test_ascii_digits_in_range_are_read_as_written(number, space):
    assert whole_number(f"{space}{number}{space}", maximum=10**MAX_WHOLE_NUMBER_DIGITS) == number
    assert whole_number(str(number), maximum=number - 1) is None if number else True


@given(st.text(alphabet=st.sampled_from([*UNICODE_DIGITS, *"0123456789"]), min_size=1, max_size=8))
def test_any_digit_outside_ascii_makes_it_no_number(text):
    """str.isdigit() and int() take these ("²", "٨٠٠٦" as 8006): the one reader does not."""
    expected = int(text) if all(character in "0123456789" for character in text) else None
    assert whole_number(text, maximum=10**9) == expected


@pytest.mark.parametrize("text", ["²", "٨٠٠٦", "8006\x00", "-3", "+3", "3.5", "1e3", "0x10", "", " ", "1_000", "١"])
def test_foreign_spellings_are_refused(text):
    assert whole_number(text, maximum=10**9) is None


def test_a_400_digit_figure_or_one_past_the_largest_gpu_is_refused_naming_the_field(rng):
    huge = "".join(rng.choice("0123456789") for _ in range(400))
    for text, said in ((huge, "not a whole number"), (str((8 << 40) + rng.randint(1, 1 << 40)), "outside")):
        with pytest.raises(SeatplanError) as refused:
            strict_whole_number(text, field="kv_cache_memory_bytes", where="GET /metrics", maximum=8 << 40)
        assert "kv_cache_memory_bytes" in refused.value.message and said in refused.value.message
        assert refused.value.where == "GET /metrics" and len(refused.value.message) < 200
    assert whole_number("12.0", maximum=99, point_zero=True) == 12 and whole_number("12.0", maximum=99) is None
