"""Prometheus / OpenMetrics exposition text: the one parser that observe (saved scrapes, DCGM, a backfill) and
verify (an engine's live ``/metrics``) share."""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Protocol

# The instants a reading may carry: 1970 to 9999 (datetime's range). A timestamp outside is damage, not a time.
LATEST_EPOCH_S = 253_402_300_799

# ASCII only (re.ASCII): \d and \w, like float(), would take other scripts' digits ("٨" read as 8)
_SAMPLE = re.compile(r"^(?P<name>[a-zA-Z_:][\w:]*)(?:\{(?P<labels>.*)\})?\s+(?P<value>[!-~]+)(?:\s+(?P<ts>-?\d+(?:\.\d+)?))?\s*$",
                     re.ASCII)
_LABEL = re.compile(r'([a-zA-Z_]\w*)="((?:[^"\\]|\\.)*)"', re.ASCII)


class RejectionLog(Protocol):
    """Where a reader counts the lines it left out (``observe.sources.shared.Rejections``)."""

    def add(self, source: str, reason: str, where: str) -> None: ...


@dataclass(frozen=True)
class Sample:
    name: str
    labels: dict[str, str]
    value: float
    at: float | None


def plausible_time(seconds: float) -> bool:
    return math.isfinite(seconds) and 0 <= seconds <= LATEST_EPOCH_S


def _never(name: str) -> bool:
    return False


def parse_exposition(
    lines: Iterable[str],
    *,
    source: str = "text",
    rejected: RejectionLog | None = None,
    is_reading: Callable[[str], bool] = _never,
) -> list[Sample]:
    """Prometheus / OpenMetrics text: one or many scrapes, with or without timestamps (ms; OpenMetrics: s).

    A sample whose timestamp is no instant between 1970 and 9999 is left out and counted in ``rejected``; so is a
    non-finite value of a metric ``is_reading`` names (a memory or engine figure, where NaN would poison a series).
    """
    samples: list[Sample] = []
    for number, line in enumerate(lines, start=1):
        text = line.strip()
        if not text or text.startswith("#"):
            continue
        match = _SAMPLE.match(text)
        if not match:
            continue
        try:
            value = float(match["value"])
        except ValueError:
            continue
        stamp = float(match["ts"]) if match["ts"] else None
        if stamp is not None and stamp > 1e11:
            stamp /= 1000.0  # Prometheus text carries milliseconds, OpenMetrics seconds
        if stamp is not None and not plausible_time(stamp):
            if rejected is not None:
                rejected.add(source, "a sample timestamp that is no instant between 1970 and 9999", f"{source}:{number}")
            continue
        if not math.isfinite(value) and is_reading(match["name"]):
            if rejected is not None:
                rejected.add(source, "a memory or engine reading that is not a finite number", f"{source}:{number}")
            continue
        samples.append(Sample(match["name"], dict(_LABEL.findall(match["labels"] or "")), value, stamp))
    return samples
