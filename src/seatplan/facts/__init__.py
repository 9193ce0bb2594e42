"""Model facts: what one model costs on a GPU under vLLM, computed the way vLLM computes it."""
