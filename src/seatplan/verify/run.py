"""Verify a plan against the running fleet: expectations → probes → checks (the orchestration)."""

from __future__ import annotations

from dataclasses import replace

from seatplan.verify.checks import engine_checks, gateway_checks, redact
from seatplan.verify.expect import SeatExpectation
from seatplan.verify.models import Check, VerifyReport
from seatplan.verify.probe import ProbeSettings, observe_engine, observe_gateway


def verify_fleet(
    expectations: list[SeatExpectation],
    planned_version: str,
    *,
    gateway_url: str | None = None,
    gateway_key: str | None = None,
    settings: ProbeSettings = ProbeSettings(),
) -> VerifyReport:
    settings = replace(settings, secrets=tuple(secret for secret in (*settings.secrets, gateway_key) if secret))
    checks: list[Check] = []
    for expectation in expectations:
        checks += engine_checks(expectation, planned_version, observe_engine(expectation, settings))
    if gateway_url is not None:
        seen = observe_gateway(gateway_url, gateway_key, [expectation.served_model_name for expectation in expectations], settings)
        checks += gateway_checks(expectations, seen)
    checks = redact(checks, list(settings.secrets))
    return VerifyReport(ok=bool(checks) and all(check.ok for check in checks), checks=checks)
