"""Plan: KV bytes, contexts, output caps and placement of seats on GPUs."""
