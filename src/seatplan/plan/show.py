"""Rich tables for a plan, a seat's explanation and a fit report (people's view; ``--json`` prints the documents)."""

from __future__ import annotations

import shlex

from rich.console import Console, Group
from rich.table import Table
from rich.text import Text

from seatplan.documents.plan import FitReport, PartKind, Plan, PlannedFrontierPoint, PlannedSeat, PlannedVllmSeat, RunnerUp
from seatplan.engine.command import engine_command
from seatplan.output import fit_table
from seatplan.plan.rollout_show import print_rollout
from seatplan.units import GiB, human_bytes

RUNNER_UP_SEATS_SHOWN = 4  # seats a runner-up places elsewhere, named before "N more"
PART_COLUMNS = (PartKind.CUDA_CONTEXT, PartKind.NCCL_ALLREDUCE, PartKind.WEIGHTS, PartKind.ACTIVATION_PEAK, PartKind.CUDA_GRAPHS,
                PartKind.KV_CACHE, PartKind.CREEP_ALLOWANCE, PartKind.OBSERVED_NON_KV, PartKind.DECLARED_CAP)
# Columns left out first when a table does not fit the terminal (least important first); names and figures that
# remain are never cut, and the caption names what was left out (output.fit_table). The footprint's parts add up
# to its total, so none of them is dropped: the table stacks instead.
GPU_DROP = ("headroom", "reserved", "name")
FOOTPRINT_DROP = ("basis",)
SEAT_DROP = ("util", "conc.", "boot", "KV GiB", "KV tokens")
PART_TITLES = {"cuda_context": "ctx", "nccl_allreduce": "NCCL", "weights": "weights", "activation_peak": "activ.",
    "cuda_graphs": "graphs", "kv_cache": "KV", "creep_allowance": "creep", "observed_non_kv": "obs. non-KV", "declared_cap": "declared"}


def gib(num_bytes: int | None) -> str:
    return "-" if num_bytes is None else f"{num_bytes / GiB:.2f}"


def headline(plan: Plan) -> str:
    """The choice in one line: the worst-case spare taken, with how many moves, and why not the largest one the
    frontier shows; "proven optimal" only for what was proven (issue 32)."""
    if plan.infeasible is not None:
        said = plan.infeasible.summary.split(". ", 1)[0] if plan.infeasible.summary.startswith("does not fit as asked") else "the fleet does not fit"
        return said + observed_said(plan)
    if plan.worst_case_spare_bytes is None:
        return "no layout found within the time limit"
    said = f"worst-case spare {plan.worst_case_spare_bytes / GiB:.2f} GiB on GPU {plan.worst_case_gpu}{moves_said(plan)}"
    top = largest_point(plan)
    traded = top is not None and top.worst_case_spare_bytes > plan.worst_case_spare_bytes
    if traded:
        assert top is not None
        said += f" (best {top.worst_case_spare_bytes / GiB:.2f} GiB needs {top.moves}; {trade_reason(plan, top.moves)})"
    if not plan.optimal:
        proof = f"not proven optimal (bound {human_bytes(plan.bound_bytes or 0)}, gap {gap(plan)})"
    elif traded:
        proof = f"proven the best with at most {plan.moves} move(s)"
    else:
        proof = "proven optimal"
    return f"{said}, {proof} ({plan.method}, {plan.solve_seconds:.2f} s{restarts_said(plan)}){observed_said(plan)}"


def observed_said(plan: Plan) -> str:
    """With observations (plan --observed, issue 46): which figures the footprints are, so a plan from observed figures
    says so where it is read first."""
    labels = [seat.observation.use for seat in plan.seats if seat.observation is not None]
    if not labels:
        return ""
    counts = ", ".join(f"{labels.count(use)} {use}" for use in ("observed", "derived", "estimated") if labels.count(use))
    if "estimated" not in labels:
        basis = "from observed footprints"
    elif labels.count("estimated") == len(labels):
        basis = "from estimated footprints, none observed"
    else:
        basis = "from observed footprints where present"
    return f"; {basis} ({counts} of {len(labels)} vLLM seat(s))"


