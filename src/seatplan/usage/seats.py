"""Which LiteLLM model names belong to which fleet seat.

Only ``seats[].name``, ``served_model_name`` and ``max_model_len`` matter here, so this reads just those
from the fleet YAML (the plan stage owns the full fleet schema and its checks).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from seatplan.errors import SeatplanError

FLEET_FIX = "pass the fleet file `seatplan plan` reads: a YAML with `seats:`, each with `name:` (and `served_model_name:`)"


@dataclass(frozen=True)
class SeatNames:
    name: str
    served_name: str
    max_model_len: int | None


@dataclass(frozen=True)
class SeatMap:
    seats: tuple[SeatNames, ...] = ()

    def served_name_by_litellm_name(self) -> dict[str, str]:
        """LiteLLM's ``model`` is the name vLLM serves; ``model_group`` is often set to the seat's name."""
        mapping: dict[str, str] = {}
        for seat in self.seats:
            mapping.setdefault(seat.served_name, seat.served_name)
            mapping.setdefault(seat.name, seat.served_name)
        return mapping

    def seat_for(self, served_name: str) -> SeatNames | None:
        return next((seat for seat in self.seats if seat.served_name == served_name), None)


def load_seat_map(path: str | Path) -> SeatMap:
    import yaml

    source = Path(path)
    try:
        document = yaml.safe_load(source.read_text(encoding="utf-8"))
    except OSError as problem:
        raise SeatplanError(f"cannot read the fleet file: {problem.strerror}", where=str(source), fix=FLEET_FIX) from None
    except yaml.YAMLError as problem:
        line = getattr(getattr(problem, "problem_mark", None), "line", None)
        where = f"{source}:{line + 1}" if line is not None else str(source)
        raise SeatplanError(f"the fleet file is not valid YAML: {getattr(problem, 'problem', problem)}", where=where, fix=FLEET_FIX) from None
    seats = document.get("seats") if isinstance(document, dict) else None
    if not isinstance(seats, list) or not seats:
        raise SeatplanError("no `seats:` list in the fleet file", where=str(source), fix=FLEET_FIX)
    return SeatMap(tuple(_seat_names(seat, index, source) for index, seat in enumerate(seats)))


def _seat_names(seat: Any, index: int, source: Path) -> SeatNames:
    where = f"{source}: seats[{index}]"
    if not isinstance(seat, dict) or not isinstance(seat.get("name"), str) or not seat["name"]:
        raise SeatplanError("a seat without a `name:`", where=where, fix=FLEET_FIX)
    served_name = seat.get("served_model_name") or seat["name"]
    if not isinstance(served_name, str):
        raise SeatplanError("`served_model_name` must be one name", where=f"{where}.served_model_name", fix=FLEET_FIX)
    max_model_len = seat.get("max_model_len")
    if isinstance(max_model_len, str) and max_model_len != "published":
        from seatplan.units import parse_tokens

        max_model_len = parse_tokens(max_model_len, field=f"{where}.max_model_len")
    return SeatNames(
        name=seat["name"],
        served_name=served_name,
        max_model_len=max_model_len if isinstance(max_model_len, int) and not isinstance(max_model_len, bool) else None,
    )
