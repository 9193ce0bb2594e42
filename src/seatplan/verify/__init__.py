"""The verify stage: prove the running engines (and the gateway in front) match a saved plan.

``expect`` turns a plan into what each engine must show (pure, with the facts stage's block
prediction), ``checks`` compares that with what was observed (pure), ``probe`` is the only part that
talks HTTP, and ``upgrade`` says what a plan would see under another vLLM version.
"""

# The stage's public API: the modules another part of seatplan may import (tests/test_import_graph.py holds
# it). ``cli`` is the one every stage has: ``seatplan.cli`` registers its commands.
__all__ = ["cli"]
