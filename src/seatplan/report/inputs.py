"""Read the documents a report draws: a plan, and optionally a usage report and a diagnose report.

The plan is kept as its raw JSON beside the typed model too: fields newer than this reader (the
spare-versus-moves ``frontier``, a seat's ``replay``) are drawn when present and skipped when absent.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from seatplan.documents.io import read_observed
from seatplan.documents.observed import DiagnoseReport, ObservedFootprints
from seatplan.documents.plan import Plan
from seatplan.documents.usage import UsageReport
from seatplan.errors import SeatplanError
from seatplan.jsontext import JsonTooDeep, loads_bounded


@dataclass(frozen=True)
class ReportInputs:
    plan: Plan
    plan_raw: dict[str, Any]
    usage: UsageReport | None = None
    diagnose: DiagnoseReport | None = None
    observed: ObservedFootprints | None = None
    names: dict[str, str] = field(default_factory=dict)  # which file each document came from (base names only)


def read_json(path: Path, what: str, made_by: str) -> Any:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as problem:
        raise SeatplanError(f"cannot read the {what}: {problem.strerror}", where=str(path),
                            fix=f"pass a {what} written by `{made_by}`") from None
    except UnicodeDecodeError as problem:
        raise SeatplanError(f"the {what} is not UTF-8 text ({problem.reason} at byte {problem.start})", where=str(path),
                            fix=f"pass the file `{made_by}` wrote, unchanged") from None
    try:
        return loads_bounded(text)
    except json.JSONDecodeError as problem:
        raise SeatplanError(f"the {what} is not JSON ({problem.msg})", where=f"{path}:{problem.lineno}",
                            fix=f"pass the file `{made_by}` wrote, unchanged") from None
    except (JsonTooDeep, ValueError) as problem:
        raise SeatplanError(f"the {what} is not a document seatplan writes: {problem}", where=str(path),
                            fix=f"pass the file `{made_by}` wrote, unchanged") from None


def parse_document(model: type[BaseModel], data: Any, path: Path, what: str, made_by: str) -> Any:
    try:
        return model.model_validate(data)
    except ValidationError as problem:
        first = problem.errors()[0]
        location = ".".join(str(part) for part in first["loc"]) or "(top level)"
        raise SeatplanError(f"this is not a {what}: {location}: {first['msg']}", where=str(path),
                            fix=f"pass the file `{made_by}` wrote (with this seatplan version)") from None


def read_inputs(plan_path: Path, usage_path: Path | None = None, diagnose_path: Path | None = None,
                observed_path: Path | None = None) -> ReportInputs:
    plan_raw = read_json(plan_path, "plan", "seatplan plan -o plan.json")
    plan = parse_document(Plan, plan_raw, plan_path, "plan", "seatplan plan -o plan.json")
    usage = diagnose = observed = None
    names = {"plan": plan_path.name}
    if usage_path is not None:
        made_by = "seatplan usage -o usage.json"
        usage = parse_document(UsageReport, read_json(usage_path, "usage report", made_by), usage_path, "usage report", made_by)
        names["usage"] = usage_path.name
    if diagnose_path is not None:
        made_by = "seatplan diagnose --json > diagnose.json"
        diagnose = parse_document(DiagnoseReport, read_json(diagnose_path, "diagnose report", made_by), diagnose_path,
                                  "diagnose report", made_by)
        names["diagnose"] = diagnose_path.name
    if observed_path is not None:
        observed = read_observed(observed_path)
        names["observed"] = observed_path.name
    elif diagnose is not None and diagnose.observed is not None:
        # One diagnose document holds the observations too: the report needs no second file.
        observed = diagnose.observed
    return ReportInputs(plan=plan, plan_raw=plan_raw, usage=usage, diagnose=diagnose, observed=observed, names=names)
