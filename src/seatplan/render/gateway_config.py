"""Pure: the gateway's LiteLLM config with only the seats' routes changed.

seatplan owns one thing in the gateway's config: each seat's route (a ``model_list`` entry whose
``litellm_params.model`` names what a planned engine serves): its ``api_base``, its provider prefix
(``hosted_vllm/``), its key reference (``api_key: os.environ/NAME``), and whether the entry exists (a planned seat
without one gets one, with the plan's output cap as ``max_tokens``). Everything else is the operator's and comes back
as it was: every top-level section (``litellm_settings``, ``router_settings``, ``general_settings`` with its
``database_url``, ``environment_variables``, ``credential_list``, callbacks...), every entry that routes elsewhere,
and each seat entry's extras (``model_info``, ``max_tokens``, ``rpm``/``tpm``, ``timeout``, ``tags``, ``order``...).

Comments: PyYAML drops them on a load and dump, so the config is not dumped again. The edit is made on the text:
each value seatplan changes is replaced where it stands (the node's marks give its span), a missing key is added
on the line after ``model:``, and a new entry is appended after the last one, in the file's own indentation. The
edited text is then loaded and must equal the merged document exactly; where it would not (a flow-style
``model_list: [...]``, an anchor a seat's value shares with another entry, a merge key) the merged document is
dumped whole instead, its comments lost, and the result says so (render warns).

A key in clear anywhere in the live config (an ``api_key``, a ``master_key``, a ``database_url`` with a password) is
refused, naming its line and never quoting it: every rendered file and printed line holds references only.
"""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass, field
from typing import Any, Literal

import yaml

from seatplan.documents.yaml_lines import read_yaml_node
from seatplan.encode import dump_yaml
from seatplan.errors import SeatplanError
from seatplan.secrets import looks_secret, secret_shaped

# LiteLLM's provider for a vLLM server (litellm/llms/hosted_vllm/): vLLM's own request parameters pass through to it,
# where `openai/` holds every request to the OpenAI API's parameters; a route of either kind reaches the engine.
PROVIDER = "hosted_vllm"
ENGINE_PROVIDERS = ("hosted_vllm", "openai")
PROVIDER_WHY = ("hosted_vllm/ is LiteLLM's provider for a vLLM server (litellm/llms/hosted_vllm): vLLM's own "
                "request parameters reach the engine, which openai/ checks against OpenAI's API")
# what seatplan decides in a seat's entry; every other key of the entry and of its litellm_params is kept, max_tokens
# among them: the engine enforces the plan's cap itself (--override-generation-config), and a gateway max_tokens is the
# operator's (a new entry gets the plan's cap)
OWNED_PARAMS = ("model", "api_base", "api_key")
ENVIRON = "os.environ/"
# a stand-in an OpenAI-compatible client needs where the server takes no key: no secret
PLACEHOLDER_KEYS = frozenset({"", "none", "null", "empty", "dummy", "fake", "na", "n/a", "no-key", "not-needed", "unused", "x"})
WHAT = "LiteLLM config"
# a config key that holds a credential (api_key, master_key, aws_secret_access_key, a *_token, a password, the
# database_url); `credential_name` or `max_tokens` hold none. Values are judged by seatplan.secrets' one rule.
SECRET_KEY_NAME = re.compile(r"(^|_)(key|token|secret|password|passwd)$|secret|password|^database_url$", re.IGNORECASE)


@dataclass(frozen=True)
class LiveConfig:
    """The gateway's config as it runs: its text and where it was read (errors name it)."""

    display: str
    text: str


@dataclass(frozen=True)
class SeatRoute:
    """What the plan decides for one seat's route through the gateway."""

    seat: str
    served: str  # the name the engine serves: litellm_params.model without its provider prefix
    api_base: str
    api_key: str | None  # "os.environ/NAME", or None: the entry keeps its own
    max_tokens: int | None  # the plan's output cap: a new entry's max_tokens (an entry that exists keeps its own)
    port: int | None = None  # tells replicas of one served name apart

    @property
    def model(self) -> str:
        return f"{PROVIDER}/{self.served}"


@dataclass(frozen=True)
class EntryChange:
    what: str  # api_base, provider, api_key, max_tokens
    old: str | None
    new: str | None
    why: str = ""


@dataclass
class GatewayEntry:
    """One ``model_list`` entry of the rendered config, against the live one."""

    model_name: str
    seat: str | None  # None: the operator's own entry, kept whole
    status: Literal["added", "changed", "unchanged", "kept"]
    changes: list[EntryChange] = field(default_factory=list)
    extras: list[str] = field(default_factory=list)  # the entry's own keys seatplan keeps (model_info, litellm_params.rpm...)


