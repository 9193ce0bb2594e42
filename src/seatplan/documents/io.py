"""Reading the plan stage's JSON inputs (usage summary, observations, a saved plan) with user-worded errors."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TypeVar

from pydantic import BaseModel, ValidationError

from seatplan.documents.observed import ObservedFootprints
from seatplan.documents.plan import Plan
from seatplan.documents.usage import UsageReport
from seatplan.errors import SeatplanError

Document = TypeVar("Document", bound=BaseModel)


def read_document(path: str | Path, model: type[Document], what: str, fix: str) -> Document:
    source = Path(path)
    try:
        text = source.read_text(encoding="utf-8")
    except OSError as problem:
        raise SeatplanError(f"cannot read the {what}: {problem.strerror}", where=str(source), fix=fix) from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as problem:
        raise SeatplanError(f"the {what} is not JSON: {problem.msg}", where=f"{source}:{problem.lineno}", fix=fix) from None
    try:
        return model.model_validate(data)
    except ValidationError as error:
        first = error.errors(include_url=False)[0]
        field = ".".join(str(step) for step in first["loc"]) or "(top level)"
        raise SeatplanError(f"{field}: {first['msg']}", where=str(source), fix=fix) from None


def read_usage(path: str | Path) -> UsageReport:
    return read_document(path, UsageReport, "usage summary", "pass the JSON that `seatplan usage --json` wrote")


def read_observed(path: str | Path) -> ObservedFootprints:
    return read_document(path, ObservedFootprints, "observations file", "pass the observed footprints `seatplan diagnose` wrote")


def read_plan(path: str | Path) -> Plan:
    return read_document(path, Plan, "plan", "pass a plan saved with `seatplan plan FLEET -o plan.json`")
