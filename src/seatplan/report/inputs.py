"""Read the documents a report draws: a plan, and optionally a usage report and a diagnose report.

The plan is kept as its raw JSON beside the typed model too: fields newer than this reader (the
spare-versus-moves ``frontier``, a seat's ``replay``) are drawn when present and skipped when absent.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from seatplan.documents.io import PLAN_FIX, read_diagnose, read_document_and_json, read_observed, read_usage
from seatplan.documents.observed import DiagnoseReport, ObservedFootprints
from seatplan.documents.plan import Plan
from seatplan.documents.usage import UsageReport


@dataclass(frozen=True)
class ReportInputs:
    plan: Plan
    plan_raw: dict[str, Any]
    usage: UsageReport | None = None
    diagnose: DiagnoseReport | None = None
    observed: ObservedFootprints | None = None
    names: dict[str, str] = field(default_factory=dict)  # which file each document came from (base names only)


def read_inputs(plan_path: Path, usage_path: Path | None = None, diagnose_path: Path | None = None,
                observed_path: Path | None = None) -> ReportInputs:
    plan, plan_raw = read_document_and_json(plan_path, Plan, "plan", PLAN_FIX, "seatplan.plan")
    usage = diagnose = observed = None
    names = {"plan": plan_path.name}
    if usage_path is not None:
        usage = read_usage(usage_path)
        names["usage"] = usage_path.name
    if diagnose_path is not None:
        diagnose = read_diagnose(diagnose_path)
        names["diagnose"] = diagnose_path.name
    if observed_path is not None:
        observed = read_observed(observed_path)
        names["observed"] = observed_path.name
    elif diagnose is not None and diagnose.observed is not None:
        # One diagnose document holds the observations too: the report needs no second file.
        observed = diagnose.observed
    return ReportInputs(plan=plan, plan_raw=plan_raw, usage=usage, diagnose=diagnose, observed=observed, names=names)
