"""adopt: a fleet file from what already runs (nvidia-smi, the LiteLLM config, the engines, their env and compose files)."""
