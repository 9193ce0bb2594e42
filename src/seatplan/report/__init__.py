"""``seatplan report``: one self-contained HTML page of the plan, the week's usage and the GPUs' history."""

# The stage's public API: the modules another part of seatplan may import (tests/test_import_graph.py holds
# it). ``cli`` is the one every stage has: ``seatplan.cli`` registers its commands.
__all__ = ["cli"]
