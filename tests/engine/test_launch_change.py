"""The typed launch through the engine codec, and the one change model (issue 51).

``engine.command`` writes a launch for any launcher and bind address; ``engine.launch`` reads the line back (as an env
file carries it) into the same launch, field for field. ``engine.change.seat_change`` compares two on what vLLM would
run: never the launcher or ``--host``, every spelling vLLM reads alike the same, every field that differs named, and a
restart only where the running engine would run otherwise (not a pinned seat's utilisation, read at start only)."""

from __future__ import annotations

import random

import pytest

from kits.launches import random_launch, random_seat_launch
from seatplan.documents.launch import ByUtilisation, FixedLaunch, Pinned, SeatLaunch, VllmLaunch
from seatplan.encode import env_assignment
from seatplan.engine.change import restart_digest, seat_change
from seatplan.engine.command import COMMAND_KEY, DEFAULT_LAUNCHER, FROM_HOST_KEY, HEALTH_URL_KEY, MODULE_LAUNCHER, engine_command, shell_line
from seatplan.engine.launch import launch_from_command, seat_launch_from_env
from seatplan.engine.parse import parse_env, split_shell_line
from seatplan.errors import SeatplanError

LAUNCHERS = (DEFAULT_LAUNCHER, MODULE_LAUNCHER, ("/opt/venv/bin/python", "-m", "vllm.entrypoints.openai.api_server"), ("/usr/bin/vllm", "serve"))
BINDS = (None, "127.0.0.1", "127.0.0.2", "::1", "fd00::5", "gpu-box.lan")


def written(launch: VllmLaunch, rng: random.Random) -> list[str]:
    """The launch as render writes it for a random launcher and bind address, read back as sh reads its env file."""
    return split_shell_line(shell_line(engine_command(launch, rng.choice(LAUNCHERS), bind_host=rng.choice(BINDS))))


def test_a_written_launch_reads_back_as_itself(rng: random.Random):
    for _ in range(300):
        launch = random_launch(rng)
        assert launch_from_command(written(launch, rng)) == launch


def test_what_runs_compared_with_the_plan_is_unchanged_whatever_the_launcher_or_bind(rng: random.Random):
    for _ in range(200):
        planned = random_seat_launch(rng)
        assert planned.launch is not None and isinstance(planned.launch, VllmLaunch)
        lines = {COMMAND_KEY: shell_line(engine_command(planned.launch, rng.choice(LAUNCHERS), bind_host=rng.choice(BINDS))),
                 HEALTH_URL_KEY: f"http://{rng.choice(['127.0.0.2', 'box'])}:{planned.launch.port}/health", "SEATPLAN_SEAT": "s"}
        if planned.env_from_host:
            lines[FROM_HOST_KEY] = " ".join(f"{name}={source}" for name, source in planned.env_from_host.items())
        if planned.env_files:
            lines["SEATPLAN_ENV_FILES"] = " ".join(planned.env_files)
        running = seat_launch_from_env(planned.env | lines)
        assert running == planned
        change = seat_change(running, planned)
        assert not change.changed and not change.restart


# one field changed at a time, the flag that shows it, and whether a running engine must restart for it
def mutations(launch: VllmLaunch) -> list[tuple[dict, str, bool]]:
    util = launch.gpu_memory_utilization
    other_util = round(util - 0.001, 3) if util > 0.5 else round(util + 0.001, 3)
    kv_changes: list[tuple[dict, str, bool]] = [({"kv": launch.kv.model_copy(update={"gpu_memory_utilization": other_util})}, "--gpu-memory-utilization",
                                                 not launch.kv_pinned)]
    if isinstance(launch.kv, Pinned):
        kv_changes += [({"kv": Pinned(kv_cache_memory_bytes=launch.kv.kv_cache_memory_bytes + 1, gpu_memory_utilization=util)}, "--kv-cache-memory-bytes", True),
                       ({"kv": ByUtilisation(gpu_memory_utilization=util)}, "--kv-cache-memory-bytes", True)]
    else:
        kv_changes.append(({"kv": Pinned(kv_cache_memory_bytes=2**30, gpu_memory_utilization=util)}, "--kv-cache-memory-bytes", True))
    return kv_changes + [
        ({"model": launch.model + "x"}, "--model", True),
        ({"revision": (launch.revision or "") + "r"}, "--revision", True),
        ({"served_model_name": launch.served_model_name + "2"}, "--served-model-name", True),
        ({"port": (launch.port or 8000) % 65535 + 1}, "--port", True),
        ({"tensor_parallel_size": launch.tensor_parallel_size * 2}, "--tensor-parallel-size", True),
        ({"max_model_len": launch.max_model_len + 1}, "--max-model-len", True),
        ({"max_num_seqs": launch.max_num_seqs + 1}, "--max-num-seqs", True),
        ({"max_num_batched_tokens": launch.max_num_batched_tokens + 1}, "--max-num-batched-tokens", True),
        ({"dtype": "float32" if launch.dtype != "float32" else "auto"}, "--dtype", True),
        ({"kv_cache_dtype": "fp8_e4m3" if launch.kv_cache_dtype != "fp8_e4m3" else "auto"}, "--kv-cache-dtype", True),
        ({"enforce_eager": not launch.enforce_eager}, "--enforce-eager", True),
        ({"max_new_tokens": (launch.max_new_tokens or 0) + 1}, "--override-generation-config", True),
        ({"hf_overrides": {"changed": True}}, "--hf-overrides", True),
        ({"extra_args": [*launch.extra_args, "--max-num-partial-prefills", "2"]}, "--max-num-partial-prefills", True),
    ]


