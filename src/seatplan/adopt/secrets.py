"""What adopt treats as a secret.

Pure. A value whose name or shape says secret is never written, printed or stored by value: the fleet file
gets a reference (``{from_host_env: NAME}``, ``documents.fleet.EnvReference``) and a comment saying where the
value was and what to export on the GPU host. A URL's user and password are dropped before the URL goes
anywhere (a warning, ``--json``, the fleet file) by ``seatplan.secrets.without_credentials``, the one rule.
"""

from __future__ import annotations

import re

# vLLM flags whose value is a secret, and the variable vLLM (or the Hub client) reads instead
# (vLLM 0.32 vllm/entrypoints/serve/middleware/register.py:33 `args.api_key or [envs.VLLM_API_KEY]`: the variable
# stands for the flag; HF_TOKEN is what huggingface_hub reads for --hf-token). Which values are secret is
# seatplan.secrets.looks_secret / secret_shaped, the one rule the fleet loader's warning follows too.
SECRET_FLAGS = {"--api-key": "VLLM_API_KEY", "--hf-token": "HF_TOKEN"}


# `--api-key ${VLLM_LOCAL_KEY}` (or `$NAME`, `=${NAME}`, quoted): the flag's value given by a variable's name
_FLAG_REFERENCE = re.compile(r"(--api-key|--hf-token)(?:=|\s+)['\"]?\$\{?([A-Za-z_][A-Za-z0-9_]*)\}?")


def secret_references(text: str) -> dict[str, str]:
    """The variables a command line as written takes a secret flag's value from: the variable vLLM reads in its
    place (``VLLM_API_KEY``) → the one the line names (``VLLM_LOCAL_KEY``), so the engine and the gateway's
    ``api_key: os.environ/VLLM_LOCAL_KEY`` stay one reference."""
    return {SECRET_FLAGS[match[1]]: match[2] for match in _FLAG_REFERENCE.finditer(text)}
