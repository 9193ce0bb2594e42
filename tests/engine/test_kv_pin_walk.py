"""The walk of a seat's KV pin from the fleet file to its env file (issue 51): the plan builds one launch holding it,
render reads that launch as it is (never the fleet, the sizing or the facts again), and no room (module) is entered
twice but the engine codec's, once per command it writes or checks.

The walk is recorded with ``sys.setprofile``: every call into a seatplan module whose arguments carry the pin (the
number, a ``Pinned``/``VllmLaunch`` holding it, or text and argument lists spelling it) while that module is not
already on the stack is one entry into that room (a call and its return are one visit)."""

from __future__ import annotations

import sys
from collections import Counter

from kits.plan import LLAMA_8B, write_fleet
from seatplan.documents.fleet_file import load_fleet
from seatplan.documents.launch import Pinned, VllmLaunch
from seatplan.documents.plan import Plan, PlannedVllmSeat
from seatplan.engine.command import COMMAND_KEY
from seatplan.engine.parse import parse_env, split_shell_line
from seatplan.plan.planner import build_plan
from seatplan.render.bundle import render_files
from seatplan.render.settings import RenderSettings

HELPERS = ("seatplan.units",)  # arithmetic and formatting every room calls, no room of the walk


class Walk:
    def __init__(self, pin: int) -> None:
        self.pin, self.stack, self.entries, self.launches = pin, [], [], set()

    def carries(self, value: object) -> bool:
        if type(value) is int:
            return value == self.pin
        if isinstance(value, VllmLaunch):
            self.launches.add(id(value))
            return isinstance(value.kv, Pinned) and value.kv.kv_cache_memory_bytes == self.pin
        if isinstance(value, Pinned):
            return value.kv_cache_memory_bytes == self.pin
        if isinstance(value, str):
            return len(value) < 1_000_000 and str(self.pin) in value
        if isinstance(value, (list, tuple)) and len(value) < 1000:
            return any(isinstance(item, str) and str(self.pin) in item for item in value)
        return False

    def __call__(self, frame, event, arg) -> None:
        module = frame.f_globals.get("__name__", "")
        if not module.startswith("seatplan.") or module.startswith(HELPERS):
            return
        if event == "call":
            code = frame.f_code
            names = code.co_varnames[:code.co_argcount + code.co_kwonlyargcount]
            if module not in self.stack and any(self.carries(frame.f_locals.get(name)) for name in names):
                self.entries.append(module)
            self.stack.append(module)
        elif event == "return" and self.stack:
            self.stack.pop()

    def run(self, work):
        sys.setprofile(self)
        try:
            return work()
        finally:
            sys.setprofile(None)


def test_the_kv_pin_goes_from_the_fleet_file_through_one_launch_to_the_env_file(tmp_path, rng):
    pin = rng.randrange(4 << 20, 20 << 20) * 1024 + 1024  # 4-20 GiB, on no round figure any other number of the plan has
    fleet = write_fleet(tmp_path, f"""
        hosts:
          - name: box
            gpus:
              - {{index: 0, total_bytes: 80GiB}}
        seats:
          - {{name: q8, model: {LLAMA_8B}, port: 8001, max_model_len: 8192, kv_cache_memory_bytes: {pin}}}
        """)
    planning = Walk(pin)
    plan = planning.run(lambda: build_plan(load_fleet(fleet)))
    seat = plan.seat("q8")
    assert isinstance(seat, PlannedVllmSeat) and seat.launch is not None and seat.launch.kv.kv_cache_memory_bytes == pin
    saved = tmp_path / "plan.json"
    saved.write_text(plan.model_dump_json())
    rendering = Walk(pin)
    files = rendering.run(lambda: render_files(Plan.model_validate_json(saved.read_text()), RenderSettings(bind_host="127.0.0.2"), ["env"]))
    command = split_shell_line(parse_env(files["env/q8.env"])[COMMAND_KEY])
    assert command[command.index("--kv-cache-memory-bytes") + 1] == str(pin) and files["env/q8.env"].count(str(pin)) == 1

    # the plan: read from the fleet file, sized, and written into one launch, whose command the plan checks once
    assert planning.entries[:2] == ["seatplan.documents.yaml_lines", "seatplan.documents.fleet"], planning.entries
    assert len(planning.launches) == 1
    # render: the one launch read back, never the fleet, the sizing or the facts
    assert len(rendering.launches) == 1
    assert not [room for room in rendering.entries if room.startswith(("seatplan.documents.fleet", "seatplan.plan.", "seatplan.facts."))]
    # no room entered twice, but the codec's: each command written (plan's check; render's restart and cold boot,
    # and its one line), the flags checked (plan warns, render refuses), the launch's one utilisation read per command
    # written, the line's characters checked and its env-file quoting; and the env file's restart digest (the change
    # model's reading of the launch: one command written and read back as vLLM reads it)
    twice = {room: count for room, count in Counter(planning.entries + rendering.entries).items() if count > 1}
    assert twice == {"seatplan.engine.command": 7, "seatplan.engine.parse": 3, "seatplan.documents.launch": 4, "seatplan.encode": 2}, (
        planning.entries, rendering.entries)
    assert planning.entries[2:] == ["seatplan.facts.models", "seatplan.facts.kv_cache", "seatplan.plan.footprint", "seatplan.engine.command",
                                    "seatplan.documents.launch", "seatplan.engine.command", "seatplan.engine.parse"]
