"""``python -m seatplan``: the same command as ``seatplan`` (for a checkout run with PYTHONPATH=src, or a venv
whose scripts are not on PATH)."""

from seatplan.cli import main

main()
