"""Reboots, creep and plateaus in *averaged* history (Beszel's 1m/10m/20m/120m/480m records; pure, numpy).

Each record is the mean of the used memory over its own window ``(end − window, end]``; records of
different windows are never read as one series of points. Every figure comes from one model fitted to
the records as interval means, so a 2-hour and a 10-minute record each count for what they average:

* **Reboot** (where the history shows one): a record falls below the one before it by at least
  ``min_step_mib`` (a record of two hours or more shows only part of the step: a quarter of it will do), out of
  the jitter (memory only grows while an engine lives, so a fall is a restart), a record dips
  below both neighbours (a restart back to the same level: the minutes at zero pull the mean down),
  a record is near zero (the engine was down for most of the window), or a record after a stretch without its
  type's records (longer than its window and HOLE_S: polls missing) reads lower than the one before it by more
  than its type's jitter and a quarter of ``min_step_mib``. The reboot lies somewhere in
  the windows of the falling record and the one before it (unless that one still reads the old level); a boot time from the engines' logs inside
  that span fixes it exactly, else it is fitted (and labelled inferred, with the span).
* **Model of one boot's life**: the level ``P`` before the reboot ``s``, nothing while the engine is down (until
  ``c = s + delay``, the delay 0–15 min), then ``L + R · shape(t − c)``, less the memory-seconds ``D`` lost loading in
  the record holding the restart and in the next one (one unknown ≥ 0 each, whatever ``s``: a loss only for some
  ``s`` would make the fit prefer those for the freedom alone). ``L`` is the level when the engine is back
  (extrapolated: the first post-boot record already holds part of the creep), ``R`` the creep. Shapes: saturating
  exponential ``1 − exp(−x / τ)`` (with a second, faster stage of time constant τ / r, r from FAST_RATIOS refined, and its
  own rise ≥ 0: two-stage) and linear-then-flat ``min(x / T, 1)``. Each record is the mean of the curve over its
  window (closed-form integrals). For a given ``s``, delay and τ (or ``T``) the model is linear in ``L``, the rises
  and ``D`` (all ≥ 0 but ``L``), so those come from non-negative least squares (each record weighted by its window
  length: inverse variance for a mean of independent polls); ``s``, τ/``T`` and the shape from a coarse grid (each
  reboot time's scales and fast ratio then refined: the profile over ``s``), then finer grids around the best point
  and a compass search from it and the next-best reboot times (``_pattern_search``); without a boot line the
  profile over ``s`` across the whole span (``_profile_reboots``). A boot line fixes ``s``; the delay is fitted on a
  30-second grid. A life before that was still creeping may have risen past its last record by the reboot: one more
  unknown ≥ 0 in the record holding it (``Before.rising``).
* **Hidden reboot**: a first life whose creep starts at a stretch without records rebooted there (creep starts at a
  boot); that stretch becomes the reboot's span (``hidden_reboot``).
* **Bounds**: every grid point evaluated is kept; the fits whose χ² is within ALIKE_CHI2 of the best one's (the
  jitter estimated from the best fit's residual) are those the records cannot tell apart. Their range of ``L``
  bounds the creep (``rise_low_mib`` … ``rise_high_mib``), their 95 % times the plateau time; the reboot times at
  the edges of theirs, and the latest creep start, are refined on fine grids. ``rise_determined`` is false when
  those rises spread beyond ±DETERMINED_SHARE of the reported one, ``plateau_at_determined`` when the times spread
  beyond one record of the finest type there. Among them the point estimate is the middle reboot time, then the
  smallest rise they see.
* **Plateau**: the level at the history's end from the latest levelled records (those after the fit reached
  95 % of its rise) at the finest resolution among them, i.e. the fit's end level corrected by their mean
  residual; ± twice that mean's standard error plus the fit's own movement across them. Still rising: the
  last hour's finest records.
* **Levelled off**: the history stays flat after the fitted rise for a quarter of the rise's duration (at
  least an hour); else the creep is reported as still rising.
* **Resolved**: at least three records see the rise and the restart's span is shorter than the rise.
  A 12-hour creep seen only through 8-hour (480m) records is not: its plateau is still exact, its size is
  reported but labelled unresolved.

Error measured (tests/observe/test_averaged_random.py, 200 random histories the fit does not assume, made as
the hub's cron makes them, and 20 more on a fresh seed each run; the figures in docs/diagnose.md): in every
draw the plateau within 40 MiB, the creep within 10 % or flagged not determinable with the truth inside its
bounds, and the plateau time within one record or so flagged. Without a boot line, moving the reboot by Δ
inside its window scales an exponential creep's rise by exp(Δ / τ), which no record can tell apart: that is
what the bounds say.

The package, one module per idea: ``records`` (the records and their noise), ``reboots`` (where the history
shows a restart), ``model`` (the curve and its least squares), ``search`` (one life's best fit), ``result``
(the analysis). Other modules import from here.
"""

from seatplan.observe.averaged.reboots import Reboot, find_reboots
from seatplan.observe.averaged.records import Records, when_utc
from seatplan.observe.averaged.result import Analysis, analyse_records

__all__ = ["Analysis", "Reboot", "Records", "analyse_records", "find_reboots", "when_utc"]