@dataclass
class GatewayMerge:
    text: str
    entries: list[GatewayEntry]
    sections: list[str]  # the top-level sections kept (all but model_list)
    comments_kept: bool
    warnings: list[str] = field(default_factory=list)


def _backend(model: object) -> tuple[str | None, str | None]:
    """``openai/Qwen/Qwen3-8B`` → (``openai``, ``Qwen/Qwen3-8B``)."""
    if not isinstance(model, str) or "/" not in model:
        return None, None
    provider, served = model.split("/", 1)
    return provider, served


def _port(api_base: object) -> int | None:
    if not isinstance(api_base, str):
        return None
    netloc = api_base.split("//", 1)[-1].split("/", 1)[0]
    tail = netloc.rsplit(":", 1)[-1] if ":" in netloc.rsplit("]", 1)[-1] else ""
    return int(tail) if tail.isascii() and tail.isdecimal() and len(tail) <= 5 else None


def check_no_clear_keys(data: Any, lines: dict[tuple, int], display: str) -> None:
    """Refuse a credential written as a value (never quoting it): the rendered config goes into DIR and diff prints it."""
    stack: list[tuple[tuple, Any]] = [((), data)]
    while stack:
        path, value = stack.pop()
        if isinstance(value, dict):
            stack.extend((path + (key,), item) for key, item in value.items())
        elif isinstance(value, list):
            stack.extend((path + (position,), item) for position, item in enumerate(value))
        elif isinstance(value, str) and path and not value.startswith(ENVIRON) and value.strip().lower() not in PLACEHOLDER_KEYS:
            name = str(path[-1]) if not isinstance(path[-1], int) else str(path[-2] if len(path) > 1 else "")
            if secret_shaped(value) or (SECRET_KEY_NAME.search(name) and looks_secret(name, value)):
                shown = ".".join(str(part) for part in path)
                raise SeatplanError(f"{shown} holds a key or password in clear (not quoted here)", where=f"{display}:{lines.get(path, 1)}",
                                    fix=f"write it as {ENVIRON}NAME and export NAME where the gateway runs; seatplan keeps references only")


def _lines(node: Any, path: tuple = (), out: dict[tuple, int] | None = None) -> dict[tuple, int]:
    out = {} if out is None else out
    out.setdefault(path, node.start_mark.line + 1)
    if isinstance(node, yaml.MappingNode):
        for key_node, value_node in node.value:
            key = key_node.value if isinstance(key_node, yaml.ScalarNode) else str(key_node.start_mark.line)
            out[path + (key,)] = key_node.start_mark.line + 1
            _lines(value_node, path + (key,), out)
    elif isinstance(node, yaml.SequenceNode):
        for position, item in enumerate(node.value):
            _lines(item, path + (position,), out)
    return out


def read_live(text: str, display: str) -> tuple[dict, Any]:
    """The live config's document and node: a mapping whose model_list, if any, is a list of mappings."""
    data, node = read_yaml_node(text, display, WHAT, "give the gateway's config.yaml (model_list:, litellm_settings:, ...)")
    if not isinstance(data, dict):
        raise SeatplanError("the LiteLLM config is not a mapping of sections (model_list:, general_settings:, ...)", where=f"{display}:1",
                            fix="give the gateway's config.yaml")
    lines = _lines(node)
    entries = data.get("model_list")
    if entries is not None and not isinstance(entries, list):
        raise SeatplanError("model_list is not a list of entries", where=f"{display}:{lines.get(('model_list',), 1)}",
                            fix="write model_list as a list: `- model_name: NAME` with litellm_params:")
    for position, entry in enumerate(entries or []):
        if not isinstance(entry, dict) or ("litellm_params" in entry and not isinstance(entry["litellm_params"], dict)):
            raise SeatplanError(f"model_list[{position}] is not an entry with model_name: and litellm_params:",
                                where=f"{display}:{lines.get(('model_list', position), 1)}", fix="each model_list entry has model_name: and litellm_params:")
    check_no_clear_keys(data, lines, display)
    return data, node


def new_entry(route: SeatRoute) -> dict:
    """The model_list entry seatplan writes for a seat the gateway has no entry for, in its own config or a live one."""
    params: dict = {"model": route.model, "api_base": route.api_base}
    if route.max_tokens is not None:
        params["max_tokens"] = route.max_tokens
    if route.api_key is not None:
        params["api_key"] = route.api_key
    return {"model_name": route.served, "litellm_params": params}