def test_every_field_that_differs_is_named_and_restarts_unless_vllm_reads_it_at_start_only(rng: random.Random):
    for _ in range(60):
        running = random_seat_launch(rng)
        launch = running.launch
        assert isinstance(launch, VllmLaunch)
        for update, flag, restarts in mutations(launch):
            planned = running.model_copy(update={"launch": launch.model_copy(update=update)})
            change = seat_change(running, planned)
            assert change.changed and [difference.what for difference in change.differences] == [flag], (update, change)
            assert change.restart == restarts, (update, change)


@pytest.mark.parametrize(("old_extra", "new_extra"), [
    (["--seed=7"], ["--seed", "7"]),
    (["--block-size", "32"], ["--block-size=32"]),
    (["--enable-prefix-caching", "--no-enable-prefix-caching"], ["--no-enable-prefix-caching"]),
    (["--max-num-partial-prefills", "2", "--max-num-partial-prefills", "3"], ["--max-num-partial-prefills", "3"]),
    (["--enable-prefix-cach"], ["--enable-prefix-caching"]),
    (["--host", "0.0.0.0"], []),
])
def test_spellings_vllm_reads_alike_are_no_change(rng: random.Random, old_extra: list[str], new_extra: list[str]):
    launch = random_launch(rng).model_copy(update={"extra_args": []})
    old = SeatLaunch(launch=launch.model_copy(update={"extra_args": old_extra}))
    assert not seat_change(old, SeatLaunch(launch=launch.model_copy(update={"extra_args": new_extra}))).changed


def test_a_launch_flag_repeated_in_extra_args_is_the_value_vllm_takes(rng: random.Random):
    launch = random_launch(rng).model_copy(update={"dtype": "auto", "max_model_len": 4096, "extra_args": []})
    repeated = launch.model_copy(update={"extra_args": ["--dtype", "bfloat16", "--max-model-len", "4K"]})
    assert not seat_change(SeatLaunch(launch=repeated), SeatLaunch(launch=launch.model_copy(update={"dtype": "bfloat16", "max_model_len": 4096}))).changed
    assert launch_from_command(engine_command(repeated)).dtype == "bfloat16"


def another_device_list(running: SeatLaunch) -> str:
    """A CUDA_VISIBLE_DEVICES that is not the running one (a random seat may already be on GPU 7 alone)."""
    return "7" if running.env.get("CUDA_VISIBLE_DEVICES") != "7" else "6"


def test_the_environment_restarts_the_engine_and_shows_no_secret_value(rng: random.Random):
    running = random_seat_launch(rng)
    cases = [
        (running.model_copy(update={"env": running.env | {"CUDA_VISIBLE_DEVICES": another_device_list(running)}}), "CUDA_VISIBLE_DEVICES"),
        (running.model_copy(update={"env_from_host": running.env_from_host | {"VLLM_API_KEY": "NEW_KEY"}}), "VLLM_API_KEY"),
        (running.model_copy(update={"env_files": [*running.env_files, "/root/more.env"]}), "env_files"),
    ]
    for planned, what in cases:
        change = seat_change(running, planned)
        assert change.restart and [difference.what for difference in change.differences] == [what]
    by_reference = seat_change(running, cases[1][0]).differences[0]
    assert by_reference.new == "from the host's NEW_KEY"


def test_fixed_seats_compare_their_image_and_command_and_never_restart_for_their_health_url():
    fixed = SeatLaunch(launch=FixedLaunch(image="tts:1", command=["serve", "--port", "9000"], port=9000, health_url="http://box:9000/h"))
    assert not seat_change(fixed, fixed).changed
    assert not seat_change(None, fixed).changed  # a fixed seat seatplan did not start is left alone
    health = fixed.model_copy(update={"launch": fixed.launch.model_copy(update={"health_url": "http://box:9000/ready"})})  # type: ignore[union-attr]
    assert seat_change(fixed, health).changed and not seat_change(fixed, health).restart
    for update in ({"image": "tts:2"}, {"command": ["serve", "--port 9000"]}, {"port": 9001}):
        other = fixed.model_copy(update={"launch": fixed.launch.model_copy(update=update)})  # type: ignore[union-attr]
        assert seat_change(fixed, other).restart, update


