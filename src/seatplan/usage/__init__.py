"""Usage: what the gateway's spend logs say about each seat."""

# The stage's public API: the modules another part of seatplan may import (tests/test_import_graph.py holds
# it). ``cli`` is the one every stage has: ``seatplan.cli`` registers its commands.
__all__ = ["cli"]
