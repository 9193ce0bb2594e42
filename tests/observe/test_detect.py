"""Step, creep and plateau detection on generated series with known answers.

Tolerances (as stated in seatplan/observe/detect.py): step time within 10 minutes of the restart,
step size within 2 % or 50 MiB, plateau within 50 MiB, plateau time within 10 % of the creep's duration.
"""

from __future__ import annotations

from datetime import UTC, datetime

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kits.series import DAY, HOUR, MINUTE, T0, Boot, Scenario, seed_scenarios
from seatplan.observe.detect import GAP_FLOOR_S, GAP_WINDOW, GpuSeries, analyse, count_gaps, rolling_median


def series_of(scenario: Scenario, index: int = 0) -> GpuSeries:
    times, used = scenario.generate()
    return GpuSeries(index=index, times_s=times, used_mib=used, total_mib=97_871.0)


def at(offset_s: float) -> datetime:
    return datetime.fromtimestamp(T0 + offset_s, tz=UTC)


def close_in_time(found: datetime, expected_s: float, tolerance_s: float) -> bool:
    return abs(found.timestamp() - (T0 + expected_s)) <= tolerance_s


def test_seed_flat_gpu_then_restart():
    analysis = analyse(series_of(seed_scenarios()["flat"]))
    assert len(analysis.steps) == 1
    step = analysis.steps[0]
    assert close_in_time(step.at, 4 * DAY, 10 * MINUTE)
    assert step.after_mib == pytest.approx(91_082, abs=50)
    assert step.before_mib == pytest.approx(88_766, abs=50)  # where the first boot's slow drift levelled
    assert [s.creep for s in analysis.segments] == [None, None]  # 200 MiB of drift is not creep
    assert analysis.segments[-1].plateau_used_mib == pytest.approx(91_082, abs=50)


def test_seed_creeping_gpu_two_boots():
    scenario = seed_scenarios()["creeping"]
    analysis = analyse(series_of(scenario))
    assert len(analysis.steps) == 1
    step = analysis.steps[0]
    assert close_in_time(step.at, 3 * DAY, 10 * MINUTE)
    # The level just after the boot is read over persist_bins (70 min) of a rise that starts at once.
    assert step.delta_mib == pytest.approx(70_000 - 97_800, abs=0.05 * 27_800)
    assert analysis.gaps == 2
    for segment, boot in zip(analysis.segments, scenario.boots):
        assert segment.creep is not None and segment.creep.levelled_off
        assert segment.plateau_used_mib == pytest.approx(97_800, abs=50)
        assert segment.level_after_boot_mib == pytest.approx(70_000, abs=0.05 * 27_800)
        assert segment.creep.rise_mib == pytest.approx(27_800, rel=0.05)
        plateau_reached = boot.at_s + boot.down_minutes * MINUTE + boot.creep_hours * HOUR
        assert close_in_time(segment.creep.plateau_at, plateau_reached, 0.10 * boot.creep_hours * HOUR)
        assert close_in_time(segment.creep.start, boot.at_s, 10 * MINUTE)
        # 90 % of a linear rise is reached at 90 % of its duration (after the minutes the engine was down).
        assert segment.creep.hours_to_90pct == pytest.approx(boot.down_minutes / 60 + 0.9 * boot.creep_hours,
                                                             abs=0.10 * boot.creep_hours)


def test_creep_still_rising_is_flagged():
    scenario = Scenario(boots=[Boot(0, 40_000, creep_mib=6_000, creep_hours=60)], days=2)
    creep = analyse(series_of(scenario)).segments[0].creep
    assert creep is not None and not creep.levelled_off


def test_several_restarts_each_found():
    boots = [Boot(0, 30_000), Boot(DAY, 45_000), Boot(2 * DAY, 44_000), Boot(3 * DAY + 7 * HOUR, 60_000, down_minutes=12)]
    analysis = analyse(series_of(Scenario(boots=boots, days=4)))
    # 45,000 → 44,000 is a step too (1,000 MiB ≥ 256); each restart within 10 minutes.
    assert len(analysis.steps) == 3
    for step, boot in zip(analysis.steps, boots[1:]):
        assert close_in_time(step.at, boot.at_s, 10 * MINUTE)
    assert [round(s.delta_mib, -2) for s in analysis.steps] == [15_000, -1_000, 16_000]


