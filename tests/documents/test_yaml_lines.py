"""The general line-aware YAML loader (``documents.yaml_lines``) under the fleet file, for any YAML a stage reads:
the line of every key and item by path, and errors located and named for the file they are about."""

from __future__ import annotations

import random

import pytest

from seatplan.documents.yaml_lines import MAX_YAML_NODES, format_path, line_of, read_yaml_lines
from seatplan.errors import SeatplanError


def test_every_key_and_item_has_its_line(rng: random.Random) -> None:
    services = {f"s{number}": rng.randint(1, 65535) for number in range(rng.randint(1, 30))}
    text = "services:\n" + "".join(f"  {name}:\n    ports: [{port}]\n" for name, port in services.items())
    data, lines = read_yaml_lines(text, "compose.yaml", "compose file")
    assert data == {"services": {name: {"ports": [port]} for name, port in services.items()}}
    for number, name in enumerate(services):
        assert lines[("services", name)] == 2 + 2 * number
        assert line_of(lines, ("services", name, "ports", 0, "deeper")) == 3 + 2 * number
    assert format_path(("services", "s0", "ports", 0)) == "services.s0.ports[0]"


@pytest.mark.parametrize(("text", "said", "line"), [
    ("", "the compose file is empty", None),
    ("a: 1\na: 2\n", "a: key given twice", 2),
    ("a: [1\n", "not valid YAML", 2),
    ("x: &a [" + ",".join(["1"] * 400) + "]\ny: &b [" + ",".join(["*a"] * 400) + "]\n", f"the compose file expands to more than {MAX_YAML_NODES:,}", None),
])
def test_errors_name_the_file_and_the_line(text: str, said: str, line: int | None) -> None:
    with pytest.raises(SeatplanError) as raised:
        read_yaml_lines(text, "compose.yaml", "compose file", empty_fix="give the compose file")
    assert said in raised.value.message and raised.value.where.startswith("compose.yaml")
    if line is not None:
        assert raised.value.where == f"compose.yaml:{line}"
