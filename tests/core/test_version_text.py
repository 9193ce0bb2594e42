"""versions.modelled takes a version as releases write it and nothing more (issue 48: `vllm_version:
0.11.0+$(touch …)` passed into plan.json, since only the leading numbers were read)."""

from __future__ import annotations

import pytest

from seatplan.versions import modelled


def test_release_spellings_are_taken(rng):
    for _ in range(300):
        text = f"{rng.choice(['', 'v'])}0.{rng.randint(8, 32)}" + rng.choice(["", f".{rng.randint(0, 9)}"]) + rng.choice(
            ["", f"rc{rng.randint(1, 3)}", f".dev{rng.randint(0, 999)}", f"rc1.dev{rng.randint(1, 999)}", ".post1"]) + rng.choice(
            ["", "+cu128", f"+g{rng.randrange(16**7):07x}", "+cpu.avx2"])
        assert modelled(text)[:2] >= (0, 8), text


@pytest.mark.parametrize("tail", ["+$(touch /tmp/x)", "\n--trust-remote-code", " ", ";rm", "+cu128 x", "`id`", "+", "..1", "\x1b[2J"])
def test_anything_after_the_version_is_refused(tail, rng):
    with pytest.raises(ValueError, match="is not a vLLM version"):
        modelled(f"0.{rng.randint(8, 32)}.{rng.randint(0, 3)}{tail}")
