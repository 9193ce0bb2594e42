"""Random LiteLLM gateway configs as operators write them: the sections seatplan does not own, entries routed elsewhere,
seats' entries with their own extras, comments on their own lines and after values, two indentation styles.

``random_gateway_config(rng, served)`` gives the text and what a merge must keep: every section, every entry that is
not a seat's, every extra of a seat's entry and every comment (``# c<N>`` tokens, each unique).
"""

from __future__ import annotations

import random
import re
import string
from dataclasses import dataclass, field

import yaml

SECTIONS = ("litellm_settings", "router_settings", "general_settings", "environment_variables", "credential_list", "guardrails",
            "mcp_servers", "files_settings")
ENTRY_EXTRAS = ("model_info", "tags")
PARAM_EXTRAS = ("rpm", "tpm", "timeout", "stream_timeout", "order", "drop_params", "temperature", "extra_headers")
ELSEWHERE = ("openai/gpt-4o", "anthropic/claude-sonnet-4-5", "gemini/gemini-2.5-pro", "azure/gpt-4o-mini", "openai/text-embedding-3-small")


class IndentedDumper(yaml.SafeDumper):
    """A list under a key indented below it (`key:\\n  - item`), the style most hand-written configs use."""

    def increase_indent(self, flow: bool = False, indentless: bool = False) -> None:
        return super().increase_indent(flow, False)


def _word(rng: random.Random, low: int = 3, high: int = 10) -> str:
    return rng.choice(string.ascii_lowercase) + "".join(rng.choice(string.ascii_lowercase + string.digits + "_") for _ in range(rng.randint(low, high) - 1))


def _scalar(rng: random.Random) -> object:
    kind = rng.randrange(7)
    if kind == 0:
        return rng.randint(0, 10**7)
    if kind == 1:
        return round(rng.uniform(0, 1000), rng.randint(0, 6))
    if kind == 2:
        return rng.choice([True, False])
    if kind == 3:
        return f"os.environ/{_word(rng).upper()}"
    if kind == 4:
        return rng.choice(["30d", "info", "least-busy", "simple-shuffle", "usage-based-routing-v2", "http://collector:4318"])
    if kind == 5:
        return " ".join(_word(rng) for _ in range(rng.randint(1, 4)))
    return _word(rng)


def _value(rng: random.Random, depth: int = 0) -> object:
    kind = rng.randrange(4) if depth < 3 else 0
    if kind == 1:
        return {_word(rng): _value(rng, depth + 1) for _ in range(rng.randint(1, 4))}
    if kind == 2:
        return [_value(rng, depth + 1) for _ in range(rng.randint(1, 3))]
    return _scalar(rng)


def _section(rng: random.Random, name: str, master_key_env: str) -> object:
    if name == "general_settings":
        return {"master_key": f"os.environ/{master_key_env}", "database_url": "os.environ/DATABASE_URL",
                **{_word(rng): _value(rng) for _ in range(rng.randint(0, 3))}}
    if name == "litellm_settings":
        return {"drop_params": True, "request_timeout": rng.randint(30, 3600), "callbacks": [rng.choice(["prometheus", "otel", "langfuse"])],
                **{_word(rng): _value(rng) for _ in range(rng.randint(0, 2))}}
    if name == "router_settings":
        return {"num_retries": rng.randint(0, 5), "routing_strategy": rng.choice(["simple-shuffle", "least-busy"]), "allowed_fails": rng.randint(1, 5)}
    if name == "credential_list":
        return [{"credential_name": _word(rng), "credential_values": {"api_key": f"os.environ/{_word(rng).upper()}_KEY"},
                 "credential_info": {"description": _word(rng)}} for _ in range(rng.randint(1, 2))]
    if name == "environment_variables":
        return {_word(rng).upper(): str(_scalar(rng)) for _ in range(rng.randint(1, 3))}
    return {_word(rng): _value(rng) for _ in range(rng.randint(1, 3))}


def _extras(rng: random.Random) -> tuple[dict, dict]:
    entry: dict = {}
    params: dict = {}
    if rng.random() < 0.7:
        entry["model_info"] = {"id": _word(rng), "mode": "chat", "max_input_tokens": rng.randint(1024, 262144),
                               "input_cost_per_token": rng.choice([0.0000001, 2.5e-7, 0])}
    if rng.random() < 0.3:
        entry["tags"] = [_word(rng) for _ in range(rng.randint(1, 3))]
    for key in rng.sample(PARAM_EXTRAS, rng.randint(0, 4)):
        params[key] = {"rpm": rng.randint(1, 10000), "tpm": rng.randint(1000, 10**7), "timeout": rng.randint(10, 3600),
                       "stream_timeout": rng.randint(10, 600), "order": rng.randint(1, 4), "drop_params": rng.choice([True, False]),
                       "temperature": round(rng.uniform(0, 2), 2), "extra_headers": {"X-" + _word(rng).title(): _word(rng)}}[key]
    if rng.random() < 0.4:
        params["max_tokens"] = rng.randint(16, 32768)
    return entry, params