def own_config(routes: list[SeatRoute], master_key_env: str, header: str) -> str:
    """seatplan's own config, where no live one was given: the seats' routes and the master key's reference."""
    entries = [new_entry(route) for route in routes]
    document = {"model_list": entries, "general_settings": {"master_key": f"{ENVIRON}{master_key_env}"}}
    return header + "# keys are read from the environment, never written here\n" + dump_yaml(document)


def _match(entries: list, routes: list[SeatRoute]) -> dict[int, SeatRoute]:
    """Which entry is which seat's: its litellm_params.model names what the seat's engine serves (through a provider
    that reaches a vLLM server); replicas of one served name are told apart by the api_base's port."""
    by_served: dict[str, list[SeatRoute]] = {}
    for route in routes:
        by_served.setdefault(route.served, []).append(route)
    matched: dict[int, SeatRoute] = {}
    for position, entry in enumerate(entries):
        params = entry.get("litellm_params") or {}
        provider, served = _backend(params.get("model"))
        candidates = by_served.get(served or "", []) if provider in ENGINE_PROVIDERS else []
        if not candidates:
            continue
        port = _port(params.get("api_base"))
        matched[position] = next((route for route in candidates if route.port is not None and route.port == port), candidates[0])
    return matched


def _text(value: object) -> str | None:
    return None if value is None else str(value)


def _updated(params: dict, route: SeatRoute) -> tuple[dict, list[EntryChange]]:
    new = dict(params)
    changes = []
    old_provider, _ = _backend(params.get("model"))
    new["model"] = route.model
    if old_provider != PROVIDER:
        changes.append(EntryChange("provider", f"{old_provider}/", f"{PROVIDER}/", PROVIDER_WHY))
    new["api_base"] = route.api_base
    if params.get("api_base") != route.api_base:
        changes.append(EntryChange("api_base", _text(params.get("api_base")), route.api_base))
    if route.api_key is not None:
        new["api_key"] = route.api_key
        if params.get("api_key") != route.api_key:
            changes.append(EntryChange("api_key", _text(params.get("api_key")), route.api_key))
    return new, changes


def _extras(entry: dict) -> list[str]:
    params = entry.get("litellm_params") or {}
    return ([key for key in entry if key not in ("model_name", "litellm_params")]
            + [f"litellm_params.{key}" for key in params if key not in OWNED_PARAMS])


def merge_config(live_text: str, display: str, routes: list[SeatRoute]) -> GatewayMerge:
    """The live config with the seats' routes set as the plan decides, comments kept where the YAML allows."""
    data, node = read_live(live_text, display)
    merged = copy.deepcopy(data)
    entries: list = merged.get("model_list") or []
    matched = _match(entries, routes)
    report: list[GatewayEntry] = []
    for position, entry in enumerate(entries):
        route = matched.get(position)
        name = str(entry.get("model_name"))
        if route is None:
            report.append(GatewayEntry(name, None, "kept", extras=_extras(entry)))
            continue
        entry["litellm_params"], changes = _updated(entry.get("litellm_params") or {}, route)
        report.append(GatewayEntry(name, route.seat, "changed" if changes else "unchanged", changes, _extras(entry)))
    routed = set(matched.values())
    added = []
    for route in routes:
        if route in routed:
            continue
        added.append(new_entry(route))
        report.append(GatewayEntry(route.served, route.seat, "added", [EntryChange("api_base", None, route.api_base)]))
    if added:
        merged["model_list"] = entries + added
    sections = [str(key) for key in data if key != "model_list"]
    edited = _edit_text(live_text, node, data, merged, added)
    if edited is not None:
        return GatewayMerge(edited, report, sections, comments_kept=True)
    warning = (f"{display}: its comments could not be kept (a flow-style model_list, an anchor or merge key a seat's route "
               "shares): the rendered gateway config holds the same settings without them")
    return GatewayMerge(dump_yaml(merged), report, sections, comments_kept=False, warnings=[warning])


# ----------------------------------------------------------------------------- the edit on the text


def _scalar(value: object) -> str:
    """A value as one inline YAML scalar (plain where YAML reads it back the same, quoted otherwise)."""
    text = yaml.safe_dump(value, default_flow_style=True, width=1 << 30, allow_unicode=True)
    return text.removesuffix("\n").removesuffix("\n...").strip()


