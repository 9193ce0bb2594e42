"""Which seat runs on which GPU, from a plan or, without one, from the fleet file (pure).

Diagnose needs only this to tie boots to GPUs, tell a seat's neighbours and attribute a restart's step; the
plateau check needs the plan's figures as well, and reads them from the plan itself (``calibrate``). A fleet
file says who runs where (its ``current_layout``, else each seat's ``pin``) but not what a GPU should hold, so
with a fleet alone there is a seat map and no plateau check.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from dataclasses import dataclass

from seatplan.documents.fleet import Fleet
from seatplan.documents.fleet_file import gpu_refs, resolve_gpu_ref
from seatplan.documents.plan import Plan


def on_gpu(gpu_host: str, gpu_index: int, host: str | None, index: int, hosts: Collection[str]) -> bool:
    """A history of GPU ``index`` on ``host`` is of the planned GPU ``gpu_host:gpu_index``: the same index and
    host, or no host name where the plan (or fleet) has one host only. Nothing is matched by guess."""
    return index == gpu_index and (host == gpu_host or (host is None and len(hosts) <= 1))


@dataclass(frozen=True)
class SeatMap:
    """The seats on each GPU, and the names a log may call each seat by."""

    seats_by_gpu: dict[tuple[str, int], tuple[str, ...]]
    seats: tuple[str, ...]
    # served model name (what vLLM's log and /metrics call a seat) or seat name → seat name
    names: dict[str, str]

    @classmethod
    def of_plan(cls, plan: Plan) -> SeatMap:
        return cls(seats_by_gpu={(gpu.host, gpu.index): tuple(gpu.seats) for gpu in plan.gpus},
                   seats=tuple(seat.name for seat in plan.seats),
                   names=_names((seat.name, seat.served_model_name) for seat in plan.seats))

    @classmethod
    def of_fleet(cls, fleet: Fleet) -> SeatMap:
        """Each seat on the GPUs of its current layout, else of its pin (a seat with neither is on none)."""
        seats_by_gpu: dict[tuple[str, int], list[str]] = {(host.name, gpu.index): [] for host in fleet.hosts for gpu in host.gpus}
        for seat in fleet.seats:
            for ref in gpu_refs(fleet.current_layout.get(seat.name, seat.pin)):
                key = resolve_gpu_ref(fleet, ref)
                if key is not None:
                    seats_by_gpu[key].append(seat.name)
        return cls(seats_by_gpu={key: tuple(names) for key, names in seats_by_gpu.items()},
                   seats=tuple(seat.name for seat in fleet.seats),
                   names=_names((seat.name, seat.served_model_name or seat.name) for seat in fleet.seats))

    def seats_on(self, host: str | None, index: int) -> list[str]:
        hosts = {gpu_host for gpu_host, _ in self.seats_by_gpu}
        return [name for (gpu_host, gpu_index), names in self.seats_by_gpu.items()
                if on_gpu(gpu_host, gpu_index, host, index, hosts) for name in names]

    def neighbours(self, seat: str) -> set[str]:
        """The other seats on any GPU ``seat`` runs on."""
        return {other for names in self.seats_by_gpu.values() if seat in names for other in names if other != seat}

    def seat_name(self, logged: str) -> str:
        """The seat a log calls ``logged`` (its served model name or its own name); unknown names stay as they are."""
        return self.names.get(logged, logged)


def _names(pairs: Iterable[tuple[str, str]]) -> dict[str, str]:
    """Served model name → seat name, then each seat's own name, which wins where a seat is served as another's name."""
    names: dict[str, str] = {}
    seats = []
    for name, served in pairs:
        names.setdefault(served, name)
        seats.append(name)
    return names | {name: name for name in seats}