@dataclass
class GatewayCase:
    text: str
    data: dict
    seat_entries: dict[int, str] = field(default_factory=dict)  # position in model_list → the served name it routes to
    comments: list[str] = field(default_factory=list)
    block_style: bool = True


def random_gateway_config(rng: random.Random, served: list[str], *, flow_list: bool = False, master_key_env: str = "LITELLM_MASTER_KEY",
                          foreign_servers: bool = True) -> GatewayCase:
    """A config whose seat entries route to some of ``served`` (each at most twice: an alias), with other entries between."""
    entries: list[dict] = []
    seat_entries: dict[int, str] = {}
    routed = [name for name in served if rng.random() < 0.75]
    names = routed + [name for name in routed if rng.random() < 0.2]
    others = rng.randint(0, 4)
    order = [("seat", name) for name in names] + [("other", None)] * others
    rng.shuffle(order)
    for kind, name in order:
        entry, params = _extras(rng)
        if kind == "seat":
            assert name is not None
            params = {"model": f"{rng.choice(['openai', 'hosted_vllm'])}/{name}",
                      "api_base": f"http://{rng.choice(['localhost', '10.0.0.' + str(rng.randint(2, 250)), 'vllm-' + _word(rng)])}:{rng.randint(1024, 65535)}/v1",
                      **({"api_key": f"os.environ/{_word(rng).upper()}"} if rng.random() < 0.5 else {}), **params}
            seat_entries[len(entries)] = name
            model_name = rng.choice([name, _word(rng), name.rsplit("/", 1)[-1]])
        else:
            model = rng.choice(ELSEWHERE)
            params = {"model": model, **({"api_key": f"os.environ/{_word(rng).upper()}_KEY"} if rng.random() < 0.7 else {}), **params}
            if foreign_servers and rng.random() < 0.3:  # an OpenAI-compatible server that is no seat: a route seatplan must leave alone
                params["model"] = f"openai/{_word(rng)}-{_word(rng)}"
                params["api_base"] = f"http://10.9.{rng.randint(0, 255)}.{rng.randint(1, 254)}:{rng.randint(1024, 65535)}/v1"
            model_name = _word(rng)
        entries.append({"model_name": model_name, "litellm_params": params, **entry})
    data: dict = {}
    sections = rng.sample(SECTIONS, rng.randint(0, len(SECTIONS)))
    placed_list = False
    for name in sections + ["model_list"]:
        if name == "model_list" or (not placed_list and rng.random() < 0.3):
            if not placed_list:
                data["model_list"] = entries
                placed_list = True
            if name == "model_list":
                continue
        data[name] = _section(rng, name, master_key_env)
    rng_items = list(data.items())
    rng.shuffle(rng_items)
    data = dict(rng_items)
    dumper = rng.choice([yaml.SafeDumper, IndentedDumper])
    indent = rng.choice([2, 4])
    comments: list[str] = []
    lines: list[str] = []
    for key, value in data.items():
        if flow_list and key == "model_list":
            block = "model_list: " + yaml.safe_dump(value, default_flow_style=True, width=1 << 30, sort_keys=False)
        else:
            block = yaml.dump({key: value}, Dumper=dumper, default_flow_style=False, sort_keys=False, indent=indent, width=1 << 30)
        if rng.random() < 0.6:
            comments.append(f"# c{len(comments)}")
            lines.append(comments[-1] + " " + _word(rng))
        for row in block.splitlines():
            lines.append(row)
            if rng.random() < 0.2 and not flow_list:
                comments.append(f"# c{len(comments)}")
                if row.rstrip().endswith(":") or rng.random() < 0.5:
                    lines.append(" " * (len(row) - len(row.lstrip())) + comments[-1])
                else:
                    lines[-1] = row + "  " + comments[-1]
        if rng.random() < 0.4:
            lines.append("")
    text = "\n".join(lines) + "\n"
    assert yaml.safe_load(text) == data, text
    return GatewayCase(text=text, data=data, seat_entries=seat_entries, comments=comments, block_style=not flow_list and bool(entries))


COMMENT = re.compile(r"# c\d+")
