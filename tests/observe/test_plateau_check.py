"""The plateau check with the plateau's ± MiB: it says when that band straddles the planned spare."""

from __future__ import annotations

from datetime import UTC, datetime

import numpy as np
import pytest

from kits.documents import plan_document, planned_gpu
from seatplan.documents.observed import GpuReport
from seatplan.observe.calibrate import FOOTPRINT_TOLERANCE_MIB, check_plan, verdicts
from seatplan.units import MiB

TOTAL_MIB = 97_871.0


def report(plateau_mib: float, band_mib: float, to_come_mib: float | None = None) -> GpuReport:
    at = datetime(2026, 12, 1, tzinfo=UTC)
    return GpuReport(host="box", index=0, samples=100, start=at, end=at, gaps=0, total_mib=TOTAL_MIB,
                     plateau_used_mib=plateau_mib, plateau_uncertainty_mib=band_mib, still_to_rise_mib=to_come_mib)


@pytest.mark.parametrize("seed", range(5))
def test_the_check_says_when_the_band_straddles_the_planned_spare(seed):
    rng = np.random.default_rng(seed)
    used_mib, spare_mib = float(rng.uniform(40_000, 90_000)), float(rng.uniform(200, 4_000))
    plan = plan_document([], [planned_gpu("box", 0, int(used_mib * MiB), int(spare_mib * MiB), [])])
    band = float(rng.uniform(5, 60))
    # The verdict's line: an observed spare the tolerance short of the planned one. Observed: the use at that line
    # plus an offset drawn inside the band (straddles: pass or fail could flip) or well outside it (does not).
    at_line_mib = used_mib + FOOTPRINT_TOLERANCE_MIB
    for offset, straddles in [(float(rng.uniform(-0.9, 0.9)) * band, True), (band + float(rng.uniform(50, 500)), False),
                              (-band - float(rng.uniform(50, 500)), False)]:
        gpu = report(at_line_mib + offset, band)
        gpu.plan, _ = check_plan(gpu, plan, {})
        verdict = verdicts(plan, [gpu])[0]
        assert verdict.straddles is straddles, (offset, band)
        assert verdict.plateau_uncertainty_mib == band
        assert (": the uncertainty straddles the planned spare" in verdict.reason) is straddles
        assert f"± {band:,.0f} MiB" in verdict.reason
    # A creep that may still add memory widens the band downwards (the spare can only shrink).
    gpu = report(at_line_mib - band - 100, band, to_come_mib=300)
    gpu.plan, _ = check_plan(gpu, plan, {})
    verdict = verdicts(plan, [gpu])[0]
    assert verdict.straddles and "may still add 300 MiB" in verdict.reason
