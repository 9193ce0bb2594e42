"""Damaged configs (values of the wrong type or range, keys missing) give a SeatplanError naming the
file, never another exception and never a huge allocation."""

from __future__ import annotations

import json

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kits.facts import FIXTURE_MODEL_DIRS, facts, write_config
from seatplan.errors import SeatplanError

CONFIGS = {path.name: json.loads((path / "config.json").read_text()) for path in FIXTURE_MODEL_DIRS}
JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(min_value=-(2**70), max_value=2**70) | st.floats(allow_nan=False)
    | st.text(max_size=8),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=6), children, max_size=4),
    max_leaves=8,
)


@st.composite
def damaged(draw):
    name = draw(st.sampled_from(sorted(CONFIGS)))
    config = json.loads(json.dumps(CONFIGS[name]))
    target = config.get("text_config", config) if draw(st.booleans()) else config
    nested = sorted(key for key, value in target.items() if isinstance(value, dict) and value)
    if nested and draw(st.booleans()):
        target = target[draw(st.sampled_from(nested))]  # e.g. rope_scaling, quantization_config
    for key in draw(st.lists(st.sampled_from(sorted(target)), min_size=1, max_size=3, unique=True)):
        if draw(st.booleans()):
            del target[key]
        else:
            target[key] = draw(JSON_VALUES)
    return config


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(config=damaged())
def test_damaged_config_is_facts_or_a_seatplan_error(tmp_path, config):
    directory = write_config(tmp_path / "damaged", config)
    try:
        model = facts(directory)
    except SeatplanError as problem:
        assert str(directory / "config.json") in (problem.where or "") or "--" in (problem.where or "")
        return
    model.capacity(1 << 30, min(model.max_context_default, 1 << 20))
