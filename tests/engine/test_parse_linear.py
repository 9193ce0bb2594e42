"""engine.parse reads a command of n flags in steps linear in n (issue 48: an env file of 50,000 flags ran for
minutes, since each new flag scanned every flag seen). Steps are counted (Python line events inside
``read_vllm_args``), not timed: 4× the flags must cost about 4× the steps, where the old reader took about 16×.
The speed itself is measured by benchmarks/bench_parse.py."""

from __future__ import annotations

import sys
from collections.abc import Sequence

from seatplan.engine.parse import flag_table, read_vllm_args


def _random_command(rng, count: int) -> list[str]:
    """``count`` flags over the whole range a hand-written file holds: unknown ones, vLLM's own (spelled out,
    with ``_``, as ``--x=v``, switches), repeats, each with or without a value."""
    known = sorted(name for name in flag_table() if name.startswith("--"))
    words = ["/models/m"]
    for index in range(count):
        kind = rng.random()
        if kind < 0.5:
            words += [f"--f{rng.randrange(count * 2)}", "v"]
        elif kind < 0.7:
            name = rng.choice(known)
            words += [name.replace("-", "_") if rng.random() < 0.2 else name]
            if flag_table()[name].kind != "switch":
                words.append(str(rng.randrange(100)))
        elif kind < 0.85:
            words.append(f"--f{index}=x{index}")
        else:
            words.append(f"--switch-{rng.randrange(count)}")
    return words


def _steps(words: Sequence[str]) -> int:
    count = 0

    def trace(frame, event, arg):  # noqa: ARG001 (sys.settrace's signature)
        nonlocal count
        if event == "line":
            count += 1
        return trace

    previous = sys.gettrace()
    sys.settrace(trace)
    try:
        read_vllm_args(words)
    finally:
        sys.settrace(previous)
    return count


def test_four_times_the_flags_take_about_four_times_the_steps(rng):
    for _ in range(3):
        small = rng.randint(300, 600)
        few, many = _steps(_random_command(rng, small)), _steps(_random_command(rng, small * 4))
        assert many < 6 * few, (small, few, many)


def test_the_last_of_many_spellings_wins_as_before(rng):
    """The index that made it linear keeps the rule it replaced: --x and --no-x (and _ for -) set one value."""
    count = rng.randint(50, 400)
    words = ["/m"]
    for _ in range(count):
        words.append(rng.choice(["--enable-prefix-caching", "--no-enable-prefix-caching", "--enable_prefix_caching"]))
    read = read_vllm_args(words)
    caching = [flag for flag in read.flags if "prefix-caching" in flag]
    assert caching == [words[-1].replace("_", "-")]
    assert len(read.written) == count
