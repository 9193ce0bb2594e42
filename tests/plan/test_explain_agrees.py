"""Every figure an explanation line states is one the plan document carries (issue 32, point 3): drawn over random
fleets of the fixture models (contexts, pins, factors, fp8 KV, TP, caps, YaRN, current layouts), each line of each
seat is read back: its GiB, MiB, byte and token figures, its ratios, and the lines that speak of the same thing
(context and its raise, the pin and the rule, YaRN and the command line) against each other."""

from __future__ import annotations

import math
import random
import re
from pathlib import Path

from kits.cli import run_cli
from kits.plan import random_fleet
from seatplan.documents.plan import Plan, PlannedSeat, PlannedVllmSeat
from seatplan.units import GiB, MiB

GIB_FIGURE = re.compile(r"(?<![\d.])(\d[\d,]*\.\d{2}) GiB")
MIB_FIGURE = re.compile(r"(?<![\d.])(\d[\d,]*\.\d) MiB")
BYTE_FIGURE = re.compile(r"(?<![\d.,])(\d[\d,]*) B\b")
GROUPED = re.compile(r"(?<![\d.,])(\d{1,3}(?:,\d{3})+)(?![\d.,]*\d)")
REQUEST_RATIO = re.compile(r"(\d+\.\d{2})× one request")


def numbers(value: object) -> list[float]:
    """Every number in a document part, nested."""
    if isinstance(value, bool):
        return []
    if isinstance(value, (int, float)):
        return [float(value)]
    if isinstance(value, dict):
        return [number for item in value.values() for number in numbers(item)]
    if isinstance(value, (list, tuple)):
        return [number for item in value for number in numbers(item)]
    return []


def known_figures(plan: Plan, seat: PlannedSeat) -> list[float]:
    """What a line of this seat may state: the seat's fields and footprint parts, the inputs of its lines, the GPUs'."""
    document = seat.model_dump(exclude={"explanation"})
    figures = numbers(document) + numbers([line.inputs for line in seat.explanation]) + numbers([gpu.model_dump() for gpu in plan.gpus])
    kv = next((line.inputs for line in seat.explanation if line.rule == "kv_bytes"), None)
    if kv is not None:  # the rule's unrounded product, which the kv_bytes line shows before rounding
        figures.append(float(math.ceil(int(kv["request_kv_bytes"]) * float(kv["factor"]))))
    return figures


def stated_agrees(stated: float, figures: list[float], unit: float, decimals: int) -> bool:
    half = 0.5 * 10 ** -decimals + 1e-9
    return any(abs(figure / unit - stated) <= half for figure in figures)


def check_line_figures(plan: Plan, seat: PlannedSeat) -> None:
    figures = known_figures(plan, seat)
    for line in seat.explanation:
        text = f"{line.result} | {line.note}"
        for found in GIB_FIGURE.findall(text):
            assert stated_agrees(float(found.replace(",", "")), figures, GiB, 2), f"{seat.name} {line.rule}: {found} GiB is no figure of the plan: {text}"
        for found in MIB_FIGURE.findall(text):
            assert stated_agrees(float(found.replace(",", "")), figures, MiB, 1), f"{seat.name} {line.rule}: {found} MiB: {text}"
        for found in BYTE_FIGURE.findall(text) + GROUPED.findall(text):
            assert float(found.replace(",", "")) in figures, f"{seat.name} {line.rule}: {found} is no figure of the plan: {text}"


def check_lines_agree(seat: PlannedSeat) -> None:
    """Lines that speak of the same thing say the same thing, and say what the seat's fields hold."""
    lines = {line.rule: line for line in seat.explanation}
    context = lines.get("context")
    if context is not None:
        assert context.result.startswith(f"max_model_len {seat.max_model_len:,}"), (seat.name, context.result)
        raised = lines.get("published_raise")
        if raised is not None and "above the published native" in context.note:
            assert "the published length is vLLM's default" not in raised.note, (context.note, raised.note)
    kv = lines.get("kv_bytes")
    if kv is not None:
        request = int(kv.inputs["request_kv_bytes"])
        assert kv.result.startswith(f"{seat.kv_cache_memory_bytes:,} B"), kv.result
        ratios = [float(ratio) for ratio in REQUEST_RATIO.findall(kv.note)]
        if "pinned_bytes" in kv.inputs:
            assert ratios == [round(int(kv.inputs["pinned_bytes"]) / request, 2), round(int(kv.inputs["rule_bytes"]) / request, 2)], kv.note
    capacity = lines.get("kv_capacity")
    if capacity is not None:
        assert capacity.result == (f"{seat.num_gpu_blocks:,} blocks, {seat.kv_cache_tokens:,} tokens, {seat.max_concurrency:.2f}× concurrency "
                                   f"at {seat.max_model_len:,}"), capacity.result
    footprint = lines.get("footprint")
    if footprint is not None and seat.engine == "vllm":
        assert footprint.result.startswith(f"{seat.footprint_bytes / GiB:.2f} GiB per GPU"), footprint.result
    placement = lines.get("placement")
    if placement is not None:
        assert placement.inputs["gpus"] == ",".join(seat.gpus) and placement.inputs["boot_order"] == seat.boot_order
    utilisation = lines.get("gpu_memory_utilization")
    if utilisation is not None:
        assert float(utilisation.result.split()[0]) == seat.gpu_memory_utilization, utilisation.result
    cap = lines.get("output_cap")
    if cap is not None and seat.max_new_tokens is not None:
        assert f"cap {seat.max_new_tokens:,} tokens" in cap.result
    yarn = lines.get("yarn")
    overrides = (seat.launch.hf_overrides if isinstance(seat, PlannedVllmSeat) and seat.launch else None) or {}
    scaling = overrides.get("rope_parameters") or overrides.get("rope_scaling")
    if yarn is not None and scaling:
        assert yarn.inputs["factor"] == scaling["factor"] and f"YaRN ×{scaling['factor']:g} reaches" in yarn.note, (yarn.note, scaling)
        assert int(scaling["original_max_position_embeddings"] * scaling["factor"]) >= seat.max_model_len


def test_every_explanation_line_agrees_with_the_plan_on_random_fleets(tmp_path: Path, capsys, monkeypatch, rng: random.Random):
    checked = 0
    for draw in range(10):
        directory = tmp_path / f"draw{draw}"
        directory.mkdir()
        fleet = random_fleet(rng, directory)
        done = run_cli(capsys, monkeypatch, "plan", str(fleet), "--json", "--time-limit", "5", "-o", str(directory / "plan.json"))
        assert done.exit_code in (0, 3), done.stderr
        plan = Plan.model_validate_json(done.stdout)
        for seat in plan.seats:
            check_line_figures(plan, seat)
            check_lines_agree(seat)
            checked += len(seat.explanation)
        if done.exit_code == 0:  # explain prints these very lines
            seat = rng.choice(plan.seats)
            shown = run_cli(capsys, monkeypatch, "explain", str(directory / "plan.json"), seat.name, "--wide")
            assert shown.exit_code == 0
            for line in seat.explanation:
                assert f"{line.rule}: {line.result}" in shown.stdout
    assert checked > 0
