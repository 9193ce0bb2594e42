"""Seat by seat, what a render would change against an earlier render (a directory or an older plan)."""

from __future__ import annotations

import difflib
from typing import Literal

import yaml
from pydantic import BaseModel, Field

from seatplan.engine.change import seat_change
from seatplan.engine.launch import seat_launch_from_env
from seatplan.engine.parse import parse_env
from seatplan.errors import SeatplanError
from seatplan.render.bundle import MANIFEST
from seatplan.render.gateway_config import PROVIDER, PROVIDER_WHY, LiveConfig
from seatplan.render.targets import Files

Status = Literal["new", "removed", "changed", "unchanged"]
ENV_PREFIX = "env/"
# How to roll out, not what runs: the playbook carries the plan's rollout steps, which differ between a plan made
# knowing what runs and one made without, though neither changes an engine. Shown, never counted as a change.
ROLLOUT_PREFIX = "ansible/"


class Change(BaseModel):
    what: str
    old: str | None
    new: str | None


class RouteChange(Change):
    why: str | None = None  # a changed provider prefix says why


class SeatDiff(BaseModel):
    seat: str
    status: Status
    changes: list[Change] = Field(default_factory=list)
    # a new seat starts; a changed one restarts where engine.change says the change needs it (not for a pinned seat's
    # utilisation, read only at start, nor for comments), or where its compose service or drop-in changed
    restarts: bool = False


class FileDiff(BaseModel):
    path: str
    status: Status
    diff: str = ""


class RouteDiff(BaseModel):
    """One ``model_list`` entry of the gateway's config, the rendered one against the one it replaces."""

    model_name: str
    model: str  # litellm_params.model as rendered (as it was, for a removed entry)
    status: Literal["added", "removed", "changed", "unchanged"]
    changes: list[RouteChange] = Field(default_factory=list)
    kept: list[str] = Field(default_factory=list, description="the entry's own keys, as they were (model_info, litellm_params.rpm...)")


class GatewayDiff(BaseModel):
    against: str  # the live config render read, or the earlier render's litellm/config.yaml
    routes: list[RouteDiff]
    sections_kept: list[str]
    sections_removed: list[str] = Field(default_factory=list)
    sections_added: list[str] = Field(default_factory=list)

    @property
    def changed(self) -> bool:
        return any(route.status != "unchanged" for route in self.routes) or bool(self.sections_removed or self.sections_added)


class DiffReport(BaseModel):
    against: str
    changed: bool
    seats: list[SeatDiff]
    files: list[FileDiff]
    warnings: list[str] = Field(default_factory=list)
    gateway: GatewayDiff | None = None


def env_changes(old_text: str, new_text: str) -> tuple[list[Change], bool]:
    """What differs between two env files of a seat, on what the engine runs (``engine.change``, the one change model
    plan's rollout and apply use too), and whether that needs a restart; a file that differs in nothing the engine
    reads differs in its comments."""
    old_env, new_env = parse_env(old_text), parse_env(new_text)
    change = seat_change(seat_launch_from_env(old_env), seat_launch_from_env(new_env))
    changes = [Change(what=difference.what, old=difference.old, new=difference.new) for difference in change.differences]
    if not changes and old_text != new_text:
        changes.append(Change(what="comments", old=None, new=None))
    return changes, change.restart


def status_of(old: str | None, new: str | None) -> Status:
    if old is None:
        return "new"
    if new is None:
        return "removed"
    return "unchanged" if old == new else "changed"


