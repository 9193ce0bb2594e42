"""Fleet → plan on small fleets: placement glue, boot order, utilisation, command lines, round trip.

Llama-3.1-8B at 32,768 tokens: one request = 2,048 blocks × 2 MiB = 4 GiB, × 1.25 = 5 GiB of KV.
"""

from __future__ import annotations

import json
import math
import random

import pytest

from kits.documents import command_of, model_usage, runaway, usage_report
from kits.plan import LLAMA_8B, PHI_35, QWEN3_8B, GiB, MiB, one_host, random_fleet, write_fleet
from seatplan.documents.fleet_file import load_fleet
from seatplan.documents.launch import ByUtilisation, Pinned
from seatplan.documents.observed import ObservedFootprints
from seatplan.documents.plan import Plan, PlannedFixedSeat, PlannedVllmSeat
from seatplan.errors import SeatplanError
from seatplan.fileio import atomic_write_text
from seatplan.plan.planner import build_plan
from seatplan.render.engines import plan_engines
from seatplan.render.settings import RenderSettings

CONTEXT_BYTES = round(0.76 * GiB)  # the v0.19 profile's single-GPU CUDA context
MARGIN_BYTES = 512 * MiB  # policy.boot_margin_bytes default

SMALL = one_host(2) + f"""
seats:
  - {{name: speech, engine: fixed, memory_cap_bytes: 6GiB, pin: 0}}
  - name: llama-a
    model: {LLAMA_8B}
    port: 8001
    max_model_len: 32768
  - name: llama-b
    model: {LLAMA_8B}
    port: 8002
    max_model_len: 32768
    max_new_tokens: 4096
    extra_args: [--enable-prefix-caching]
current_layout:
  llama-b: 0
"""


@pytest.fixture(scope="module")
def small_plan(tmp_path_factory) -> Plan:
    directory = tmp_path_factory.mktemp("small")
    return build_plan(load_fleet(write_fleet(directory, SMALL)))


def test_one_engine_per_gpu_and_the_tie_goes_to_fewer_moves(small_plan):
    # Both llamas on GPU 1 would leave 80 − 2F; one each leaves min(80 − 6 − F, 80 − F): one each wins.
    # Which one joins the speech seat is a tie; llama-b runs on GPU 0 now, so it stays there.
    seats = {seat.name: seat for seat in small_plan.seats}
    assert seats["speech"].gpus == ["box:0"] and seats["llama-b"].gpus == ["box:0"] and seats["llama-a"].gpus == ["box:1"]
    assert small_plan.optimal and small_plan.method == "exhaustive" and small_plan.moves == 0
    footprint = seats["llama-a"].footprint_bytes
    assert small_plan.worst_case_spare_bytes == 80 * GiB - 6 * GiB - footprint
    assert small_plan.worst_case_gpu == "box:0"
    assert [gpu.spare_bytes for gpu in small_plan.gpus] == [74 * GiB - footprint, 80 * GiB - footprint]


def test_fixed_seat_boots_first_and_costs_its_cap(small_plan):
    speech = small_plan.seat("speech")
    assert speech.boot_order == 1 and speech.footprint_bytes == 6 * GiB and speech.footprint_basis == "declared"
    assert isinstance(speech, PlannedFixedSeat) and not hasattr(speech, "launch") and not hasattr(speech, "gpu_memory_utilization")
    assert [small_plan.seat(name).boot_order for name in ("llama-a", "llama-b")] == [2, 3]


