"""What adopt treats as a secret.

Pure. A value whose name or shape says secret is never written, printed or stored by value: the fleet file
gets a reference (``{from_host_env: NAME}``, ``documents.fleet.EnvReference``) and a comment saying where the
value was and what to export on the GPU host. A URL's user and password are dropped before the URL goes
anywhere (a warning, ``--json``, the fleet file) by ``seatplan.secrets.without_credentials``, the one rule.
"""

from __future__ import annotations

# vLLM flags whose value is a secret, and the variable vLLM (or the Hub client) reads instead
# (vLLM 0.32 vllm/entrypoints/serve/middleware/register.py:33 `args.api_key or [envs.VLLM_API_KEY]`: the variable
# stands for the flag; HF_TOKEN is what huggingface_hub reads for --hf-token). Which values are secret is
# seatplan.secrets.looks_secret / secret_shaped, the one rule the fleet loader's warning follows too.
SECRET_FLAGS = {"--api-key": "VLLM_API_KEY", "--hf-token": "HF_TOKEN"}

