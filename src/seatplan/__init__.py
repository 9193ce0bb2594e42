"""seatplan: exact KV sizing, placement and verified rollout for vLLM seats sharing GPUs."""

__version__ = "0.1.0"