def largest_point(plan: Plan) -> PlannedFrontierPoint | None:
    """The frontier's point with the largest worst-case spare (fewest moves among equals)."""
    return max(plan.frontier, key=lambda point: (point.worst_case_spare_bytes, -point.moves), default=None)


def trade_reason(plan: Plan, top_moves: int) -> str:
    """Why the plan stops short of the largest spare: the move budget asked for, or the price of a move."""
    asked = plan.inputs.max_moves
    if asked is not None and top_moves > asked:
        return f"at most {asked} move(s) asked: --max-moves {asked}"
    cost = plan.inputs.move_cost_bytes
    if cost:
        return f"each move must buy {human_bytes(cost)}: policy.move_cost_bytes"
    return plan.chosen_because or "a frontier point other than the largest"


def moves_said(plan: Plan) -> str:
    """Moves count only against a known current layout (issue 18): without one, "0 moves" would say nothing."""
    if plan.inputs.current_from is None:
        return " (no current layout: pass --current PLAN|DIR to count moves)"
    return f" with {plan.moves} move{'' if plan.moves == 1 else 's'}"


def restarts_said(plan: Plan) -> str:
    if plan.restarts is None:
        return ""
    return f", {len(plan.restarts)} restart(s)" + (f": {', '.join(plan.restarts)}" if plan.restarts else "")


def gap(plan: Plan) -> str:
    """How far the worst-case spare can at most be from the optimum: bound − spare, and as a share of the bound."""
    if plan.bound_bytes is None or plan.worst_case_spare_bytes is None:
        return "unknown"
    missing = max(0, plan.bound_bytes - plan.worst_case_spare_bytes)
    share = f" = {100 * missing / plan.bound_bytes:.2f} %" if plan.bound_bytes > 0 else ""
    return f"≤ {human_bytes(missing)}{share}"


def frontier_table(plan: Plan) -> Table:
    table = Table(title="Spare against moves from current_layout (each move restarts that seat elsewhere)", title_justify="left")
    for column in ("at most", "moves", "worst spare GiB", "proven", "seats that move"):
        table.add_column(column, justify="left" if column == "seats that move" else "right")
    taken = plan.moves
    for point in plan.frontier:
        mark = " ←" if point.moves == taken and point.worst_case_spare_bytes == plan.worst_case_spare_bytes else ""
        table.add_row(str(point.max_moves), f"{point.moves}{mark}", gib(point.worst_case_spare_bytes), "yes" if point.proven else "no", ", ".join(point.moved) or "-")
    return table


def gpu_table(plan: Plan) -> Table:
    table = Table(title="GPUs at plateau (GiB)", title_justify="left")
    for column in ("GPU", "name", "total", "reserved", "seats", "used", "spare", "headroom"):
        table.add_column(column, justify="right" if column in ("total", "reserved", "used", "spare", "headroom") else "left")
    for gpu in plan.gpus:
        seats = "[dim]keep clear[/]" if gpu.keep_clear and not gpu.seats else ", ".join(gpu.seats) or "-"
        spare = gib(gpu.spare_bytes)
        if plan.worst_case_gpu == f"{gpu.host}:{gpu.index}":
            spare = f"[bold]{spare}[/]"
        table.add_row(f"{gpu.host}:{gpu.index}", gpu.name, gib(gpu.total_bytes), gib(gpu.reserved_bytes), seats, gib(gpu.used_bytes), spare, gib(gpu.headroom_bytes))
    return table


def footprint_table(plan: Plan) -> Table:
    used = [name for name in PART_COLUMNS if any(part.name == name for seat in plan.seats for part in seat.footprint_parts)]
    table = Table(title="Footprint per GPU of each seat (GiB; ~ marks an estimated part; basis: how the total is known)", title_justify="left")
    table.add_column("seat")
    for name in used:
        table.add_column(PART_TITLES[name], justify="right")
    table.add_column("total", justify="right")
    table.add_column("basis")
    for seat in plan.seats:
        by_name = {part.name: part for part in seat.footprint_parts}
        cells = [_part_cell(by_name.get(name)) for name in used]
        table.add_row(seat.name, *cells, f"[bold]{gib(seat.footprint_bytes)}[/]", seat.footprint_basis)
    return table


