"""Model facts: what one model costs on a GPU under vLLM, computed the way vLLM computes it."""

# The stage's public API: the modules another part of seatplan may import (tests/test_import_graph.py holds
# it). ``cli`` is the one every stage has: ``seatplan.cli`` registers its commands. Here also the model facts
# other stages load (``api``: ``load_model_facts``; ``models``: ``ModelFacts``, ``EngineSettings``).
__all__ = ["api", "cli", "models"]
