"""The one change model: has a seat's engine changed, and does the change need a restart?

:func:`seat_change` compares what runs with what the plan wants, both as
:class:`~seatplan.documents.launch.SeatLaunch` (``documents.plan.seat_launch`` of a planned seat, or
``engine.launch.seat_launch_from_env`` of a rendered env file), on what vLLM would run: each launch is written as
``engine.command`` writes it and read back as vLLM's parser reads it (``engine.parse``), so a flag spelled another
way (``--x=v``, ``32K``, a unique prefix, a flag repeated in ``extra_args``) is the same flag, and the launcher
(``vllm serve`` or the module form) and ``--host`` (``render --bind``) are never compared: they say where and how the
engine runs, not what it runs. The environment is compared too: a value, a secret given by reference
(``env_from_host``) or a file the engine reads its environment from (``env_files``) that differs restarts it.

Not every change restarts: with the KV cache pinned, ``--gpu-memory-utilization`` is read only by vLLM's start-up
check (vLLM 0.32 ``vllm/v1/worker/gpu_worker.py`` lines 649-672 return the pin without the memory profile;
``vllm/v1/worker/utils.py`` lines 716-772 ``request_memory`` is the only reader), so a running engine keeps what it
has; a fixed seat's ``health_url`` is what the engines after it wait on, not how it runs. Such a change rewrites the
seat's files without a restart.

The planner's restarts, the rollout's steps, ``render diff`` and apply's change test all call it. Apply runs on the
host, where seatplan is not installed: :func:`restart_digest` carries the model there, one digest per launch of what
a restart depends on (equal for two launches exactly when ``seat_change`` between them needs no restart), written in
the seat's env file (``SEATPLAN_RESTART_DIGEST``) and so in its engine's environment; the step restarts an engine
whose environment carries another digest than the planned file's.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass

from seatplan.documents.launch import FixedLaunch, SeatLaunch, VllmLaunch
from seatplan.engine.command import engine_command
from seatplan.engine.launch import WHERE_FLAGS, long_name
from seatplan.engine.parse import VllmArgs, read_vllm_args

__all__ = ["Difference", "SeatChange", "restart_digest", "seat_change"]

SWITCH_ON = "on"  # how a switch (a flag without a value) reads in a difference
UTILISATION_FLAG = "--gpu-memory-utilization"
PIN_FLAG = "--kv-cache-memory-bytes"
NOT_KNOWN = "not known (not started by seatplan)"


@dataclass(frozen=True)
class Difference:
    """One thing that differs: a vLLM flag (``--max-model-len``), an environment variable, ``env_files``, or a fixed
    seat's ``image``/``command``/``port``/``health_url``; ``old`` None where what runs does not have it."""

    what: str
    old: str | None
    new: str | None
    restarts: bool


@dataclass(frozen=True)
class SeatChange:
    """How a seat's engine differs from what runs: nothing (``changed`` false), files to rewrite only, or a restart."""

    differences: tuple[Difference, ...] = ()

    @property
    def changed(self) -> bool:
        return bool(self.differences)

    @property
    def restart(self) -> bool:
        """The running engine must be restarted to run as planned."""
        return any(difference.restarts for difference in self.differences)


def seat_change(running: SeatLaunch | None, planned: SeatLaunch) -> SeatChange:
    """How ``planned`` differs from ``running`` on what the engine would run (see the module's docstring).

    ``running`` None, or without a launch, is a seat whose engine runs but not as seatplan started it: a vLLM seat
    then needs a restart (its command is not known to be the planned one); a fixed seat is left alone (seatplan starts
    a fixed seat only where it renders its image, and cannot tell how one it did not render runs)."""
    old = running.launch if running is not None else None
    new = planned.launch
    if old is None or new is None:
        if isinstance(new, FixedLaunch) or (new is None and old is None):
            return SeatChange()
        return SeatChange((Difference("command", NOT_KNOWN if old is None else old.engine, "seatplan's" if new is not None else NOT_KNOWN, True),))
    assert running is not None
    if old.engine != new.engine:
        return SeatChange((Difference("engine", old.engine, new.engine, True),))
    differences = (vllm_differences(old, new) if isinstance(old, VllmLaunch) and isinstance(new, VllmLaunch)
                   else fixed_differences(old, new) if isinstance(old, FixedLaunch) and isinstance(new, FixedLaunch) else [])
    return SeatChange(tuple(differences + environment_differences(running, planned)))