def _part_cell(part) -> str:
    if part is None:
        return "-"
    return gib(part.bytes) + ("~" if part.basis == "estimate" else "")


def seat_table(plan: Plan) -> Table:
    table = Table(title="Seats", title_justify="left")
    for column in ("boot", "seat", "GPUs", "KV bytes", "KV GiB", "max_model_len", "output cap", "KV tokens", "conc.", "util"):
        table.add_column(column, justify="left" if column in ("seat", "GPUs") else "right")
    for seat in sorted(plan.seats, key=lambda seat: seat.boot_order):
        if not isinstance(seat, PlannedVllmSeat):
            table.add_row(str(seat.boot_order), seat.name, ",".join(seat.gpus) or "-", *["-"] * 7)
            continue
        table.add_row(
            str(seat.boot_order),
            seat.name,
            ",".join(seat.gpus) or "-",
            f"{seat.kv_cache_memory_bytes:,}" if seat.kv_cache_memory_bytes is not None else "-",
            gib(seat.kv_cache_memory_bytes),
            f"{seat.max_model_len:,}" if seat.max_model_len else "-",
            f"{seat.max_new_tokens:,}" if seat.max_new_tokens else "-",
            f"{seat.kv_cache_tokens:,}" if seat.kv_cache_tokens is not None else "-",
            f"{seat.max_concurrency:.2f}x" if seat.max_concurrency is not None else "-",
            f"{seat.gpu_memory_utilization:.3f}" if seat.gpu_memory_utilization is not None else "-",
        )
    return table


def replay_table(plan: Plan) -> Table | None:
    """The usage stage's replay at each seat's planned KV (its ``kv_replay`` reading; ``plan --usage``)."""
    readings = [(seat.name, seat.kv_replay) for seat in plan.vllm_seats() if seat.kv_replay is not None]
    if not readings:
        return None
    table = Table(title="The window's requests replayed against each KV cache (blocks in flight; an upper bound: no prefix-cache credit)", title_justify="left")
    for column in ("seat", "KV GiB", "usable blocks", "peak blocks", "peak at", "min above", "waited", "smallest KV GiB (rounded)", "rule's KV GiB"):
        table.add_column(column, justify="left" if column in ("seat", "peak at") else "right")
    for name, reading in readings:
        bound = "" if reading.exact else "≤ "
        table.add_row(
            name, gib(reading.kv_cache_memory_bytes), f"{reading.usable_blocks:,}", f"{reading.peak_blocks:,}", reading.peak_at,
            f"{bound}{reading.minutes_above:,.2f}", f"{bound}{reading.waited_requests:,}",
            f"{gib(reading.smallest_kv_bytes)} ({gib(reading.smallest_kv_bytes_rounded)})", gib(reading.rule_kv_bytes),
        )
    return table


def command_line(seat: PlannedVllmSeat) -> str:
    """The seat's launch as `seatplan render` writes it with its default launcher, after its environment."""
    assert seat.launch is not None
    env = " ".join(f"{key}={shlex.quote(value)}" for key, value in sorted(seat.env.items()))
    return f"{env} {shlex.join(engine_command(seat.launch))}".strip()


