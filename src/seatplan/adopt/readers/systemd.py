"""systemd units that start engines: ``ExecStart=`` with its variables filled in from ``Environment=`` and
``EnvironmentFile=``, as systemd does (systemd.service(5) "Command lines", systemd.exec(5) "Environment").

Rules followed: a line ending in ``\\`` goes on on the next, and a comment line (``#`` or ``;`` first) is ignored,
inside such a continuation too (:func:`logical_lines`); ``ExecStart=`` empty
resets the list and its first word may carry the prefixes ``@ - : + !`` (``:`` turns variable expansion off);
``$VAR`` as a word of its own becomes the value split at whitespace (several words), ``${VAR}`` anywhere in a word
the value as one word, ``$$`` a ``$``; ``EnvironmentFile=`` values override ``Environment=`` ones, a later file a
former, and a ``-`` before its path means a missing file is skipped; specifiers ``%i`` ``%I`` (the instance of a
template unit ``vllm@.service``), ``%n`` ``%N`` ``%p`` and ``%%``. A template's instances are the units named
``NAME@INSTANCE.service`` in the directory (a ``*.wants/`` link, as ``systemctl enable`` makes); without any, where
its ``EnvironmentFile=`` names ``%i``, the env files that pattern matches. Wrappers (``sh -c``, ``exec``) are taken off by
``commands``. A unit's path on the GPU host is where ``EnvironmentFile=`` says; adopt reads the file there if it
exists, else the file of that name beside the unit or in an ``--env-dir`` (copies taken from the host).
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path

from seatplan.adopt.evidence import Launch
from seatplan.adopt.readers.commands import docker_run, engine_launcher, engine_words, referenced, sourced_files
from seatplan.adopt.readers.compose_ports import published_port, read_ports
from seatplan.adopt.readers.dotenv import read_env_text
from seatplan.adopt.readers.text import GPU_KEYS, env_file_refusal, gpu_list, read_text
from seatplan.adopt.readers.vllm_config import spliced
from seatplan.adopt.secrets import secret_references
from seatplan.errors import SeatplanError

MAX_UNITS = 1000
_BRACED = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
_WORD_VARIABLE = re.compile(r"^\$([A-Za-z_][A-Za-z0-9_]*)$")


@dataclass
class Unit:
    path: Path
    service: dict[str, list[tuple[str, str]]] = field(default_factory=dict)  # [Service] key → (FILE:LINE, value) in order


def parse_unit(path: Path, instance_name: str = "") -> Unit:
    """The unit file, then its drop-ins (``NAME.service.d/*.conf``; for a template's instance also the instance's own
    folder), in systemd's order: a later ``Environment=`` wins, an empty ``ExecStart=`` resets the list."""
    unit = Unit(path)
    folders = [path.parent / f"{path.name}.d"] + ([path.parent / f"{instance_name}.d"] if instance_name and instance_name != path.name else [])
    drop_ins = sorted((conf for folder in folders if folder.is_dir() for conf in folder.glob("*.conf") if conf.is_file()), key=lambda conf: conf.name)
    for file in [path, *drop_ins[:MAX_UNITS]]:
        _read_unit_file(unit, file)
    return unit


def _continues(line: str) -> bool:
    """A line ending in an unescaped backslash goes on on the next (``a\\\\`` ends in a literal one): systemd's
    conf-parser reads the backslashes in pairs."""
    return (len(line) - len(line.rstrip("\\"))) % 2 == 1


def logical_lines(text: str) -> list[tuple[int, str]]:
    """A unit file's lines as systemd reads them (systemd.syntax(7), systemd 252 conf-parser): a line whose first
    non-blank character is ``#`` or ``;`` is a comment and ignored, inside a continuation too (the line before
    goes on with whatever follows the comment block), and its own trailing backslash continues nothing; a line
    ending in a backslash is joined to the next with the backslash turned into a space; an empty line ends a
    continuation. Each line with the number of the line it starts on."""
    out: list[tuple[int, str]] = []
    pending: tuple[int, str] | None = None
    for number, raw in enumerate(text.split("\n"), start=1):
        line = raw.removesuffix("\r")
        if line.lstrip().startswith(("#", ";")):
            continue
        if pending is not None:
            number, line = pending[0], pending[1] + line
            pending = None
        if _continues(line):
            pending = (number, line[:-1] + " ")
            continue
        out.append((number, line))
    if pending is not None:
        out.append(pending)
    return out


def _read_unit_file(unit: Unit, path: Path) -> None:
    section = ""
    for number, line in logical_lines(read_text(path, "systemd unit", "give the directory of the engines' .service files")):
        stripped = line.strip()
        if not stripped:
            continue
        if stripped.startswith("[") and stripped.endswith("]"):
            section = stripped[1:-1]
            continue
        key, equals, value = stripped.partition("=")
        if equals and section == "Service":
            unit.service.setdefault(key.strip(), []).append((f"{path}:{number}", value.strip()))


def specifiers(text: str, unit_name: str, instance: str) -> str:
    prefix = unit_name.split("@", 1)[0].removesuffix(".service")
    table = {"i": instance, "I": instance.replace("-", "/"), "n": unit_name, "N": unit_name.removesuffix(".service"), "p": prefix, "%": "%"}
    return re.sub(r"%([iInNp%])", lambda match: table[match[1]], text)


def _exec_words(text: str, env: dict[str, str], where: str) -> list[str]:
    """One ``ExecStart=`` value as systemd splits and fills it in."""
    expand = True
    while text[:1] in ("@", "-", ":", "+", "!"):
        expand = expand and text[0] != ":"
        text = text[1:]
    try:
        words = shlex.split(text)
    except ValueError as problem:
        raise SeatplanError(f"ExecStart= cannot be read as words ({problem})", where=where, fix="close the quote in ExecStart=") from None
    if not expand:
        return words
    out: list[str] = []
    for word in words:
        alone = _WORD_VARIABLE.match(word)
        if alone:
            out += env.get(alone[1], "").split()
        else:
            out.append(_BRACED.sub(lambda match: env.get(match[1], ""), word.replace("$$", "\0")).replace("\0", "$"))
    return out


def _env_file_here(named: Path, look_in: list[Path]) -> tuple[Path | None, str]:
    """An env file a unit names, where the unit names it, else the file of that name beside the unit or in an --env-dir;
    or the first candidate refused and why (under /proc, /sys or /dev, or not a regular file: never read)."""
    for candidate in [named, *(directory / named.name for directory in look_in)]:
        refused = env_file_refusal(candidate) or ""
        if refused:
            return candidate, refused
        if candidate.is_file():
            return candidate, ""
    return None, ""


def _read_env_into(found: Path, env: dict[str, str], notes: dict[str, str], files: list[Path], warnings: list[str]) -> None:
    """An env file's KEY=value lines over ``env`` (each noted by file and line), the file added to those read."""
    files.append(found.resolve())
    read = read_env_text(read_text(found, "env file", "give readable env files"), str(found))
    warnings += read.problems
    for key, item in read.values.items():
        env[key], notes[key] = item, f"{found}:{read.lines[key]}"


def _environment(unit: Unit, unit_name: str, instance: str, look_in: list[Path], warnings: list[str]) -> tuple[dict[str, str], dict[str, str], list[Path]]:
    """The unit's environment (Environment=, then EnvironmentFile= overriding), where each key came from, and the files read."""
    env: dict[str, str] = {}
    notes: dict[str, str] = {}
    for number, value in unit.service.get("Environment", []):
        try:
            assignments = shlex.split(specifiers(value, unit_name, instance))
        except ValueError:
            warnings.append(f"{number}: Environment= cannot be read as words: left out")
            continue
        for assignment in assignments:
            key, equals, item = assignment.partition("=")
            if equals:
                env[key], notes[key] = item, number
    files: list[Path] = []
    for number, value in unit.service.get("EnvironmentFile", []):
        optional = value.startswith("-")
        named = specifiers(value.removeprefix("-").strip(), unit_name, instance)
        found = _readable_env_file(named, look_in, f"{number}: EnvironmentFile=", warnings, optional=optional)
        if found is not None:
            _read_env_into(found, env, notes, files, warnings)
    return env, notes, files


def _readable_env_file(named: str, look_in: list[Path], said: str, warnings: list[str], *, optional: bool,
                       missing: str = " is not here nor beside the unit or in an --env-dir") -> Path | None:
    """The env file a unit reads (``EnvironmentFile=``, or one its script sources) where it may be read; else None,
    with a warning (``said`` leads it) for a file refused, or not found unless ``optional``."""
    found, refused = _env_file_here(Path(named), look_in)
    if refused:
        warnings.append(f"{said}{named[:120]}: {found} {refused}: refused, not read "
                        "(its variables are not known; copy the GPU host's env file beside the unit)")
        return None
    if found is None and not optional:
        warnings.append(f"{said}{named}{missing}: its variables are not known (copy it from the GPU host beside the unit)")
    return found


def unit_launches(unit: Unit, unit_name: str, instance: str, look_in: list[Path]) -> tuple[Launch | None, list[Path]]:
    """The engine one unit (or one instance of a template) starts, and the env files it reads."""
    warnings: list[str] = []
    env, notes, files = _environment(unit, unit_name, instance, look_in, warnings)
    starts = [(number, value) for number, value in unit.service.get("ExecStart", [])]
    for position, (_, value) in enumerate(starts):
        if not value:  # an empty ExecStart= resets the list (drop-ins)
            starts = starts[position + 1 :]
    where = starts[0][0] if starts else str(unit.path)
    for number, value in starts:
        where = number
        words = _exec_words(specifiers(value, unit_name, instance), env, where)
        for named in sourced_files(words, env):  # `bash -c 'source FILE && exec vllm serve $MODEL …'` (issue 50)
            found = _readable_env_file(named, look_in, f"{where}: the script sources ", warnings, optional=False,
                                       missing=", which is not here nor beside the unit or in an --env-dir")
            if found is not None:
                _read_env_into(found, env, notes, files, warnings)
        args = engine_words(words, env)
        run = docker_run(words) if args is None else None
        if run is not None:  # `docker run … vllm/vllm-openai ARGS`: the unit runs vLLM's image
            args = run.args
            env = {**env, **run.env}
            notes |= {key: where for key in run.env}
            warnings += [f"{where}: docker run --env-file {named[:80]}: not read (its variables are the container's; give them with -e, "
                         "or copy the file and adopt its variables by hand)" for named in run.env_files]
        if args is None:
            continue
        used = referenced(value)  # variables the command line was built from are not the engine's environment
        launch = Launch(source=where, seat=instance or unit_name.removesuffix(".service"), args=args,
                        env={key: item for key, item in env.items() if key not in used and key not in GPU_KEYS},
                        env_notes={key: notes[key] for key in env}, warnings=warnings,
                        started_by={"systemd_unit": unit_name}, started_note=f"{where}: the unit that runs it")
        launch.args, launch.config_note = spliced(launch.args, unit.path.parent, where)
        launch.secret_refs = secret_references(value)
        if run is None:
            launch.launcher, launch.launcher_note = engine_launcher(words, env), f"{where}: ExecStart"
        else:
            launch.engine_image, launch.engine_image_note = run.image, f"{where}: docker run"
        if run is not None:
            launch.published_port, launch.port_unknown = published_port(read_ports(run.ports, where), launch.args, where)
            if run.gpus is not None:
                launch.gpus, launch.gpus_source, launch.device = gpu_list(",".join(run.gpus)), f"{where}: docker run --gpus", "cuda"
        for key in GPU_KEYS:
            if key in env:
                launch.gpus, launch.gpus_source, launch.device = gpu_list(env[key]), f"{notes[key]}: {key}", "cuda"
                break
        return launch, files
    return None, files


def _instances(template: str, unit: Unit, directory: Path, look_in: list[Path]) -> list[str]:
    """``vllm@.service``'s instances: units named ``vllm@X.service`` here (enable links); without any, the env files its ``%i`` names."""
    prefix = template.removesuffix(".service")
    # the directory and its *.wants/ folders, one level down (no walk into a tree that links back to itself)
    links = [*directory.glob(f"{prefix}?*.service"), *directory.glob(f"*/{prefix}?*.service")]
    found = [path.name[len(prefix) : -len(".service")] for path in links]
    if found:  # the enabled instances (systemctl enable's links): what runs
        return sorted(dict.fromkeys(found))
    for _, value in unit.service.get("EnvironmentFile", []):
        named = Path(value.removeprefix("-").strip())
        if "%i" in named.name:
            pattern = named.name.replace("%i", "*")
            for folder in look_in:
                for path in sorted(folder.glob(pattern)):
                    head, _, tail = named.name.partition("%i")
                    found.append(path.name[len(head) : len(path.name) - len(tail)])
    return sorted(dict.fromkeys(name for name in found if name))


def read_units(directory: Path, env_dirs: list[Path]) -> tuple[list[Launch], set[Path], list[str]]:
    """Every ``*.service`` of ``directory`` that starts a vLLM engine; the env files they read; warnings."""
    if not directory.is_dir():
        raise SeatplanError("not a directory", where=str(directory), fix="give the directory holding the engines' .service units")
    paths = sorted(path for path in directory.iterdir() if path.suffix == ".service" and path.is_file() and not path.is_symlink())
    if len(paths) > MAX_UNITS:
        raise SeatplanError(f"more than {MAX_UNITS} units", where=str(directory), fix="give the directory of the engines' units")
    look_in = [directory, *env_dirs]
    launches: list[Launch] = []
    read: set[Path] = set()
    warnings: list[str] = []
    for path in paths:
        unit = parse_unit(path)
        if "@" in path.name and not path.name.endswith("@.service"):
            template = path.name.split("@", 1)[0] + "@.service"
            if (directory / template).is_file():
                continue  # an instance of a template here: read through the template
            pairs = [(path.name, path.name.split("@", 1)[1].removesuffix(".service"))]
        elif path.name.endswith("@.service"):
            pairs = [(f"{path.name.removesuffix('.service')}{instance}.service", instance) for instance in _instances(path.name, unit, directory, look_in)]
            if not pairs and unit.service.get("ExecStart"):
                warnings.append(f"{path}: a template unit, and no instance of it is here (no {path.name.replace('@.', '@NAME.')} link, "
                                "no env file its %i names): not adopted")
        else:
            pairs = [(path.name, "")]
        for unit_name, instance in pairs:
            # an instance's own drop-ins go on top of the template's
            merged = parse_unit(path, unit_name) if instance and (directory / f"{unit_name}.d").is_dir() else unit
            launch, files = unit_launches(merged, unit_name, instance, look_in)
            if launch is not None:
                read |= set(files)  # read through the unit; an env file of a unit adopt cannot read is read on its own
                launches.append(launch)
            elif files and unit.service.get("ExecStart"):
                warnings.append(f"{path}: {unit_name}: ExecStart= starts no vLLM engine adopt can read (not vllm serve or "
                                "python -m vllm.entrypoints.openai.api_server, after sh -c and exec): not adopted")
    return launches, read, warnings
