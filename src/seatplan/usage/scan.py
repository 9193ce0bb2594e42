"""The contract between the sources (``sources`` / ``postgres``) and the report.

A source reads its rows once (:meth:`rows.SpendLogSource.read`, :class:`rows.SpendRows`) and names the few rows
a report lists (``request_ids``). The report judges and counts them (``rows.summarize``, a
:class:`SpendScan`: per-seat counts, the distinct clients with their calls, the rejected rows by reason,
and every accepted request as arrays), the same way for every source.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta

from seatplan.usage.loads import RequestRows
from seatplan.usage.sweep import ClientRow

EPOCH = datetime(1970, 1, 1)
ONE_MICROSECOND = timedelta(microseconds=1)


def microseconds(moment: datetime | None) -> int | None:
    """A naive UTC datetime as microseconds since 1970, the time unit of :class:`RequestRows`."""
    return None if moment is None else (moment - EPOCH) // ONE_MICROSECOND


@dataclass
class SeatCounts:
    """Calls and row counts of one seat; parts of one seat add up (the overall figures are their sum)."""

    model_names: set[str] = field(default_factory=set)
    calls: int = 0
    errors: int = 0
    calls_with_status: int = 0
    cache_hits: int = 0
    calls_with_cache_flag: int = 0
    rejected_rows: int = 0

    def add(self, other: SeatCounts) -> None:
        self.model_names |= other.model_names
        self.calls += other.calls
        self.errors += other.errors
        self.calls_with_status += other.calls_with_status
        self.cache_hits += other.cache_hits
        self.calls_with_cache_flag += other.calls_with_cache_flag
        self.rejected_rows += other.rejected_rows


@dataclass
class SpendScan:
    counts: dict[str, SeatCounts]
    rows: RequestRows
    clients: list[ClientRow]
    rejected_by_reason: dict[str, int]
    rejected_examples: dict[str, list[str | None]]
