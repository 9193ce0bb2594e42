"""Placement: which seats go on which GPUs (the layout with the largest worst-case spare at plateau).

One problem type (:mod:`.problem`), one module per method (:mod:`.exact` branch and bound,
:mod:`.cpsat`, :mod:`.local` search, :mod:`.greedy` baselines), the bounds (:mod:`.bounds`), the
spare-versus-moves frontier (:mod:`.frontier`), why a fleet does not fit (:mod:`.rejections`) and
the orchestration (:mod:`.solve`). Other modules import from here.
"""

from seatplan.plan.placement.problem import (
    Alternative,
    FrontierPoint,
    GpuRejection,
    GpuSlot,
    Infeasibility,
    Placement,
    PlacementResult,
    SeatDemand,
    SeatShortfall,
    gpu_label,
)
from seatplan.plan.placement.solve import place

__all__ = [
    "Alternative",
    "FrontierPoint",
    "GpuRejection",
    "GpuSlot",
    "Infeasibility",
    "Placement",
    "PlacementResult",
    "SeatDemand",
    "SeatShortfall",
    "gpu_label",
    "place",
]
