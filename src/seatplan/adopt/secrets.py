"""What adopt treats as a secret, and URLs without their credentials.

Pure. A value whose name or shape says secret is never written, printed or stored by value: the fleet file
gets a reference (``{from_host_env: NAME}``, ``documents.fleet.EnvReference``) and a comment saying where the
value was and what to export on the GPU host. A URL's user and password are dropped before the URL goes
anywhere (a warning, ``--json``, the fleet file).
"""

from __future__ import annotations

import re
from urllib.parse import urlsplit, urlunsplit

# Names that say secret (HF_TOKEN, VLLM_API_KEY, OPENAI_API_KEY, DB_PASSWORD, AWS_SECRET_ACCESS_KEY, ...)
SECRET_NAME = re.compile(r"KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL", re.IGNORECASE)
# Values that say secret whatever their name: Hugging Face and OpenAI-style keys, a URL with a password
SECRET_VALUE = re.compile(r"^(hf_[A-Za-z0-9]{6,}|sk-[A-Za-z0-9_-]{6,}|[a-z][a-z0-9+.-]*://[^/@\s:]*:[^/@\s]*@.*)$")
# vLLM flags whose value is a secret, and the variable vLLM (or the Hub client) reads instead
# (vLLM 0.32 vllm/entrypoints/serve/middleware/register.py:33 `args.api_key or [envs.VLLM_API_KEY]`: the variable
# stands for the flag; HF_TOKEN is what huggingface_hub reads for --hf-token)
SECRET_FLAGS = {"--api-key": "VLLM_API_KEY", "--hf-token": "HF_TOKEN"}


def is_secret(name: str, value: str) -> bool:
    return bool(SECRET_NAME.search(name)) or bool(SECRET_VALUE.match(value.strip()))


def looks_secret(word: str) -> bool:
    """A command-line word shaped like a key (its flag not known to take one)."""
    return bool(SECRET_VALUE.match(word.strip()))


def without_credentials(url: str) -> str:
    """``http://user:pw@host/x`` → ``http://host/x``; anything that is no URL comes back unchanged."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return re.sub(r"//[^/@]*@", "//", url)
    if parts.username is None and parts.password is None and "@" not in parts.netloc:
        return url
    return urlunsplit(parts._replace(netloc=parts.netloc.rsplit("@", 1)[-1]))
