"""Builds the one compiled part, the fast CSV reader of ``seatplan usage`` (``src/seatplan/usage/_csvscan.c``).

It is optional for users: where no C compiler is found the install still succeeds, and CSV exports are read by
DuckDB instead (same figures, slower). Under CI (``CI`` set, as ``.ci/run`` does) a failed compile fails the
install, so a CI run never silently tests without it. Everything else is in pyproject.toml.
"""

import os

from setuptools import Extension, setup

setup(ext_modules=[Extension(
    "seatplan.usage._csvscan",
    sources=["src/seatplan/usage/_csvscan.c"],
    extra_compile_args=["-O3", "-std=c99", "-Wall", "-Wextra"],
    optional=not os.environ.get("CI"),
)])