def print_plan(console: Console, plan: Plan) -> None:
    console.print(Text(headline(plan), style="bold green" if plan.infeasible is None and plan.optimal else "bold yellow"))
    if plan.infeasible is not None:
        print_infeasible(console, plan)
        print_warnings(console, plan)  # what the input leaves open matters most when it does not fit
        return
    if plan.worst_case_spare_bytes is None:
        return
    console.print(fit_table(gpu_table(plan), console.width, GPU_DROP))
    console.print(fit_table(footprint_table(plan), console.width, FOOTPRINT_DROP, stack=True))
    console.print(fit_table(seat_table(plan), console.width, SEAT_DROP))
    replayed = replay_table(plan)
    if replayed is not None:
        console.print(fit_table(replayed, console.width))
    console.print(Text("Command lines (in boot order; start each when the one before it is ready)", style="bold"))
    for seat in sorted(plan.seats, key=lambda seat: seat.boot_order):
        if isinstance(seat, PlannedVllmSeat) and seat.launch is not None:
            console.print(Text(f"{seat.boot_order}. {seat.name}:", style="bold"), Text(command_line(seat)), soft_wrap=True)
        else:
            console.print(Text(f"{seat.boot_order}. {seat.name}:", style="bold"), Text(f"fixed seat, {gib(seat.footprint_bytes)} GiB on {', '.join(seat.gpus)}"))
    if len(plan.frontier) > 1:
        console.print(frontier_table(plan))
    if plan.chosen_because:
        console.print(Text(f"layout taken from the frontier: {plan.chosen_because}", style="bold"), soft_wrap=True)
    if plan.runner_ups:
        table = Table(title="Runner-up layouts", title_justify="left")
        for column in ("#", "worst spare GiB", "moves", "why it lost"):
            table.add_column(column)
        for rank, alternative in enumerate(plan.runner_ups, start=2):
            table.add_row(str(rank), gib(alternative.worst_case_spare_bytes), str(alternative.moves), runner_up_said(plan, alternative))
        console.print(fit_table(table, console.width))
    print_rollout(console, plan)
    print_warnings(console, plan)


def print_warnings(console: Console, plan: Plan) -> None:
    # when nothing is placed, "SEAT: not placed" of every seat says less than the table of the seats that do not fit
    shown = [warning for warning in plan.warnings if not (plan.infeasible is not None and warning.endswith(": not placed"))]
    for warning in shown:
        console.print(Text(f"warning: {warning}", style="yellow"), soft_wrap=True)


def runner_up_said(plan: Plan, alternative: RunnerUp) -> str:
    """What sets a runner-up apart from the chosen layout, said by the seats it places elsewhere, then why it lost.
    The placement search describes a runner-up by the seats it keeps apart, which the chosen layout may keep apart
    too ("with a, b and c not all on one GPU" of a plan that already has them on three GPUs: issue 32); where each
    seat goes is true of that layout alone."""
    chosen = {seat.name: seat.gpus for seat in plan.seats}
    moved = [f"{name} on {', '.join(gpus)}" for name, gpus in sorted(alternative.assignment.items()) if sorted(gpus) != sorted(chosen.get(name, []))]
    shown = moved[:RUNNER_UP_SEATS_SHOWN] + ([f"{len(moved) - RUNNER_UP_SEATS_SHOWN} more"] if len(moved) > RUNNER_UP_SEATS_SHOWN else [])
    reason = alternative.why_lost.split(": ", 1)[1] if alternative.why_lost.startswith("with ") and ": " in alternative.why_lost else alternative.why_lost
    return (f"{', '.join(shown)}: " if shown else "the same GPUs: ") + reason


def print_infeasible(console: Console, plan: Plan) -> None:
    assert plan.infeasible is not None
    if not plan.infeasible.seats:  # every seat fits somewhere; not as asked (--max-moves): the headline is its first sentence
        console.print(Text(plan.infeasible.summary.split(". ", 1)[-1]), soft_wrap=True)
        console.print(fit_table(footprint_table(plan), console.width, FOOTPRINT_DROP, stack=True))
        return
    console.print(Text(plan.infeasible.summary), soft_wrap=True)
    table = Table(title="Seats that do not fit", title_justify="left")
    for column in ("seat", "footprint GiB", "closest GPU", "short by GiB", "why"):
        table.add_column(column)
    for seat in plan.infeasible.seats:
        table.add_row(seat.name, gib(seat.footprint_bytes), seat.best_gpu or "-", gib(seat.short_by_bytes), seat.reason)
    console.print(fit_table(table, console.width))
    console.print(fit_table(footprint_table(plan), console.width, FOOTPRINT_DROP, stack=True))
    console.print(fit_table(lever_table(plan), console.width, stack=True))
    for seat in plan.infeasible.seats:
        if seat.rejections:
            console.print(Text(f"{seat.name}, GPU by GPU:", style="bold"))
            for verdict in seat.rejections:
                console.print(Text(f"  {verdict.gpu}: {verdict.reason}"), soft_wrap=True)


