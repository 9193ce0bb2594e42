"""Which LiteLLM model names belong to which fleet seat.

Only ``seats[].name``, ``served_model_name`` and ``max_model_len`` matter here, and the model with its engine
settings for the KV replay's block rule (``replay.seat_block_rule``); the fleet file itself is read and checked
by the shared fleet-file loader (`documents.fleet_file`), so a typo in it is reported the same way everywhere.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from seatplan.documents.fleet_file import load_fleet
from seatplan.engine.settings import EngineHost
from seatplan.usage.replay import BlockRule, seat_block_rule


@dataclass(frozen=True)
class SeatNames:
    name: str
    served_name: str
    max_model_len: int | None
    block_rule: BlockRule | None = None  # the KV blocks its requests hold (replay.py); None: not a vLLM seat


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
    """The seats of a fleet file, read (and checked) by the plan stage's own loader."""
    loaded = load_fleet(path)
    fleet = loaded.fleet
    return SeatMap(
        tuple(
            SeatNames(
                name=seat.name,
                served_name=seat.served_model_name or seat.name,
                max_model_len=seat.max_model_len if isinstance(seat.max_model_len, int) else None,
                block_rule=seat_block_rule(seat, EngineHost.for_seat(fleet, seat), loaded.base_dir, fleet.policy.vllm_version),
            )
            for seat in fleet.seats
        )
    )
