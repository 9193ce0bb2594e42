"""Observe: what the engines and the GPUs actually did (startup logs, memory series)."""

# The stage's public API: the modules another part of seatplan may import (tests/test_import_graph.py holds
# it). ``cli`` is the one every stage has: ``seatplan.cli`` registers its commands.
__all__ = ["cli"]
