"""The fleet loader's own rules, asked of one value adopt read before it is written.

Pure. A value the loader would refuse (an image compose interpolates, a health URL with a shell character)
must not reach the fleet file as a value: ``plan`` would then refuse the file at a line that is no TODO.
Adopt asks here, writes TODO or leaves the key out, and warns; the rules stay where the loader keeps them
(``documents.fleet.SeatSpec`` and ``documents.fleet_file.control_problems``), never copied.
"""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from seatplan.documents.fleet import HostSpec, SeatSpec
from seatplan.documents.fleet_file import control_problems


def seat_value_problem(key: str, value: Any, engine: str = "fixed") -> str | None:
    """Why the fleet loader would refuse ``value`` as ``seats[].<key>`` of a seat of ``engine``, or None if it takes it."""
    controls = control_problems(value)
    if controls:
        return controls[0].message
    try:
        SeatSpec.model_validate({"name": "adopted", "engine": engine, key: value})
    except ValidationError as error:
        return str(error.errors(include_url=False)[0]["msg"]).removeprefix("Value error, ")
    return None


def host_value_problem(key: str, value: Any) -> str | None:
    """Why the fleet loader would refuse ``value`` as ``hosts[].<key>``, or None if it takes it."""
    controls = control_problems(value)
    if controls:
        return controls[0].message
    try:
        HostSpec.model_validate({"name": "adopted", "gpus": [{"index": 0, "total_bytes": 1}], key: value})
    except ValidationError as error:
        return str(error.errors(include_url=False)[0]["msg"]).removeprefix("Value error, ")
    return None
