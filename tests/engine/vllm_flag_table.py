"""Dump vLLM's own server parser as seatplan's flag table (src/seatplan/engine/vllm_flags.json).

Run with the vLLM test virtualenv's interpreter (it imports vLLM):
    ~/.cache/seatplan/vllm-0.32.0/bin/python tests/engine/vllm_flag_table.py > src/seatplan/engine/vllm_flags.json
tests/engine/test_vllm_args.py runs it and compares its output with the stored table.
"""

import argparse
import json

import vllm
from vllm.entrypoints.launchers.cli_args import make_arg_parser
from vllm.utils.argparse_utils import FlexibleArgumentParser, human_readable_int, human_readable_int_or_auto

KINDS = {None: "value", 0: "switch", "?": "optional", "+": "some", "*": "any"}
NUMBERS = {human_readable_int: "human", human_readable_int_or_auto: "human_or_auto", int: "int"}


def value_type(action: argparse.Action) -> object:
    """The type that reads the value: vLLM wraps an ``int | None`` field's in ``optional_type`` (vllm/engine/arg_utils.py)."""
    kind = action.type
    if getattr(kind, "__name__", "") == "_optional_type" and kind.__closure__:
        kind = kind.__closure__[0].cell_contents
    return kind


def table() -> dict:
    flags = {}
    for action in make_arg_parser(FlexibleArgumentParser())._actions:
        if not action.option_strings:
            continue  # the positional model_tag
        name = next(option for option in action.option_strings if option.startswith("--"))
        kind = "switch" if isinstance(action, argparse.BooleanOptionalAction) else KINDS[action.nargs]
        for option in action.option_strings:
            flags[option] = [name, kind, NUMBERS.get(value_type(action))]
    return {"vllm": vllm.__version__, "flags": dict(sorted(flags.items()))}


if __name__ == "__main__":
    dumped = table()
    lines = [f"  {json.dumps(option)}: {json.dumps(shape)}" for option, shape in dumped["flags"].items()]
    print(f'{{"vllm": {json.dumps(dumped["vllm"])}, "flags": {{\n' + ",\n".join(lines) + "\n}}")