def _child(node: Any, key: str) -> tuple[Any, Any] | None:
    if not isinstance(node, yaml.MappingNode):
        return None
    return next(((key_node, value) for key_node, value in node.value if isinstance(key_node, yaml.ScalarNode) and key_node.value == key), None)


def _last_leaf(node: Any) -> Any:
    while isinstance(node, (yaml.MappingNode, yaml.SequenceNode)) and node.value and not node.flow_style:
        last = node.value[-1]
        node = last[1] if isinstance(node, yaml.MappingNode) else last
    return node


def _line_end(text: str, index: int) -> int:
    """The index just past the newline that ends the line holding ``index``."""
    end = text.find("\n", index)
    return len(text) if end < 0 else end + 1


def _params_edits(text: str, params_node: Any, old: dict, new: dict) -> list[tuple[int, int, str]] | None:
    edits = []
    model = _child(params_node, "model")
    for key in OWNED_PARAMS:
        if key not in new or old.get(key) == new[key]:
            continue
        pair = _child(params_node, key)
        if pair is not None:
            value = pair[1]
            if not isinstance(value, yaml.ScalarNode):
                return None
            edits.append((value.start_mark.index, value.end_mark.index, _scalar(new[key])))
        elif params_node.flow_style:
            close = params_node.end_mark.index - 1
            if text[close] != "}":
                return None
            edits.append((close, close, f", {key}: {_scalar(new[key])}"))
        elif model is not None and model[1].start_mark.line == model[1].end_mark.line:
            at = _line_end(text, model[1].end_mark.index)
            prefix = "" if text[at - 1:at] == "\n" else "\n"
            edits.append((at, at, f"{prefix}{' ' * model[0].start_mark.column}{key}: {_scalar(new[key])}\n"))
        else:
            return None
    return edits


def _appended(text: str, key: Any, sequence: Any, added: list[dict]) -> tuple[int, int, str] | None:
    """The edit that adds the new entries: after the last entry's last line, in the sequence's indentation; an empty
    ``[]`` becomes a block list under its key."""
    if sequence.flow_style and not sequence.value:
        block = yaml.safe_dump(added, default_flow_style=False, sort_keys=False, width=1 << 30, allow_unicode=True)
        indent = " " * (key.start_mark.column + 2)
        return sequence.start_mark.index, sequence.end_mark.index, "\n" + "".join(indent + row for row in block.splitlines(True)).rstrip("\n")
    if sequence.flow_style or not sequence.value:
        return None
    last = sequence.value[-1]
    start = last.start_mark
    line = text[start.index - start.column:start.index]
    dash = line.rfind("-")
    if dash < 0:
        return None
    block = yaml.safe_dump(added, default_flow_style=False, sort_keys=False, width=1 << 30, allow_unicode=True)
    indented = "".join(" " * dash + row for row in block.splitlines(True))
    at = _line_end(text, _last_leaf(last).end_mark.index)
    return at, at, ("" if text[at - 1:at] in ("\n", "") else "\n") + indented


def _edit_text(text: str, root: Any, data: dict, merged: dict, added: list[dict]) -> str | None:
    """The live text with each changed value replaced where it stands, or None where the edit cannot be checked to give
    exactly the merged document."""
    edits: list[tuple[int, int, str]] = []
    model_list = _child(root, "model_list")
    if model_list is not None and isinstance(model_list[1], yaml.SequenceNode):
        for position, (old, new) in enumerate(zip(data.get("model_list") or [], merged.get("model_list") or [], strict=False)):
            if old == new:
                continue
            item = model_list[1].value[position]
            params = _child(item, "litellm_params")
            if params is None or not isinstance(params[1], yaml.MappingNode):
                return None
            found = _params_edits(text, params[1], old.get("litellm_params") or {}, new["litellm_params"])
            if found is None:
                return None
            edits += found
    if added:
        if model_list is None or (isinstance(model_list[1], yaml.ScalarNode) and model_list[1].value in ("", "~", "null")):
            block = dump_yaml({"model_list": added})
            tail = "" if text.endswith("\n") or not text else "\n"
            if model_list is not None:
                return None
            edits.append((len(text), len(text), tail + block))
        else:
            appended = _appended(text, model_list[0], model_list[1], added)
            if appended is None:
                return None
            edits.append(appended)
    result = text
    for start, end, replacement in sorted(edits, reverse=True):
        result = result[:start] + replacement + result[end:]
    try:
        if yaml.safe_load(result) != merged:
            return None
    except yaml.YAMLError:
        return None
    return result