def unified(old: str, new: str, path: str) -> str:
    """``diff -u`` of two texts, as difflib.unified_diff writes it but without its "autojunk" rule: in a file of
    200 lines or more, difflib ignores lines that recur often (compose.yaml's `- '1024'`, `- --max-num-seqs`), and
    a changed engine's unchanged flags then show as removed and added again."""
    before, after = old.splitlines(True), new.splitlines(True)
    lines: list[str] = []
    for group in difflib.SequenceMatcher(None, before, after, autojunk=False).get_grouped_opcodes(3):
        if not lines:
            lines += [f"--- a/{path}\n", f"+++ b/{path}\n"]
        lines.append(f"@@ -{_hunk_range(group[0][1], group[-1][2])} +{_hunk_range(group[0][3], group[-1][4])} @@\n")
        for tag, old_start, old_end, new_start, new_end in group:
            if tag == "equal":
                lines += [" " + line for line in before[old_start:old_end]]
                continue
            lines += ["-" + line for line in before[old_start:old_end]] + ["+" + line for line in after[new_start:new_end]]
    return "".join(lines)


def _hunk_range(start: int, stop: int) -> str:
    """A hunk's line range as ``diff -u`` writes it: ``first,count``, ``first`` alone for one line, and the line
    before an empty range."""
    count = stop - start
    first = start + 1 if count else start
    return str(first) if count == 1 else f"{first},{count}"


def located(path: str, against: str, old_text: str, new_text: str) -> tuple[list[Change], bool]:
    """:func:`env_changes`, with a problem located in the env file it came from."""
    try:
        return env_changes(old_text, new_text)
    except SeatplanError as problem:
        raise SeatplanError(problem.message, where=f"{against}/{path}", fix=problem.fix) from None


def own_files(seat: str) -> dict[str, str]:
    """A seat's files besides its env file, by what a change shows as (render/ansible.py copies them per seat)."""
    return {"its compose service (compose-seats/)": f"compose-seats/{seat}.yaml", "its systemd drop-in": f"systemd/seatplan-vllm@{seat}.service.d/seatplan.conf"}


GATEWAY_CONFIG = "litellm/config.yaml"
OWNED_ROUTE_KEYS = ("api_base", "api_key")  # with the provider prefix: what seatplan sets in a seat's entry (render/gateway_config.py)


def _entries(text: str) -> tuple[dict, list[dict]]:
    try:
        document = yaml.safe_load(text)
    except yaml.YAMLError:
        return {}, []
    if not isinstance(document, dict):
        return {}, []
    entries = document.get("model_list")
    return document, [entry for entry in entries if isinstance(entry, dict)] if isinstance(entries, list) else []


def _params(entry: dict) -> dict:
    given = entry.get("litellm_params")
    return given if isinstance(given, dict) else {}


def _route_key(entry: dict) -> tuple[str, str]:
    """An entry by the name clients ask for and what it routes to, its provider prefix aside (a changed prefix is a
    change of the same entry)."""
    model = str(_params(entry).get("model", ""))
    return str(entry.get("model_name")), model.split("/", 1)[1] if "/" in model else model


def _kept(old: dict, new: dict) -> list[str]:
    old_params, new_params = _params(old), _params(new)
    kept = [key for key in old if key not in ("model_name", "litellm_params") and new.get(key) == old[key]]
    return kept + [f"litellm_params.{key}" for key in old_params if key not in ("model", *OWNED_ROUTE_KEYS) and new_params.get(key) == old_params[key]]


def _route_changes(old: dict, new: dict) -> list[RouteChange]:
    old_params, new_params = _params(old), _params(new)
    changes = []
    old_provider = str(old_params.get("model", "")).split("/", 1)[0]
    new_provider = str(new_params.get("model", "")).split("/", 1)[0]
    if old_provider != new_provider:
        changes.append(RouteChange(what="provider", old=f"{old_provider}/", new=f"{new_provider}/", why=PROVIDER_WHY if new_provider == PROVIDER else None))
    for key in OWNED_ROUTE_KEYS:
        if old_params.get(key) != new_params.get(key):
            changes.append(RouteChange(what=key, old=_shown(old_params.get(key)), new=_shown(new_params.get(key))))
    for key in sorted((set(old) | set(new)) - {"model_name", "litellm_params"}):
        if old.get(key) != new.get(key):
            changes.append(RouteChange(what=key, old=None, new=None))
    for key in sorted((set(old_params) | set(new_params)) - {"model", *OWNED_ROUTE_KEYS}):
        if old_params.get(key) != new_params.get(key):
            changes.append(RouteChange(what=f"litellm_params.{key}", old=_shown(old_params.get(key)), new=_shown(new_params.get(key))))
    return changes


