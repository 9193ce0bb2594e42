"""Reading the documents stages hand each other (usage summary, observations, a saved plan) with user-worded errors.

Each document says what it is (``kind``) and which layout it has (``version``); a reader checks both before
anything else, so a usage report cannot be passed off as observations, nor ``{}`` as either. Every document is
read with bounded size and depth, as UTF-8.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from seatplan.documents.observed import DiagnoseReport, ObservedFootprints
from seatplan.documents.plan import PLAN_VERSION, Plan, upgraded_plan
from seatplan.documents.usage import UsageReport
from seatplan.errors import SeatplanError
from seatplan.fileio import read_bounded_bytes
from seatplan.jsontext import JsonTooDeep, loads_bounded

Document = TypeVar("Document", bound=BaseModel)

MAX_DOCUMENT_BYTES = 256 << 20  # a usage report of thousands of models and keys is a few MB
# The kinds seatplan writes, and the newest version of each this seatplan reads.
MAX_FLEET_SNIFF_BYTES = 4 << 20  # a fleet file is a few KB; a larger non-JSON file is not read again as YAML
# An older version of a kind as the newest reads it (the previous release's plans stay readable).
KIND_UPGRADES: dict[str, Callable[[dict[str, Any]], dict[str, Any]]] = {"seatplan.plan": upgraded_plan}
KIND_VERSIONS = {"seatplan.plan": PLAN_VERSION, "seatplan.usage": 1, "seatplan.observed": 1, "seatplan.diagnose": 1}


# Each kind as people call it, the command that writes it and the options that read it: what a refusal says when
# one document is passed where another is expected (a usage report given to `render`, a plan given to `plan`).
KIND_NAMES = {
    "seatplan.plan": ("a plan", "seatplan plan FLEET -o plan.json",
                      "render, diff, apply, verify, explain, upgrade-check, report, diagnose --plan and plan --current"),
    "seatplan.usage": ("a usage report", "seatplan usage -o usage.json", "plan --usage and report --usage"),
    "seatplan.diagnose": ("a diagnose document", "seatplan diagnose -o diagnose.json", "plan --observed and report --diagnose"),
    "seatplan.observed": ("an observations file", "an older seatplan diagnose", "plan --observed and report --observed"),
}


def kind_said(kind: object) -> str:
    """``kind`` in words: what it is, what wrote it and what reads it."""
    if isinstance(kind, str) and kind in KIND_NAMES:
        name, made_by, read_by = KIND_NAMES[kind]
        return f"{name} ({kind}, written by `{made_by}`, read by {read_by})"
    if isinstance(kind, str) and kind:
        return f"a {kind} document"
    return "a document without a seatplan kind"


def check_kind(data: object, kind: str, what: str, where: str, fix: str) -> None:
    """Refuse a document that does not say it is ``kind``, or is of a version newer than this seatplan reads."""
    found = data.get("kind") if isinstance(data, dict) else None
    if found != kind:
        raise SeatplanError(f"this is {kind_said(found)}, not a {what}", where=where, fix=fix)
    assert isinstance(data, dict)  # found == kind, and only a dict has a kind
    version = data.get("version")
    newest = KIND_VERSIONS[kind]
    if isinstance(version, bool) or not isinstance(version, int) or not 1 <= version <= newest:
        raise SeatplanError(f"{kind} version {version!r} is not one this seatplan reads (1 to {newest})", where=where,
                            fix="write it again with this seatplan, or upgrade seatplan")


def read_document(path: str | Path, model: type[Document], what: str, fix: str, kind: str) -> Document:
    return read_document_and_json(path, model, what, fix, kind)[0]


def read_document_and_json(path: str | Path, model: type[Document], what: str, fix: str, kind: str) -> tuple[Document, dict[str, Any]]:
    """The document, and the JSON it was read from (for fields newer than ``model``, as the report draws them)."""
    source = Path(path)
    data = read_bounded_json(source, what, fix)
    check_kind(data, kind, what, str(source), fix)
    assert isinstance(data, dict)  # check_kind found a kind, which only a mapping has
    data = KIND_UPGRADES.get(kind, lambda older: older)(data)
    return validated(model, data, str(source), fix), data


def read_bounded_json(source: Path, what: str, fix: str) -> object:
    """A JSON file of at most MAX_DOCUMENT_BYTES, UTF-8, bounded in depth, finite numbers; else a SeatplanError."""
    raw = read_bounded_bytes(source, what, fix, MAX_DOCUMENT_BYTES)
    if not raw.strip():
        raise SeatplanError(f"the {what} is empty", where=str(source), fix=fix)
    try:
        return loads_bounded(raw.decode("utf-8"))
    except UnicodeDecodeError as problem:
        raise SeatplanError(f"the {what} is not UTF-8 text ({problem.reason} at byte {problem.start})", where=str(source),
                            fix=fix) from None
    except json.JSONDecodeError as problem:
        if looks_like_fleet(raw):
            raise SeatplanError(f"this is a fleet file (YAML), not a {what}", where=str(source),
                                fix=f"make the plan from it first, `seatplan plan {source} -o plan.json`, and pass plan.json") from None
        raise SeatplanError(f"the {what} is not JSON: {problem.msg}", where=f"{source}:{problem.lineno}", fix=fix) from None
    except (JsonTooDeep, ValueError) as problem:
        raise SeatplanError(f"the {what} is not a document seatplan writes: {problem}", where=str(source), fix=fix) from None


FLEET_TOP_KEY = re.compile(rb"^(hosts|seats)[ \t]*:", re.MULTILINE)


def looks_like_fleet(raw: bytes) -> bool:
    """A YAML file with a fleet's top-level keys (``hosts:``, ``seats:`` at the start of a line): the file `seatplan
    plan` reads, given where a document it writes is expected (issue 32). Only files that failed as JSON get here; the
    keys are looked for as text, not parsed (a hostile file's deep nesting would exhaust a YAML parser's recursion)."""
    return len(raw) <= MAX_FLEET_SNIFF_BYTES and FLEET_TOP_KEY.search(raw) is not None


def validated(model: type[Document], data: object, where: str, fix: str) -> Document:
    """``model`` from ``data``; the first validation error, with its field, as a SeatplanError."""
    try:
        return model.model_validate(data)
    except ValidationError as error:
        first = error.errors(include_url=False)[0]
        field = ".".join(str(step) for step in first["loc"]) or "(top level)"
        raise SeatplanError(f"{field}: {str(first['msg']).removeprefix('Value error, ')}", where=where, fix=fix) from None


def read_usage(path: str | Path) -> UsageReport:
    return read_document(path, UsageReport, "usage summary", "pass the JSON that `seatplan usage --json` wrote",
                         "seatplan.usage")


def read_observed(path: str | Path) -> ObservedFootprints:
    """The observations: the ``observed`` part of the diagnose document (or an observations file older seatplans wrote)."""
    source, fix = Path(path), "pass the document `seatplan diagnose -o FILE` wrote"
    data = read_bounded_json(source, "observations file", fix)
    if isinstance(data, dict) and data.get("kind") == "seatplan.observed":
        check_kind(data, "seatplan.observed", "observations file", str(source), fix)
        return validated(ObservedFootprints, data, str(source), fix)
    check_kind(data, "seatplan.diagnose", "diagnose document", str(source), fix)
    report = validated(DiagnoseReport, data, str(source), fix)
    if report.observed is None:
        raise SeatplanError("the diagnose document carries no observations", where=str(source), fix=fix)
    return report.observed


def read_diagnose(path: str | Path) -> DiagnoseReport:
    return read_document(path, DiagnoseReport, "diagnose document",
                         "pass the document `seatplan diagnose -o FILE` (or --json) wrote", "seatplan.diagnose")


PLAN_FIX = "pass a plan saved with `seatplan plan FLEET -o plan.json`"


def read_plan(path: str | Path) -> Plan:
    return read_document(path, Plan, "plan", PLAN_FIX, "seatplan.plan")