def test_utilisation_covers_what_the_engine_allocates_and_not_its_neighbours(small_plan):
    # Issue 18: with the KV cache pinned, --gpu-memory-utilization is the smallest three-decimal value whose
    # ceil(80 GiB × util) covers what the engine allocates after vLLM's snapshot (every part but the CUDA
    # context, NCCL and creep) plus the 512 MiB margin. llama-a (alone on GPU 1) and llama-b (beside the 6 GiB
    # speech seat) are the same seat, so they get the same value, where the old rule gave 0.984 and 0.909.
    a, b = small_plan.seat("llama-a"), small_plan.seat("llama-b")
    allocated = sum(part.bytes for part in a.footprint_parts if part.name not in ("cuda_context", "nccl_allreduce", "creep_allowance"))
    expected = next(step / 1000 for step in range(1, 1001) if math.ceil(80 * GiB * step / 1000) >= allocated + MARGIN_BYTES)
    assert a.gpu_memory_utilization == b.gpu_memory_utilization == expected
    requested = math.ceil(80 * GiB * expected)
    assert requested - allocated <= GiB
    # the headroom each situation leaves: free at the snapshot (less the CUDA context) less the request
    assert a.utilisation is not None and b.utilisation is not None
    assert a.utilisation.cold_boot_headroom_bytes == a.utilisation.rolling_restart_headroom_bytes == 80 * GiB - CONTEXT_BYTES - requested
    assert b.utilisation.cold_boot_headroom_bytes == b.utilisation.rolling_restart_headroom_bytes == 74 * GiB - CONTEXT_BYTES - requested
    line = next(line for line in b.explanation if line.rule == "gpu_memory_utilization")
    assert line.inputs["free_at_cold_boot_bytes"] == line.inputs["free_at_rolling_restart_bytes"] == 74 * GiB
    # the highest values that pass are still shown, as before: (74 GiB − context) / 80 GiB
    assert b.utilisation.cold_boot == b.utilisation.rolling_restart == math.floor((74 * GiB - CONTEXT_BYTES) * 1000 / (80 * GiB)) / 1000


def test_utilisation_before_0_10_2_is_the_smallest_request_covering_what_the_engine_allocates(tmp_path):
    # before 0.10.2 the value is the engine's budget (its KV cache gets what the request leaves): it covers what the
    # engine allocates after the snapshot, without the boot margin, and is checked in both situations
    fleet = write_fleet(tmp_path, SMALL.replace("seats:", "policy: {vllm_version: '0.10'}\nseats:", 1))
    old = build_plan(load_fleet(fleet))
    for name, free in (("llama-a", 80 * GiB), ("llama-b", 74 * GiB)):
        seat = vllm_seat(old, name)
        context = next(part.bytes for part in seat.footprint_parts if part.name == "cuda_context")
        allocated = sum(part.bytes for part in seat.footprint_parts if part.name not in ("cuda_context", "creep_allowance"))
        expected = next(step / 1000 for step in range(1, 1001) if math.ceil(80 * GiB * step / 1000) >= allocated)
        assert seat.gpu_memory_utilization == expected and isinstance(seat.launch.kv, ByUtilisation)
        assert seat.utilisation.cold_boot_headroom_bytes == free - context - math.ceil(80 * GiB * expected)


def test_before_0_9_1_a_seat_sharing_its_gpu_is_warned_its_kv_is_what_the_others_leave(tmp_path):
    # 0.8 to 0.9.0.1 take every process's memory on the GPU off an engine's KV (VLLM.md §3): llama-b shares GPU 0
    # with the speech seat, llama-a has GPU 1 alone; from 0.9.1 the budget is the engine's own
    for version, warned in (("0.9", {"llama-b"}), ("0.8.5", {"llama-b"}), ("0.9.1", set()), ("0.10.1", set())):
        plan = build_plan(load_fleet(write_fleet(tmp_path, SMALL.replace("seats:", f"policy: {{vllm_version: '{version}'}}\nseats:", 1), f"{version}.yaml")))
        found = {warning.split(":")[0] for warning in plan.warnings if "off this engine's KV cache" in warning}
        assert found == warned, version
        assert all("GPU box:0" in warning for warning in plan.warnings if "off this engine's KV cache" in warning)


