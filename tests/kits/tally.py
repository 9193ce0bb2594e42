"""The reliability figures a run prints (docs/reliability.md): per reader, how many inputs ended each way.

``tests/conftest.py`` prints a pytest run's figures under its summary and, with ``SEATPLAN_TALLY_CARRY=FILE``, adds
the figures FILE holds and writes the sum back. ``scripts/test.sh`` runs the suite as two pytest runs side by side,
each with a file of its own, and prints the whole run's figures from both files when both are over::

    python tests/kits/tally.py FIRST SECOND   # also writes them to $SEATPLAN_RELIABILITY_JSON when it is set
"""

from __future__ import annotations

import json
import os
import sys
from collections import Counter
from pathlib import Path

Tally = Counter[tuple[str, str]]


def read(path: Path) -> Tally:
    """The figures a carry file holds (an empty or missing file holds none)."""
    if not path.is_file() or not path.stat().st_size:
        return Counter()
    return Counter({(reader, outcome): count for reader, outcome, count in json.loads(path.read_text())})


def write(path: Path, tally: Tally) -> None:
    path.write_text(json.dumps([[reader, outcome, count] for (reader, outcome), count in sorted(tally.items())]) + "\n")


def by_reader(tally: Tally) -> dict[str, dict[str, int]]:
    readers: dict[str, dict[str, int]] = {}
    for (reader, outcome), count in sorted(tally.items()):
        readers.setdefault(reader, {})[outcome] = count
    return readers


def lines(tally: Tally) -> list[str]:
    """One line per reader: ``reader   outcome N, outcome N``."""
    return [f"{reader:40} " + ", ".join(f"{outcome} {count:,}" for outcome, count in outcomes.items())
            for reader, outcomes in by_reader(tally).items()]


def keep_json(tally: Tally) -> None:
    """``SEATPLAN_RELIABILITY_JSON=FILE``: the figures as {reader: {outcome: count}}, kept with the run."""
    if os.environ.get("SEATPLAN_RELIABILITY_JSON"):
        Path(os.environ["SEATPLAN_RELIABILITY_JSON"]).write_text(json.dumps(by_reader(tally), indent=2) + "\n")


def main(files: list[str]) -> int:
    tally: Tally = Counter()
    for name in files:
        tally.update(read(Path(name)))  # update, not +: a figure of 0 (no secret found) is a figure to print
    print("=" * 20 + " reliability figures: the whole run (both parts) " + "=" * 20)
    for line in lines(tally) or ["(no figures: neither part tallied any)"]:
        print(line)
    keep_json(tally)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
