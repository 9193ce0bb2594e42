"""Write tests/module_seconds.json from a JUnit XML report of a full run (``scripts/test.sh --junitxml=FILE``):
each module's seconds (every test's setup, call and teardown), for the modules over a minute.

usage: python scripts/module_seconds.py JUNIT_XML [JUNIT_XML ...]
"""

from __future__ import annotations

import json
import sys
import xml.etree.ElementTree as ElementTree
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
TABLE = REPO / "tests" / "module_seconds.json"
LEAST_SECONDS = 60


def module_seconds(reports: list[Path]) -> Counter[str]:
    seconds: Counter[str] = Counter()
    for report in reports:
        for case in ElementTree.parse(report).iter("testcase"):
            # classname is the module's dotted path and the class, if any: tests.integration.test_x[.TestY]
            parts = case.get("classname", "").split(".")
            while parts and not parts[-1].startswith("test_"):
                parts.pop()
            if parts:
                seconds["/".join(parts) + ".py"] += float(case.get("time", 0))
    return seconds


def main() -> None:
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    about = json.loads(TABLE.read_text())["_about"]
    slow = {module: round(total) for module, total in module_seconds([Path(name) for name in sys.argv[1:]]).most_common() if total >= LEAST_SECONDS}
    TABLE.write_text(json.dumps({"_about": about, **slow}, indent=2) + "\n")
    print(f"{TABLE.relative_to(REPO)}: {len(slow)} modules over {LEAST_SECONDS} s")


if __name__ == "__main__":
    main()