@pytest.mark.parametrize("seed", range(6))
def test_engines_sized_by_utilisation_hold_the_footprints_the_placement_counted(tmp_path, seed):
    """Random fleets on a release without --kv-cache-memory-bytes, every GPU booted in order and every engine
    restarted beside its neighbours, each engine holding what vLLM gives it: its context and its whole request
    (gpu_worker.py lines 740-744), its creep at plateau. An engine holds its footprint and the rounding to three
    decimals; the free memory each start sees is the plan's less the neighbours' rounding; a start the plan passes
    by more than that rounding passes. The rule before (the largest value that passes beside the neighbours'
    footprints) handed the first engine on a GPU its neighbours' room."""
    rng = random.Random(seed)
    text = random_fleet(rng, tmp_path, current=False).read_text().replace("policy:\n", f"policy:\n  vllm_version: '{rng.choice(['0.9.1', '0.10', '0.10.1'])}'\n")
    plan = build_plan(load_fleet(write_fleet(tmp_path, text, "old.yaml")))
    if plan.worst_case_spare_bytes is None:
        return  # nothing placed: nothing starts
    gpus = {f"{gpu.host}:{gpu.index}": gpu for gpu in plan.gpus}
    order = sorted((seat for seat in plan.seats if seat.gpus), key=lambda seat: seat.boot_order)

    def held(seat, gpu) -> tuple[int, int]:  # (what it holds at plateau, its rounding beyond the footprint)
        if not isinstance(seat, PlannedVllmSeat):
            return seat.footprint_bytes, 0
        outside = sum(part.bytes for part in seat.footprint_parts if part.name in ("cuda_context", "nccl_allreduce", "creep_allowance"))
        requested = math.ceil(gpu.total_bytes * seat.gpu_memory_utilization)
        return outside + requested, outside + requested - seat.footprint_bytes

    checked = 0
    for seat in order:
        if not isinstance(seat, PlannedVllmSeat):
            continue
        own = sum(part.bytes for part in seat.footprint_parts if part.name in ("cuda_context", "nccl_allreduce"))
        for label in seat.gpus:
            gpu = gpus[label]
            assert 0 <= held(seat, gpu)[1] <= math.ceil(gpu.total_bytes / 1000)
            for situation, others in (("cold_boot", [other for other in order if other.boot_order < seat.boot_order]),
                                      ("rolling_restart", [other for other in order if other.name != seat.name])):
                here = [held(other, gpu) for other in others if label in other.gpus]
                seen = gpu.total_bytes - gpu.reserved_bytes - sum(hold for hold, _ in here) - own
                headroom = seen - math.ceil(gpu.total_bytes * seat.gpu_memory_utilization)
                planned = getattr(seat.utilisation, f"{situation}_headroom_bytes")
                if len(seat.gpus) == 1:  # a tensor-parallel seat's headroom is its tightest GPU's
                    assert headroom == planned - sum(rounding for _, rounding in here), (seat.name, situation)
                if planned >= sum(rounding for _, rounding in here):
                    assert headroom >= 0, (seat.name, situation)
                    checked += 1
    assert checked or not plan.vllm_seats()


def test_command_line_carries_every_pinned_number(small_plan):
    seat = small_plan.seat("llama-b")
    assert command_of(seat) == [
        "vllm", "serve", str(LLAMA_8B),
        "--served-model-name", "llama-b",
        "--port", "8002",
        "--tensor-parallel-size", "1",
        "--max-model-len", "32768",
        "--kv-cache-memory-bytes", str(5 * GiB),
        "--gpu-memory-utilization", f"{seat.gpu_memory_utilization:.3f}",  # worked in the utilisation test above
        "--max-num-seqs", "1024",
        "--max-num-batched-tokens", "8192",
        "--override-generation-config", '{"max_new_tokens": 4096}',
        "--enable-prefix-caching",
    ]
    assert seat.env == {"CUDA_VISIBLE_DEVICES": "0"}
    assert "--override-generation-config" not in command_of(small_plan.seat("llama-a"))


def test_plan_round_trips_through_its_saved_json(small_plan, tmp_path):
    target = tmp_path / "plan.json"
    atomic_write_text(target, small_plan.model_dump_json(indent=2))
    again = Plan.model_validate_json(target.read_text())
    assert again == small_plan
    assert json.loads(target.read_text())["seats"][1]["kv_cache_memory_bytes"] == 5 * GiB


def test_observed_footprint_replaces_the_estimate(tmp_path):
    observed = ObservedFootprints.model_validate(
        {"generated_at": "2026-11-30T10:00:00Z", "seats": {"llama-a": {"footprint_bytes": 20 * GiB, "source": "nvidia-smi", "samples": 96}}}
    )
    plan = build_plan(load_fleet(write_fleet(tmp_path, SMALL)), observed=observed, observed_path="observed.json")
    seat = plan.seat("llama-a")
    # it ran with this plan's 5 GiB pin: 15 GiB non-KV observed + 5 GiB KV
    assert seat.footprint_bytes == 20 * GiB and seat.footprint_basis == "observed"
    assert [part.name for part in seat.footprint_parts] == ["observed_non_kv", "kv_cache"]
    assert any("observed plateau replaces the estimate" in line.note for line in seat.explanation)
    assert plan.seat("llama-b").footprint_basis == "estimate"
    assert plan.inputs.observed_path == "observed.json"


