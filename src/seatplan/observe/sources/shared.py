"""What every reader of GPU history shares: the count of what it left out, and a series from (time, MiB) points."""

from __future__ import annotations

import numpy as np

from seatplan.documents.observed import RejectedInput
from seatplan.observe.detect import GpuSeries


class Rejections:
    """Lines or rows a reader left out, counted per source and reason, with where the first one was."""

    def __init__(self) -> None:
        self._seen: dict[tuple[str, str], list] = {}

    def add(self, source: str, reason: str, where: str) -> None:
        entry = self._seen.setdefault((source, reason), [where, 0])
        entry[1] += 1

    def count(self, source: str) -> int:
        return sum(count for (seen_source, _), (_, count) in self._seen.items() if seen_source == source)

    def as_list(self) -> list[RejectedInput]:
        return [RejectedInput(where=where, reason=reason, count=count) for (_, reason), (where, count) in self._seen.items()]


def rejected_note(rejected: Rejections, source: str) -> str:
    """`` (N rejected)`` for an error message, when the reader left lines of ``source`` out."""
    count = rejected.count(source)
    return f" ({count} rejected)" if count else ""


def number_of_lines(text: str) -> int:
    return text.count("\n") + (1 if text and not text.endswith("\n") else 0)


def series_of_points(index: int, host: str | None, points: list[tuple[float, float]], total: float | None,
                     reserved: float | None, source: str) -> GpuSeries:
    """One GPU's series from (time s, used MiB) points in any order."""
    points.sort()
    times = np.fromiter((p[0] for p in points), dtype=np.int64, count=len(points))
    used = np.fromiter((p[1] for p in points), dtype=np.float64, count=len(points))
    return GpuSeries(index=index, host=host, times_s=times, used_mib=used, total_mib=total, reserved_mib=reserved,
                     source=source)
