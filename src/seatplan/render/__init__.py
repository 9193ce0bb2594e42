"""render: env files, compose, Ansible, LiteLLM and Prometheus files from a saved plan; diff, apply, rollback."""

# The stage's public API: the modules another part of seatplan may import (tests/test_import_graph.py holds
# it). ``cli`` is the one every stage has: ``seatplan.cli`` registers its commands.
__all__ = ["cli"]
