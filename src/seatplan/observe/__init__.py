"""Observe: what the engines and the GPUs actually did (startup logs, memory series)."""
