"""The LiteLLM proxy's config: each ``model_list`` entry's name, the engine's served name, ``api_base`` and ``max_tokens``.

A credential in an ``api_base`` (``http://user:password@host``) is dropped here, before anything prints or stores
the URL: the route keeps the URL without it and says that one was there.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from seatplan.adopt.evidence import Route
from seatplan.adopt.readers.text import child, line_of, read_yaml
from seatplan.errors import SeatplanError
from seatplan.secrets import without_credentials


def read_litellm_config(path: Path) -> list[Route]:
    data, node = read_yaml(path, "LiteLLM config")
    entries = data.get("model_list") if isinstance(data, dict) else None
    if not isinstance(entries, list) or not entries:
        raise SeatplanError("the LiteLLM config has no model_list", where=str(path), fix="give the proxy's config.yaml (the one with model_list:)")
    items = child(node, "model_list")
    routes = []
    for position, entry in enumerate(entries):
        where = f"{path}:{line_of(items.value[position]) if items is not None else 1}"
        if not isinstance(entry, dict) or not isinstance(entry.get("model_name"), str):
            raise SeatplanError(f"model_list[{position}] has no model_name", where=where, fix="each model_list entry has model_name: and litellm_params:")
        given = entry.get("litellm_params")
        params: dict[str, Any] = given if isinstance(given, dict) else {}
        model = params.get("model")
        backend = model.split("/", 1)[1] if isinstance(model, str) and "/" in model else None
        api_base = params.get("api_base")
        plain = api_base if isinstance(api_base, str) and api_base.startswith(("http://", "https://")) else None
        base_url = without_credentials(plain).rstrip("/").removesuffix("/v1") if plain is not None else None
        max_tokens = params.get("max_tokens")
        api_key = params.get("api_key")
        key_env = api_key.removeprefix("os.environ/") if isinstance(api_key, str) and api_key.startswith("os.environ/") else None
        routes.append(Route(model_name=entry["model_name"], backend_name=backend, base_url=base_url,
                            max_tokens=max_tokens if isinstance(max_tokens, int) and not isinstance(max_tokens, bool) else None, source=where,
                            had_credentials=plain is not None and without_credentials(plain) != plain, key_env=key_env, hosted=isinstance(given, dict) and "api_base" not in given))
    return routes
