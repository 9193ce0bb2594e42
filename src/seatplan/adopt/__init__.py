"""adopt: a fleet file from what already runs (nvidia-smi, the LiteLLM config, the engines, their env and compose files)."""

# The stage's public API: the modules another part of seatplan may import (tests/test_import_graph.py holds
# it). ``cli`` is the one every stage has: ``seatplan.cli`` registers its commands.
__all__ = ["cli"]
