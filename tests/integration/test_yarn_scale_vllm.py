"""The YaRN cost the plan shows (the attention scale at a factor) is vLLM's own ``yarn_get_mscale``, imported from
the vLLM test virtualenv (seatplan never imports vLLM), at factors drawn over the range YaRN is used."""

from __future__ import annotations

import json
import random
import subprocess
from pathlib import Path

import pytest

from seatplan.plan.sizing import yarn_attention_scale

pytestmark = pytest.mark.vllm

PROBE = """
import json, sys
from vllm.model_executor.layers.rotary_embedding.common import yarn_get_mscale
print(json.dumps([yarn_get_mscale(factor) for factor in json.loads(sys.stdin.read())]))
"""


def test_the_attention_scale_shown_is_vllm_s(vllm_python_path: Path, rng: random.Random):
    factors = [1.0, 2.0, 4.0] + [round(rng.uniform(1.01, 8.0), 2) for _ in range(20)]
    done = subprocess.run([str(vllm_python_path), "-c", PROBE], input=json.dumps(factors), capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    theirs = json.loads(done.stdout.strip().splitlines()[-1])
    assert [yarn_attention_scale(factor) for factor in factors] == pytest.approx(theirs, rel=1e-12)