def test_a_vllm_seat_whose_launch_is_not_known_restarts(rng: random.Random):
    planned = random_seat_launch(rng)
    for running in (None, SeatLaunch(launch=None, env=planned.env)):
        change = seat_change(running, planned)
        assert change.restart and change.differences[0].what == "command"
    other_kind = SeatLaunch(launch=FixedLaunch(image="x"))
    assert seat_change(other_kind, planned).differences[0].what == "engine"


@pytest.mark.parametrize(("words", "said"), [
    (["vllm", "serve", "m", "--max-num-seqs", "1", "--max-num-batched-tokens", "8", "--gpu-memory-utilization", "0.5"], "--max-model-len"),
    (["vllm", "serve", "m", "--max-model-len", "auto", "--max-num-seqs", "1", "--max-num-batched-tokens", "8", "--gpu-memory-utilization", "0.5"],
     "--max-model-len"),
    (["vllm", "serve", "m", "--max-model-len", "8", "--max-num-seqs", "1", "--max-num-batched-tokens", "8"], "--gpu-memory-utilization"),
    (["vllm", "serve", "m", "--max-model-len", "8", "--max-num-seqs", "1", "--max-num-batched-tokens", "8", "--gpu-memory-utilization", "1.5"],
     "--gpu-memory-utilization"),
    (["vllm", "serve", "m", "--max-model-len", "8", "--max-num-seqs", "x", "--max-num-batched-tokens", "8", "--gpu-memory-utilization", "0.5"],
     "--max-num-seqs"),
    (["vllm", "serve", "--max-model-len", "8"], "no model"),
    (["vllm", "serve", "m", "--max-model-len"], "expects a value"),
])
def test_a_command_seatplan_did_not_write_is_an_error_naming_the_flag(words: list[str], said: str):
    with pytest.raises(SeatplanError) as refused:
        launch_from_command(words)
    assert said in refused.value.message and "render the directory again" in (refused.value.fix or "")


def test_an_env_file_with_garbage_is_a_located_error_not_a_traceback(rng: random.Random):
    for text in ("", "\x00\xff garbage", "SEATPLAN_COMMAND='vllm serve \"m'", "SEATPLAN_COMMAND=" + rng.choice(["$(touch X)", "--port 1"])):
        values = parse_env(text)
        try:
            seat_launch_from_env(values)
        except SeatplanError as refused:
            assert refused.message and refused.fix


def test_the_restart_digest_differs_exactly_when_the_change_model_restarts(rng: random.Random):
    """engine.change.restart_digest carries the model to the host (apply's step compares the running engine's digest
    with the planned file's): equal digests for every change that needs no restart, different ones for every other,
    on each single mutation, random pairs of launches, environments and files, and spellings vLLM reads alike."""
    for _ in range(60):
        running = random_seat_launch(rng)
        launch = running.launch
        assert isinstance(launch, VllmLaunch)
        for update, _, restarts in mutations(launch):
            planned = running.model_copy(update={"launch": launch.model_copy(update=update)})
            assert (restart_digest(running) != restart_digest(planned)) == restarts == seat_change(running, planned).restart, update
        other = random_seat_launch(rng)
        seeded = launch.model_copy(update={"extra_args": [*launch.extra_args, "--seed=7"]})
        mixed = [other, running.model_copy(update={"env": other.env}), running.model_copy(update={"env_from_host": other.env_from_host}),
                 running.model_copy(update={"env_files": other.env_files}), running.model_copy(update={"launch": seeded})]
        for planned in mixed:
            assert (restart_digest(running) != restart_digest(planned)) == seat_change(running, planned).restart
        # as an env file carries it (any launcher, any --host): the same digest read back
        line = shell_line(engine_command(launch, rng.choice(LAUNCHERS), bind_host=rng.choice(BINDS)))
        back = seat_launch_from_env(parse_env(env_text(running, line)))
        assert restart_digest(back) == restart_digest(running)
    fixed = SeatLaunch(launch=FixedLaunch(image="nemo:1", command=["serve"], port=9000, health_url="http://h:9000/health"))
    moved = fixed.model_copy(update={"launch": fixed.launch.model_copy(update={"health_url": "http://h:9000/ready"})})  # type: ignore[union-attr]
    assert restart_digest(fixed) == restart_digest(moved) and restart_digest(SeatLaunch(launch=None)) is None


def env_text(launch: SeatLaunch, command_line: str) -> str:
    """An env file as render writes one for ``launch`` (its environment, references and files, then the command)."""
    lines = [env_assignment(key, value) for key, value in sorted(launch.env.items())]
    if launch.env_from_host:
        lines.append(env_assignment(FROM_HOST_KEY, " ".join(f"{key}={source}" for key, source in sorted(launch.env_from_host.items()))))
    if launch.env_files:
        lines.append(env_assignment("SEATPLAN_ENV_FILES", " ".join(launch.env_files)))
    return "\n".join([*lines, env_assignment(COMMAND_KEY, command_line)]) + "\n"
