"""Env files that start an engine: seatplan's own (``SEATPLAN_COMMAND``, ``SEATPLAN_SEAT``, the comment line render
writes) or hand-written ones (any variable whose value runs ``vllm serve …``), in the syntax ``dotenv`` reads.

An env file a systemd unit reads (``EnvironmentFile=``) is read through that unit (``systemd``), since the unit's
``ExecStart=`` may build the command from several of its variables (``vllm serve $MODEL $VLLM_ARGS``).
"""

from __future__ import annotations

import re
from pathlib import Path

from seatplan.adopt.evidence import Launch
from seatplan.adopt.readers.commands import engine_launcher, engine_words, referenced, shell_expanded, split_command
from seatplan.adopt.readers.dotenv import EnvText, read_env_text
from seatplan.adopt.readers.text import GPU_KEYS, env_file_refusal, gpu_list, read_text
from seatplan.adopt.readers.vllm_config import spliced
from seatplan.adopt.secrets import secret_references
from seatplan.engine.command import COMMAND_KEY, RESTART_DIGEST_KEY
from seatplan.engine.parse import split_shell_line
from seatplan.errors import SeatplanError

MAX_ENV_FILES = 1000
# Keys of seatplan's own env files that are not the engine's environment (render/targets.py env_file).
SEATPLAN_KEYS = {"SEATPLAN_SEAT", "SEATPLAN_HEALTH_URL", COMMAND_KEY, RESTART_DIGEST_KEY}
# The line render writes under its header: "# seat NAME (served as S) on HOST GPU 0, 1; boot order ..." (targets.env_file)
RENDERED_SEAT_LINE = re.compile(r"^# seat (?P<seat>\S+) \(served as \S+\) on (?P<host>\S+) (?P<kind>GPU|CPU budget) (?P<gpus>[\d, ]+);", re.M)
NOT_STARTED = "an env file alone does not say what starts it: give --systemd DIR with its unit"


def read_env_values(path: Path) -> tuple[str, EnvText]:
    text = read_text(path, "env file", "give a directory of readable .env files")
    return text, read_env_text(text, str(path))


def read_env_file(path: Path) -> Launch | None:
    """One env file that holds a whole vLLM command (seatplan's own, or a variable of a hand-written one); None if none."""
    text, env = read_env_values(path)
    values = env.values
    command_key = COMMAND_KEY if COMMAND_KEY in values else next((key for key, value in values.items() if _starts_vllm(value, values)), None)
    if command_key is None:
        return None
    if command_key == COMMAND_KEY:  # seatplan's own line, in the quoting engine.command writes (a `\$` is a literal $)
        words = split_shell_line(values[command_key])
    else:  # `$MODEL $VLLM_ARGS` inside a hand-written line: filled in from the same file, as a shell that sources it would
        words = split_command(shell_expanded(values[command_key], values), str(path))
    args = engine_words(words, values)
    launch = Launch(source=str(path), seat=values.get("SEATPLAN_SEAT") or path.stem, args=args if args is not None else words,
                    env={key: value for key, value in values.items() if key not in SEATPLAN_KEYS and key != command_key and key not in GPU_KEYS
                         and (command_key == COMMAND_KEY or key not in referenced(values[command_key]))},
                    health_url=values.get("SEATPLAN_HEALTH_URL"), warnings=list(env.problems), started_note=NOT_STARTED)
    launch.args, launch.config_note = spliced(launch.args, path.parent, str(path))
    if command_key != COMMAND_KEY:
        launch.secret_refs = secret_references(" ".join(values.values()))
    launch.launcher, launch.launcher_note = engine_launcher(words, values), f"{path}:{env.lines[command_key]}: {command_key}"
    for key in GPU_KEYS:
        if key in values:
            launch.gpus, launch.gpus_source = gpu_list(values[key]), f"{path}: {key}"
            launch.device = "cuda"
            break
    rendered = RENDERED_SEAT_LINE.search(text)
    if rendered and rendered["seat"] == launch.seat:
        launch.host, launch.host_note = rendered["host"], f"{path}: the comment seatplan render wrote"
        launch.device = "cpu" if rendered["kind"] == "CPU budget" else "cuda"
        launch.started_note = f"{path}: seatplan's own env file (seatplan starts it)"
        if launch.gpus is None:
            launch.gpus, launch.gpus_source = gpu_list(rendered["gpus"]), f"{path}: the comment seatplan render wrote"
    return launch


def _starts_vllm(value: str, values: dict[str, str]) -> bool:
    """A hand-written file's own variable holding the server line (``VLLM_CMD="vllm serve ..."``)."""
    try:
        return engine_words(split_command(value, ""), values) is not None
    except SeatplanError:  # an unclosed quote: not a command line
        return False


def env_file_paths(directory: Path, refused: list[str] | None = None) -> list[Path]:
    """The directory's ``*.env`` files adopt reads; one that is no regular file (a FIFO, a device, a folder) or
    leads into /proc, /sys or /dev is left out with a warning in ``refused``."""
    if not directory.is_dir():
        raise SeatplanError("not a directory", where=str(directory), fix="give the directory holding the engines' .env files")
    named = sorted(path for path in directory.iterdir() if path.suffix == ".env")
    if len(named) > MAX_ENV_FILES:
        raise SeatplanError(f"more than {MAX_ENV_FILES} .env files", where=str(directory), fix="give the directory of the engines' env files")
    paths = []
    for path in named:
        why = env_file_refusal(path)
        if why:
            if refused is not None:
                refused.append(f"{path} {why}: skipped, not read")
        elif path.is_file():
            paths.append(path)
    return paths


def read_env_dir(directory: Path, read_by_units: set[Path], units_found: bool) -> tuple[list[Launch], list[str]]:
    """The directory's env files that start an engine, but those a unit reads (read through the unit instead); and a
    warning for each other env file (it may hold half a command a unit not given builds)."""
    warnings: list[str] = []
    paths = [path for path in env_file_paths(directory, warnings) if path.resolve() not in read_by_units]
    launches: list[Launch] = []
    for path in paths:
        launch = read_env_file(path)
        if launch is not None:
            launches.append(launch)
        else:
            warnings.append(f"{path}: holds no whole vLLM command and no unit given reads it: not adopted "
                            "(if a systemd unit builds the command from its variables, give it with --systemd DIR)")
    if not launches and not units_found:
        raise SeatplanError("no .env file here starts a vLLM engine", where=str(directory),
                            fix="give the directory whose .env files hold the `vllm serve ...` line (SEATPLAN_COMMAND or your own variable), "
                            "or the systemd units that read them (--systemd DIR)")
    return launches, warnings
