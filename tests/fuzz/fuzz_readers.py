"""Coverage-guided fuzzing (atheris, libFuzzer's engine for Python) of one reader target.

    python tests/fuzz/fuzz_readers.py TARGET [libFuzzer flags and corpus dirs]

TARGET is a name in targets.TARGETS. seatplan's modules are instrumented for coverage; a target's exception
other than a located SeatplanError (a traceback, or a PropertyViolated) is a crash that libFuzzer saves to
its artifact prefix. test_fuzz_atheris.py runs each target for a bounded time.
"""

from __future__ import annotations

import sys
from pathlib import Path

import atheris

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

with atheris.instrument_imports(include=["seatplan"]):
    import seatplan.documents.fleet_file  # noqa: F401
    import seatplan.documents.io  # noqa: F401
    import seatplan.facts.api  # noqa: F401
    import seatplan.facts.weights  # noqa: F401
    import seatplan.jsontext  # noqa: F401
    import seatplan.observe.inputs  # noqa: F401
    import seatplan.observe.logparse  # noqa: F401
    import seatplan.observe.sources.beszel  # noqa: F401
    import seatplan.observe.sources.nvidia_smi  # noqa: F401
    import seatplan.observe.sources.prometheus  # noqa: F401
    import seatplan.observe.sources.vllm_metrics  # noqa: F401
    import seatplan.usage.csvscan  # noqa: F401
    import seatplan.usage.sources  # noqa: F401
    import seatplan.usage.summary  # noqa: F401

from kits.fuzz_targets import TARGETS  # noqa: E402


def main() -> None:
    target = TARGETS[sys.argv[1]]
    atheris.Setup([sys.argv[0], *sys.argv[2:]], target)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
