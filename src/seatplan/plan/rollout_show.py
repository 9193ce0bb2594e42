"""The rollout for people: one line under the plan, the steps, and ``seatplan explain PLAN --rollout`` (each start's
check with its numbers). ``--json`` prints ``plan.rollout`` instead."""

from __future__ import annotations

from rich.console import Console, Group
from rich.table import Table
from rich.text import Text

from seatplan.documents.plan import Plan, Rollout, RolloutStep, StartCheck
from seatplan.output import fit_table
from seatplan.units import human_bytes
from seatplan.versions import cite

CHECK_DROP = ("running", "own ctx", "fit margin", "request margin")


def rollout_summary(rollout: Rollout) -> str:
    """"rollout: 4 steps; qwen3-32b down during steps 1–3"."""
    if rollout.fails is not None:
        return f"rollout: does not fit: {rollout.fails.reason}"
    if not rollout.steps:
        return "rollout: nothing to change"
    said = f"rollout: {len(rollout.steps)} step{'s' if len(rollout.steps) != 1 else ''}"
    if rollout.down:
        said += "; " + ", ".join(f"{span.seat} down during steps {span.from_step}–{span.to_step}" for span in rollout.down)
    else:
        said += ", no seat down while another starts"
    return said + ("" if rollout.proven else " (the search ran out of its budget: the fewest seats down is not proven)")


def step_said(number: int, step: RolloutStep) -> str:
    where = ", ".join(step.gpus)
    return f"{number}. {step.action} {step.seat} {'on' if step.action != 'stop' else 'from'} {where}"


def print_rollout(console: Console, plan: Plan) -> None:
    """Under the plan: the summary and the steps in the order apply runs them."""
    if plan.rollout is None:
        return
    style = "bold red" if plan.rollout.fails is not None else "bold"
    console.print(Text(rollout_summary(plan.rollout), style=style), soft_wrap=True)
    for number, step in enumerate(plan.rollout.steps, start=1):
        console.print(Text(f"  {step_said(number, step)}"), soft_wrap=True)


def _gib(num_bytes: int | None) -> str:
    return "-" if num_bytes is None else f"{num_bytes / 2**30:.2f}"


def check_table(title: str, rows: list[tuple[str, str, StartCheck]]) -> Table:
    """One row per start and GPU (GiB)."""
    table = Table(title=title, title_justify="left")
    for column in ("step", "seat", "GPU", "running", "free", "own ctx", "util", "requested", "request margin", "footprint", "fit margin", "check"):
        table.add_column(column, justify="left" if column in ("seat", "GPU", "running", "check") else "right")
    for step, seat, check in rows:
        table.add_row(
            step, seat, check.gpu, ", ".join(check.running) or "-", _gib(check.free_bytes), _gib(check.own_context_bytes),
            f"{check.gpu_memory_utilization:.3f}" if check.gpu_memory_utilization is not None else "-",
            _gib(check.requested_bytes), _gib(check.request_margin_bytes), _gib(check.footprint_bytes), _gib(check.fit_margin_bytes),
            "pass" if check.passes else "FAIL",
        )
    return table


def check_said(check: StartCheck) -> str:
    """The check in words, with exact bytes."""
    fit = f"footprint {check.footprint_bytes:,} B ≤ free {check.free_bytes:,} B (margin {human_bytes(check.fit_margin_bytes)})"
    if check.requested_bytes is None or check.gpu_memory_utilization is None:
        return f"{check.gpu}: fixed seat, no vLLM check; {fit}"
    snapshot = check.free_bytes - check.own_context_bytes
    return (f"{check.gpu}: vLLM's snapshot sees {snapshot:,} B free (free {check.free_bytes:,} − own context {check.own_context_bytes:,}); "
            f"requested = ceil({check.total_bytes:,} × {check.gpu_memory_utilization:.3f}) = {check.requested_bytes:,} B "
            f"(margin {human_bytes(check.request_margin_bytes or 0)}); {fit}")


def rollout_renderable(plan: Plan, width: int = 80) -> Group:
    """``seatplan explain PLAN --rollout``: every step, and each start's check on each of its GPUs."""
    if plan.rollout is None:
        return Group(Text("no rollout: the plan knows nothing of what runs (plan it with --current PLAN|DIR or a current_layout)"))
    rollout = plan.rollout
    items: list = [Text(rollout_summary(rollout), style="bold")]
    check = cite("request_memory", plan.inputs.vllm_version)
    items.append(Text(f"each start: {check} needs free at its snapshot (free − own context) ≥ ceil(total × util), "
                      "and the engine's footprint at plateau must fit in the free memory"))
    if rollout.fails is not None:
        rows = [("-", rollout.fails.seat, check) for check in rollout.fails.checks]
        items.append(fit_table(check_table(f"{rollout.fails.seat}: the most room any order leaves it (GiB)", rows), width, CHECK_DROP))
        items += [Text(f"  {check_said(check)}") for check in rollout.fails.checks]
        return Group(*items)
    rows = [(str(number), step.seat, check) for number, step in enumerate(rollout.steps, start=1) for check in step.checks]
    if rows:
        items.append(fit_table(check_table("Each start's check (GiB)", rows), width, CHECK_DROP))
    for number, step in enumerate(rollout.steps, start=1):
        items.append(Text(step_said(number, step), style="bold"))
        items += [Text(f"    {check_said(check)}") for check in step.checks]
    return Group(*items)