def test_usage_proposes_caps_and_flags_runaways(tmp_path):
    usage = usage_report(
        {
            "llama-a": model_usage(
                calls=1200,
                completion_tokens_p99=900,
                peak_inflight_tokens=400_000,
                peak_inflight_tokens_without_runaways=30_000,
                runaways=[runaway("nightly", 9, 31_000, team="ops")],
            )
        },
        rejected_rows=3,
    )
    plan = build_plan(load_fleet(write_fleet(tmp_path, SMALL)), usage=usage)
    seat = plan.seat("llama-a")
    assert seat.max_new_tokens == 1536  # 900 × 1.25 = 1,125 → 1,536
    assert '{"max_new_tokens": 1536}' in command_of(seat)
    assert any("9 runaway replies from nightly" in warning for warning in plan.warnings)
    # 5 GiB holds 40,960 tokens: enough without runaways, not for the 400,000 peak
    assert any("only with runaway replies" in warning for warning in seat.warnings)


def test_a_seat_is_sized_from_the_traffic_of_the_name_it_serves_now(tmp_path):
    """Two seats swapped their served names since `usage --fleet` ran: each takes the traffic of the name it serves
    (the gateway routes by it), not the entry the usage stage mapped to its name. The report chose the other one
    (documents.usage.usage_of_seat is now the one rule: tests/documents/test_usage_of_seat.py)."""
    fleet = SMALL.replace("    port: 8001\n", "    port: 8001\n    served_model_name: chat-x\n").replace(
        "    port: 8002\n", "    port: 8002\n    served_model_name: chat-y\n").replace("    max_new_tokens: 4096\n", "")
    usage = usage_report({"chat-x": model_usage(seat="llama-b", calls=10, completion_tokens_p99=900),
                          "chat-y": model_usage(seat="llama-a", calls=10, completion_tokens_p99=3000)})
    plan = build_plan(load_fleet(write_fleet(tmp_path, fleet)), usage=usage)
    assert plan.seat("llama-a").max_new_tokens == 1536  # chat-x: 900 × 1.25 = 1,125 → 1,536
    assert plan.seat("llama-b").max_new_tokens == 4096  # chat-y: 3,000 × 1.25 = 3,750 → 4,096
    assert not any("was not used" in warning for warning in plan.warnings)


def test_tensor_parallel_seat_takes_two_gpus_of_one_host(tmp_path):
    fleet = one_host(4) + f"""
seats:
  - name: big
    model: {LLAMA_8B}
    port: 8000
    tensor_parallel_size: 2
    max_model_len: 8192
    avoid: [0]
"""
    plan = build_plan(load_fleet(write_fleet(tmp_path, fleet)))
    seat = plan.seat("big")
    assert len(seat.gpus) == 2 and "box:0" not in seat.gpus
    assert seat.env["CUDA_VISIBLE_DEVICES"] == ",".join(label.split(":")[1] for label in seat.gpus)
    assert command_of(seat)[command_of(seat).index("--tensor-parallel-size") + 1] == "2"
    assert any(part.name == "nccl_allreduce" for part in seat.footprint_parts)


def test_infeasible_fleet_names_the_seat_and_the_shortfall(tmp_path):
    fleet = one_host(1, "24GiB") + f"""
seats:
  - {{name: long, model: {LLAMA_8B}, port: 8000, max_model_len: 131072}}
"""
    plan = build_plan(load_fleet(write_fleet(tmp_path, fleet)))
    assert plan.infeasible is not None and plan.worst_case_spare_bytes is None
    short = plan.infeasible.seats[0]
    assert short.name == "long"
    # 16 GiB × 1.25 = 20 GiB of KV alone, plus ~15 GiB of weights, against 24 GiB
    assert short.short_by_bytes == plan.seat("long").footprint_bytes - 24 * GiB
    assert command_of(plan.seat("long")) == []