def lever_table(plan: Plan) -> Table:
    """What would make room: first the operator's values that take more than the rule (on any seat: they may be
    what crowds the seats that do not fit), then each short seat's own levers, only those that free something."""
    assert plan.infeasible is not None
    short_by = {seat.name: seat.short_by_bytes for seat in plan.infeasible.seats}
    table = Table(title="What would make room (per GPU; ~ an estimate; operator values first)", title_justify="left")
    for column in ("seat", "change in the fleet file", "frees GiB", "short by GiB"):
        table.add_column(column, justify="right" if "GiB" in column else "left")
    rows = sorted(((seat.name, lever) for seat in plan.seats for lever in seat.levers if lever.operator_value), key=lambda row: -row[1].freed_bytes)
    for short in plan.infeasible.seats:
        seat = plan.seat(short.name)
        rows += [(short.name, lever) for lever in (seat.levers if seat is not None else []) if not lever.operator_value]
    for name, lever in rows:
        table.add_row(name, lever.change, f"{lever.freed_bytes / GiB:.2f}" + ("" if lever.operator_value else "~"), gib(short_by.get(name)))
    return table


def explanation_renderable(seat: PlannedSeat, width: int = 80) -> Group:
    """Each rule as a short paragraph: result, why, and the numbers it used."""
    items: list = [Text(f"{seat.name}: why these numbers", style="bold")]
    for line in seat.explanation:
        items.append(Text.assemble((f"{line.rule}: ", "bold"), line.result))
        if line.note:
            items.append(Text(f"    why: {line.note}"))
        if line.inputs:
            items.append(Text("    inputs: " + ", ".join(f"{key}={_value(value)}" for key, value in line.inputs.items()), style="dim"))
    parts = Table(title="footprint parts (per GPU)", title_justify="left")
    for column in ("part", "bytes", "GiB", "basis", "note"):
        parts.add_column(column, overflow="fold")
    for part in seat.footprint_parts:
        parts.add_row(part.name, f"{part.bytes:,}", gib(part.bytes), part.basis, part.note)
    items.append(fit_table(parts, width, ("GiB", "basis")))
    if isinstance(seat, PlannedVllmSeat) and seat.launch is not None:
        items.append(Text("command line: " + command_line(seat)))
    items += [Text(f"warning: {warning}", style="yellow") for warning in seat.warnings]
    return Group(*items)


def _value(value: object) -> str:
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 10_000:
        return f"{value:,}"
    return str(value)


def print_fit(console: Console, report: FitReport) -> None:
    console.print(
        Text(
            f"{report.model}: on {human_bytes(report.gpu_memory_bytes)} per GPU (TP {report.tensor_parallel_size}), "
            f"the KV cache gets {human_bytes(report.kv_budget_bytes)}; the longest context is {report.largest_max_model_len:,} tokens "
            f"({report.largest_max_model_len_with_factor:,} with KV sized at {report.kv_factor:g}× one request); "
            f"at the published {report.published_context:,} tokens: {report.published_max_concurrency:.2f}× concurrency",
            style="bold",
        ),
        soft_wrap=True,
    )
    table = Table(title="footprint without KV (per GPU)", title_justify="left")
    for column in ("part", "GiB", "basis", "note"):
        table.add_column(column, overflow="fold")
    for part in report.footprint_parts:
        table.add_row(part.name, gib(part.bytes), part.basis, part.note)
    console.print(fit_table(table, console.width))
    for line in report.explanation:
        console.print(Text(f"{line.rule}: {line.result}  ({line.note})"), soft_wrap=True)