def vllm_meaning(launch: VllmLaunch) -> dict[str, str]:
    """The launch as vLLM reads its command: each option under its long name with the value that wins, counts read as
    vLLM reads them, JSON as its object; the model under ``--model``; where it listens left out."""
    read = read_vllm_args(engine_command(launch, ()))
    meaning = {"--model": read.model or ""}
    for flag, value in read.flags.items():
        name = long_name(flag)
        if name in WHERE_FLAGS or flag == "--model":
            continue
        meaning[name] = canonical(read, flag, value)
    return meaning


def canonical(read: VllmArgs, flag: str, value: str | list[str] | None) -> str:
    """One option's value as vLLM takes it: a switch ``on`` (``off`` for its ``--no-`` form), a count as a number, a
    JSON object with sorted keys, several values joined by a space."""
    if value is None:
        return "off" if flag.startswith("--no-") else SWITCH_ON
    if isinstance(value, list):
        return " ".join(value)
    try:
        number = read.whole(flag)
    except ValueError:
        number = None
    if number is not None:
        return str(number)
    try:
        loaded = json.loads(value)
    except ValueError:
        return value
    return json.dumps(loaded, sort_keys=True) if isinstance(loaded, dict) else value


def vllm_differences(old: VllmLaunch, new: VllmLaunch) -> list[Difference]:
    before, after = vllm_meaning(old), vllm_meaning(new)
    # with the KV cache pinned on both sides the utilisation gates vLLM's start-up check only
    check_only = PIN_FLAG in before and PIN_FLAG in after
    return [Difference(flag, before.get(flag), after.get(flag), restarts=not (flag == UTILISATION_FLAG and check_only))
            for flag in dict.fromkeys([*before, *after]) if before.get(flag) != after.get(flag)]


def fixed_differences(old: FixedLaunch, new: FixedLaunch) -> list[Difference]:
    said = {"image": (old.image, new.image), "command": (json.dumps(old.command), json.dumps(new.command)),
            "port": (str(old.port) if old.port is not None else None, str(new.port) if new.port is not None else None),
            "health_url": (old.health_url, new.health_url)}
    return [Difference(what, before, after, restarts=what != "health_url") for what, (before, after) in said.items() if before != after]


def environment(launch: SeatLaunch) -> dict[str, str]:
    """Each variable the engine is given: its value, or where a secret given by reference comes from (never a value)."""
    return launch.env | {name: f"from the host's {source}" for name, source in launch.env_from_host.items()}


def environment_differences(running: SeatLaunch, planned: SeatLaunch) -> list[Difference]:
    before, after = environment(running), environment(planned)
    found = [Difference(name, before.get(name), after.get(name), restarts=True)
             for name in sorted(set(before) | set(after)) if before.get(name) != after.get(name)]
    if running.env_files != planned.env_files:
        found.append(Difference("env_files", " ".join(running.env_files) or None, " ".join(planned.env_files) or None, restarts=True))
    return found


def restart_digest(launch: SeatLaunch) -> str | None:
    """What a restart of the seat's engine depends on, as one hex digest: two launches have the same one exactly when
    :func:`seat_change` between them needs no restart (``tests/engine/test_launch_change.py`` holds it on random
    pairs). None for a launch seatplan did not write (nothing is known of what it runs)."""
    engine = launch.launch
    if engine is None:
        return None
    if isinstance(engine, VllmLaunch):
        meaning = vllm_meaning(engine)
        if PIN_FLAG in meaning:
            meaning.pop(UTILISATION_FLAG, None)  # with the KV cache pinned, read by the start-up check only
        what: dict[str, object] = {"engine": "vllm", "flags": meaning}
    else:
        what = {"engine": engine.engine, "image": engine.image, "command": engine.command, "port": engine.port}  # not health_url
    what |= {"env": environment(launch), "env_files": list(launch.env_files)}
    return hashlib.sha256(json.dumps(what, sort_keys=True).encode("utf-8")).hexdigest()[:32]