def test_published_raises_only_where_the_fleet_still_fits(tmp_path):
    # Phi-3.5-mini: vLLM's default 4,096 tokens, published 131,072. Raised, one seat needs ~60.5 GiB of KV
    # (~70 GiB in all); at 4,096 its KV is 1,616,904,192 × 1.25 → 2 GiB (~12 GiB in all). On one 96 GiB GPU
    # two raised seats cannot fit, one raised beside one at the default can: the cheaper-first restore
    # (equal costs: the later seat first) raises phi-b and leaves phi-a at 4,096.
    fleet = one_host(1, "96GiB") + f"""
seats:
  - {{name: phi-a, model: {PHI_35}, port: 8001, max_model_len: published}}
  - {{name: phi-b, model: {PHI_35}, port: 8002, max_model_len: published}}
"""
    plan = build_plan(load_fleet(write_fleet(tmp_path, fleet)))
    assert plan.infeasible is None
    assert plan.seat("phi-b").max_model_len == 131072 and plan.seat("phi-a").max_model_len == 4096
    assert plan.seat("phi-a").kv_cache_memory_bytes == 2 * GiB
    assert plan.seat("phi-a").explanation[0].rule == "published_not_fitting"
    assert any("published context 131,072 does not fit" in warning for warning in plan.warnings)


def test_sizing_errors_name_the_seat_line(tmp_path):
    seats = f"seats:\n  - name: a\n    model: {LLAMA_8B}\n    port: 8001\n  - name: b\n    model: {LLAMA_8B}\n    port: 8002\n    kv_cache_memory_bytes: 1GiB\n"
    path = write_fleet(tmp_path, one_host() + seats)
    with pytest.raises(SeatplanError) as caught:
        build_plan(load_fleet(path))
    assert caught.value.where == f"{path}:10"
    assert caught.value.message.startswith("seats[1] (b): pinned KV 1.00 GiB")


def test_two_hosts_pins_by_host_and_index(tmp_path):
    fleet = f"""
hosts:
  - name: alpha
    gpus: [{{index: 0, total_bytes: 80GiB}}, {{index: 1, total_bytes: 80GiB}}]
  - name: beta
    gpus: [{{index: 0, total_bytes: 80GiB}}, {{index: 1, total_bytes: 80GiB, reserved_bytes: 10GiB}}]
seats:
  - {{name: pinned, model: {LLAMA_8B}, port: 8001, max_model_len: 8192, pin: "beta:1"}}
  - {{name: pair, model: {LLAMA_8B}, port: 8002, max_model_len: 8192, tensor_parallel_size: 2, avoid: ["beta:1"]}}
"""
    plan = build_plan(load_fleet(write_fleet(tmp_path, fleet)))
    assert plan.seat("pinned").gpus == ["beta:1"] and plan.seat("pinned").env["CUDA_VISIBLE_DEVICES"] == "1"
    pair = plan.seat("pair").gpus
    assert len({label.split(":")[0] for label in pair}) == 1 and "beta:1" not in pair
    # beta:1 holds the pinned seat beside 10 GiB reserved: it is the worst GPU
    beta1 = next(gpu for gpu in plan.gpus if (gpu.host, gpu.index) == ("beta", 1))
    assert beta1.spare_bytes == 70 * GiB - plan.seat("pinned").footprint_bytes == plan.worst_case_spare_bytes


def test_observations_for_unknown_seats_are_reported(tmp_path):
    observed = ObservedFootprints.model_validate({"generated_at": "2026-11-30T10:00:00Z", "seats": {"gone": {"footprint_bytes": GiB, "source": "nvidia-smi", "samples": 3}}})
    plan = build_plan(load_fleet(write_fleet(tmp_path, SMALL)), observed=observed)
    assert "observations for gone, which the fleet does not declare, were not used" in plan.warnings


def test_fp8_kv_and_yarn_reach_the_command_line(tmp_path):
    fleet = one_host(1, "96GiB") + f"""
seats:
  - {{name: short, model: {LLAMA_8B}, port: 8001, max_model_len: 32768, kv_cache_dtype: fp8}}
  - {{name: long, model: {QWEN3_8B}, port: 8002, max_model_len: published, allow_yarn: true}}
"""
    plan = build_plan(load_fleet(write_fleet(tmp_path, fleet)))
    short = plan.seat("short")
    # fp8 stores one byte per element: 64 KiB per token, 2 GiB per 32,768-token request, × 1.25 = 2.5 GiB
    assert short.kv_cache_memory_bytes == 5 * 512 * MiB
    assert command_of(short)[command_of(short).index("--kv-cache-dtype") + 1] == "fp8"
    long = plan.seat("long")
    assert long.max_model_len == 131072
    overrides = json.loads(command_of(long)[command_of(long).index("--hf-overrides") + 1])
    assert overrides == {"rope_parameters": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768}}
    assert long.env["VLLM_ALLOW_LONG_MAX_MODEL_LEN"] == "1"
    # 131,072 × 147,456 B = 18 GiB per request, × 1.25 = 22.5 GiB
    assert long.kv_cache_memory_bytes == 45 * 512 * MiB


