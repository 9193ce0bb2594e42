"""The verify stage's documents."""

from __future__ import annotations

from pydantic import BaseModel

Value = int | float | str | bool | None


class Check(BaseModel):
    """One comparison of what the plan (or the version table) expects with what the running fleet showed."""

    seat: str
    check: str
    expected: Value
    seen: Value
    ok: bool


class VerifyReport(BaseModel):
    ok: bool
    checks: list[Check]


class UpgradeChange(BaseModel):
    """One thing that changes for one seat (or the whole plan: seat ``*``) when its engines move versions."""

    seat: str
    what: str
    now: Value
    after: Value
    area: str
    note: str = ""


class UpgradeReport(BaseModel):
    plan_version: str
    to_version: str
    changes: list[UpgradeChange]
    unchanged_seats: list[str]