def _shown(value: object) -> str | None:
    return None if value is None else str(value)


def gateway_diff(old_text: str | None, new_text: str, against: str) -> GatewayDiff:
    """Entry by entry, what the rendered gateway config changes against the one it replaces (None: there was none)."""
    old_document, old_entries = _entries(old_text or "")
    new_document, new_entries = _entries(new_text)
    unmatched = list(old_entries)
    routes = []
    for entry in new_entries:
        key = _route_key(entry)
        before = next((item for item in unmatched if _route_key(item) == key), None)
        model = str(_params(entry).get("model", ""))
        if before is None:
            api_base = _params(entry).get("api_base")
            routes.append(RouteDiff(model_name=str(entry.get("model_name")), model=model, status="added",
                                    changes=[RouteChange(what="api_base", old=None, new=_shown(api_base))]))
            continue
        unmatched.remove(before)
        changes = _route_changes(before, entry)
        routes.append(RouteDiff(model_name=str(entry.get("model_name")), model=model, status="changed" if changes else "unchanged", changes=changes,
                                kept=_kept(before, entry)))
    routes += [RouteDiff(model_name=str(entry.get("model_name")), model=str(_params(entry).get("model", "")), status="removed")
               for entry in unmatched]
    old_sections = [key for key in old_document if key != "model_list"]
    new_sections = [key for key in new_document if key != "model_list"]
    return GatewayDiff(against=against, routes=routes, sections_kept=[key for key in old_sections if key in new_sections],
                       sections_removed=[key for key in old_sections if key not in new_sections],
                       sections_added=[key for key in new_sections if key not in old_sections])


def diff_trees(old: Files, new: Files, against: str, live: LiveConfig | None = None) -> DiffReport:
    """``live``: the gateway's config as it runs, which the gateway's entries are compared with (else the earlier
    render's)."""
    seat_paths = sorted(path for path in set(old) | set(new) if path.startswith(ENV_PREFIX) and path.endswith(".env"))
    seats = []
    for path in seat_paths:
        name = path[len(ENV_PREFIX) : -len(".env")]
        status = status_of(old.get(path), new.get(path))
        changes, restarts = located(path, against, old[path], new[path]) if status == "changed" else ([], status == "new")
        if status == "unchanged":
            # apply restarts a seat when any of its own files changes (ansible.py: the seat's compose service, its drop-in)
            for what, own in own_files(name).items():
                if (own in old or own in new) and old.get(own) != new.get(own):
                    status, restarts = "changed", True
                    changes.append(Change(what=what, old=None, new=None))
        seats.append(SeatDiff(seat=name, status=status, changes=changes, restarts=restarts))
    files = []
    for path in sorted((set(old) | set(new)) - set(seat_paths) - {MANIFEST}):
        status = status_of(old.get(path), new.get(path))
        text = "" if status == "unchanged" else unified(old.get(path) or "", new.get(path) or "", path)
        files.append(FileDiff(path=path, status=status, diff=text))
    gateway = None
    if GATEWAY_CONFIG in new:
        old_text, old_where = (live.text, live.display) if live is not None else (old.get(GATEWAY_CONFIG), f"{against}/{GATEWAY_CONFIG}")
        gateway = gateway_diff(old_text, new[GATEWAY_CONFIG], old_where)
    changed = (any(seat.status != "unchanged" for seat in seats) or any(item.status != "unchanged" for item in files if not item.path.startswith(ROLLOUT_PREFIX))
               or (gateway is not None and gateway.changed))
    return DiffReport(against=against, changed=changed, seats=seats, files=files, gateway=gateway)