def test_the_launch_says_how_the_kv_cache_is_sized_and_render_writes_that(tmp_path):
    """A planned seat's launch pins its KV cache (the rule's bytes or the operator's) from vLLM 0.10.2, else sizes it by
    utilisation; the command render writes follows it, with the one utilisation the rollout checks, whatever the
    situation (issue 51: a vLLM 0.10.1 seat rendered --kv-cache-memory-bytes, which that release does not have)."""
    pinned = SMALL.replace("    max_new_tokens: 4096\n", "    max_new_tokens: 4096\n    kv_cache_memory_bytes: 6GiB\n")
    plan = build_plan(load_fleet(write_fleet(tmp_path, pinned)))
    assert isinstance(plan.seat("speech"), PlannedFixedSeat)
    a, b = vllm_seat(plan, "llama-a"), vllm_seat(plan, "llama-b")
    assert a.launch is not None and b.launch is not None
    assert a.launch.kv == Pinned(kv_cache_memory_bytes=a.kv_cache_memory_bytes, gpu_memory_utilization=a.launch.gpu_memory_utilization)
    assert b.launch.kv == Pinned(kv_cache_memory_bytes=6 * GiB, gpu_memory_utilization=b.launch.gpu_memory_utilization)
    old = build_plan(load_fleet(write_fleet(tmp_path, pinned.replace("seats:\n", "policy: {vllm_version: '0.10.1'}\nseats:\n"))))
    for seat in old.vllm_seats():
        assert seat.launch is not None and seat.launch.kv == ByUtilisation(gpu_memory_utilization=seat.launch.gpu_memory_utilization)
        assert "--kv-cache-memory-bytes" not in command_of(seat) and not any("--kv-cache-memory-bytes" in warning for warning in old.warnings)
    for made in (plan, old):
        engines = plan_engines(made, RenderSettings())
        for engine in engines:
            for args in (engine.restart_args, engine.boot_args):
                assert args[args.index("--gpu-memory-utilization") + 1] == f"{engine.seat.gpu_memory_utilization:.3f}"
                assert ("--kv-cache-memory-bytes" in args) == engine.launch.kv_pinned


def vllm_seat(plan: Plan, name: str) -> PlannedVllmSeat:
    seat = plan.seat(name)
    assert isinstance(seat, PlannedVllmSeat), name
    return seat


def test_the_rollout_checks_the_utilisation_render_writes(tmp_path, rng):
    """Each start of the rollout is checked with the --gpu-memory-utilization render writes for that seat (read back
    from the rendered restart command), and asks ceil(total × it), with the KV pinned or sized by utilisation."""
    checked = 0
    for trial in range(16):
        version = rng.choice(["0.9.1", "0.10.1", "0.10.2", "0.32"])
        directory = tmp_path / str(trial)
        directory.mkdir()
        text = random_fleet(rng, directory).read_text().replace("policy:\n", f"policy:\n  vllm_version: '{version}'\n  image: vllm/vllm-openai:v{version}\n")
        plan = build_plan(load_fleet(write_fleet(directory, text, "fleet-v.yaml")))
        if plan.worst_case_spare_bytes is None or plan.rollout is None:
            continue
        written = {}
        for engine in plan_engines(plan, RenderSettings(bind_host="127.0.0.2")):
            for args in (engine.restart_args, engine.boot_args):
                assert ("--kv-cache-memory-bytes" in args) == engine.launch.kv_pinned == (version in ("0.10.2", "0.32"))
            written[engine.name] = float(engine.restart_args[engine.restart_args.index("--gpu-memory-utilization") + 1])
            assert written[engine.name] == float(engine.boot_args[engine.boot_args.index("--gpu-memory-utilization") + 1])
        for step in plan.rollout.steps:
            for check in step.checks if step.action != "stop" else []:
                if step.seat in written:
                    assert check.gpu_memory_utilization == written[step.seat], step
                    assert check.requested_bytes == math.ceil(check.total_bytes * written[step.seat])
                    checked += 1
                else:
                    assert check.gpu_memory_utilization is None and isinstance(plan.seat(step.seat), PlannedFixedSeat)
    assert checked