def test_restart_back_to_the_same_level_is_no_step():
    analysis = analyse(series_of(Scenario(boots=[Boot(0, 50_000), Boot(2 * DAY, 50_000, down_minutes=20)], days=3)))
    assert analysis.steps == []


def test_gaps_and_agent_restarts_make_no_steps():
    scenario = Scenario(boots=[Boot(0, 62_000)], days=5,
                        gaps=[(DAY, 3 * HOUR), (2 * DAY, 5 * MINUTE), (3 * DAY + HOUR, 11 * HOUR), (4 * DAY, 40 * MINUTE)])
    times, used = scenario.generate()
    # Spikes: an agent that reports 0 for one poll after it restarts, and a few wild single readings.
    used = used.copy()
    used[::997] = 0.0
    used[::1499] += 3_000
    analysis = analyse(GpuSeries(index=0, times_s=times, used_mib=used))
    assert analysis.steps == [] and analysis.segments[0].creep is None
    assert analysis.gaps == 4


def test_missing_readings_are_skipped():
    times, used = Scenario(boots=[Boot(0, 10_000), Boot(DAY, 20_000)], days=2).generate()
    used = used.copy()
    used[::3] = np.nan
    analysis = analyse(GpuSeries(index=0, times_s=times, used_mib=used))
    assert len(analysis.steps) == 1 and close_in_time(analysis.steps[0].at, DAY, 10 * MINUTE)


@settings(max_examples=30, deadline=None)
@given(level=st.floats(1_000, 140_000), noise=st.floats(0, 60), days=st.floats(0.5, 10),
       gap_count=st.integers(0, 6), seed=st.integers(0, 10_000))
def test_flat_noisy_gappy_series_never_steps(level, noise, days, gap_count, seed):
    rng = np.random.default_rng(seed)
    span = int(days * DAY)
    gaps = [(int(rng.integers(0, span)), int(rng.integers(MINUTE, 6 * HOUR))) for _ in range(gap_count)]
    scenario = Scenario(boots=[Boot(0, level, down_minutes=0)], days=days, noise_mib=noise, gaps=gaps, seed=seed)
    times, used = scenario.generate()
    if len(times) < 10:
        return
    analysis = analyse(GpuSeries(index=0, times_s=times, used_mib=used))
    assert analysis.steps == []
    assert analysis.segments[-1].plateau_used_mib == pytest.approx(level, abs=max(3 * noise, 1.0))


@settings(max_examples=20, deadline=None)
@given(before=st.floats(5_000, 70_000), delta=st.floats(600, 60_000), sign=st.sampled_from([-1, 1]),
       day=st.floats(1, 3), seed=st.integers(0, 10_000))
def test_one_restart_is_found_where_it_happened(before, delta, sign, day, seed):
    after = max(before + sign * delta, 300.0)
    if abs(after - before) < 600:
        return
    at_s = int(day * DAY) // MINUTE * MINUTE
    scenario = Scenario(boots=[Boot(0, before, down_minutes=0), Boot(at_s, after)], days=4, seed=seed)
    analysis = analyse(series_of(scenario))
    assert len(analysis.steps) == 1
    assert close_in_time(analysis.steps[0].at, at_s, 10 * MINUTE)
    assert analysis.steps[0].delta_mib == pytest.approx(after - before, abs=max(50, 0.02 * abs(after - before)))


def test_gaps_counted_at_the_long_pauses_alone_match_the_full_rolling_median():
    rng = np.random.default_rng(31)
    for _ in range(40):
        spacing = rng.choice([15.0, 60.0, 300.0, 7200.0], size=int(rng.integers(1, 400))) * rng.uniform(0.9, 1.1)
        spacing[rng.random(len(spacing)) < 0.05] *= rng.uniform(3, 200)
        factor = float(rng.uniform(2, 8))
        full = int(np.count_nonzero(spacing > np.maximum(factor * rolling_median(spacing, GAP_WINDOW), GAP_FLOOR_S)))
        assert count_gaps(spacing, factor) == full
