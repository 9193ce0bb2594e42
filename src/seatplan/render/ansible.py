"""Pure builder of DIR/ansible/: an inventory, the variables, the rollout playbook and its rollback.

The playbook is a list of plays: one to prepare every host (directories, the engine launcher, the systemd unit),
then one play per step of the plan's rollout (``Plan.rollout``: stop before start, across hosts; a plan without
one restarts each engine host by host in boot order), the hosts' cold-boot compose.yaml, the gateway's plays
(:func:`gateway_plays`, the hook) and ``seatplan verify`` on the controller. A start or restart backs up each of
the seat's files it replaces (``<file>.bak-YYYYMMDD-<tag>``: the env file, the seat's compose service, its systemd
drop-in), writes them, cuts over from the engine started outside seatplan (``started_by``, the first time only),
(re)starts the engine when anything changed, and waits for ``/health``. A step that fails puts back what it changed,
restarts what ran, and ends the rollout naming the step. Rollback undoes the steps in reverse order from the marks
they left. In ``--check --diff`` it shows each file's diff and starts or stops nothing.
"""

from __future__ import annotations

import hashlib
import ipaddress
import json
import shlex
from pathlib import Path
from urllib.parse import urlsplit

from seatplan.documents.fleet import StartedBy
from seatplan.documents.plan import Plan, seat_launch
from seatplan.encode import Unsafe, ansible_unsafe, check_name, dump_yaml, systemd_path
from seatplan.engine.change import restart_digest
from seatplan.render import hostcheck, hostrelease
from seatplan.render.engines import Engine, FixedSeat, gpu_indices
from seatplan.render.gateway import gateway_files, gateway_variables
from seatplan.render.settings import RenderSettings
from seatplan.render.targets import ENGINE_LAUNCHER, HEADER, LAUNCHER_SCRIPT, Files, compose_hosts, compose_path, seat_compose_path
from seatplan.render.tasks import HEALTH_POLL_S, OUT_OF_RENDER, url_wait_task

SYSTEMD_UNIT = "seatplan-vllm@.service"
SYSTEMD_DIR = "/etc/systemd/system"
DROP_IN = "seatplan.conf"  # the seat's own part of the unit: its env_files and the host variables it is passed

# Run by Ansible's `shell`: every value is shell-quoted by Jinja's `quote` at the moment it is used, so a
# `-e seatplan_host_dir=...` override is quoted too (the rendered values are `!unsafe`, never templated). Compose
# recreates a seat from its own file (compose/SEAT.yaml on the host), so a step touches only that seat's files.
SEAT_COMPOSE = "(seatplan_host_dir ~ '/compose/' ~ seat.name ~ '.yaml') | quote"
RESTART_COMMANDS = {
    "compose": "docker compose -p seatplan -f {{ " + SEAT_COMPOSE + " }} up -d --no-deps --force-recreate {{ seat.name | quote }}",
    "systemd": "systemctl restart {{ ('seatplan-vllm@' ~ seat.name ~ '.service') | quote }}",
    "script": "{{ seatplan_restart_script | quote }} {{ seat.name | quote }} {{ (seatplan_host_dir ~ '/env/' ~ seat.name ~ '.env') | quote }}",
}
STOP_COMMANDS = {
    "compose": "docker compose -p seatplan -f {{ " + SEAT_COMPOSE + " }} stop {{ seat.name | quote }}",
    "systemd": "systemctl stop {{ ('seatplan-vllm@' ~ seat.name ~ '.service') | quote }}",
    # a third argument: a script written for the restart alone must read it before it restarts anything
    "script": "{{ seatplan_restart_script | quote }} {{ seat.name | quote }} {{ (seatplan_host_dir ~ '/env/' ~ seat.name ~ '.env') | quote }} stop",
}
# The message apply fails with, before the first step, when a secret reference would not reach its engine (a host
# variable unset, an env_files file missing or readable by others); `seatplan apply` turns it into error/fix.
MISSING_SECRETS = "seatplan-secrets-missing"
# The message the first play fails with when a seat's port, or memory on its GPUs, is held by a process no seat accounts for
# (before anything is stopped, on any host); `seatplan apply` turns it into error/fix.
REFUSED = "seatplan-port-refused"
REFUSED_ROWS = "(seatplan_observed.stdout_lines | default([]) | map('from_json') | selectattr('refuse') | list)"
# What the first play prints per seat: `seatplan-observed HOST {JSON}` (hostcheck.observe); `apply --check` tabulates it.
OBSERVED = "seatplan-observed"
# The message rollback fails with when no backup carries the tag; `seatplan rollback` turns it into error/fix.
NO_BACKUPS = "seatplan-no-backups"
# The message a failed step ends the rollout with (after putting back what it changed); `seatplan apply` names the step.
STEP_FAILED = "seatplan-step-failed"
# The message rollback fails with when a backup a record names is gone (nothing is put back then).
ROLLBACK_FAILED = "seatplan-rollback-failed"
# What a step leaves beside a seat's files: the file it replaced, as `<file>.bak-YYYYMMDD-<tag>`. What it added,
# stopped or cut over is in the release record on the host (render/hostrelease.py), which rollback reads.
# The host-side check of who holds a seat's port and whether the engine a step started is the one answering /health
# (render/hostcheck.py, standard library only), copied to each host beside the launcher.
HEALTH_CHECK = "bin/seatplan-health.py"
HOSTCHECK_TEXT = Path(hostcheck.__file__).read_text(encoding="utf-8")
# The host-side release records and the rollback computed from them (render/hostrelease.py), copied beside it.
RELEASE_SCRIPT = "bin/seatplan-release.py"
RELEASE_TEXT = Path(hostrelease.__file__).read_text(encoding="utf-8")


def is_loopback(address: str) -> bool:
    try:
        return ipaddress.ip_address(address).is_loopback
    except ValueError:
        return address == "localhost"


def inventory(engines: list[Engine]) -> dict:
    hosts: dict[str, dict] = {}
    for engine in engines:
        entry = hosts.setdefault(engine.host, {"ansible_host": Unsafe(engine.address)})
        if is_loopback(engine.address):
            # No SSH to this machine itself; and the controller's own Python, not a guessed one.
            entry |= {"ansible_connection": "local", "ansible_python_interpreter": "{{ ansible_playbook_python }}"}
    return {"all": {"hosts": hosts}}


def seat_entry(engine: Engine, env_text: str) -> dict:
    return {
        "name": Unsafe(engine.name),
        "health_url": Unsafe(engine.health_url),
        # what `stat` reports for the file once written: a different checksum means a restart
        "sha1": hashlib.sha1(env_text.encode("utf-8")).hexdigest(),
    }


def sha1(text: str) -> str:
    return hashlib.sha1(text.encode("utf-8")).hexdigest()


def cutover(started_by: StartedBy | None) -> dict | None:
    """How the engine that runs the seat today outside seatplan is stopped for good (the first apply), and started
    again (rollback): argument lists, run without a shell."""
    if started_by is None:
        return None
    if started_by.kind == "compose":
        file, service = started_by.compose_file or "", started_by.compose_service or ""
        # `rm --stop`: a stopped container with `restart: always` would come back when the Docker daemon restarts
        return {"kind": "compose", "stop": ["docker", "compose", "-f", file, "rm", "--stop", "--force", service],
                "start": ["docker", "compose", "-f", file, "up", "-d", service], "compose_file": file, "compose_service": service}
    if started_by.kind == "systemd":
        unit = started_by.systemd_unit or ""
        return {"kind": "systemd", "stop": ["systemctl", "disable", "--now", unit], "start": ["systemctl", "enable", "--now", unit], "unit": unit}
    return {"kind": "command", "stop": list(started_by.stop_command), "start": list(started_by.start_command)}


def seat_info(engine: Engine, files: Files) -> dict:
    """What the steps need of a seat in the plan: its host, health URL, the checksum of each of its files, the cut-over."""
    sums = {kind: sha1(files[path]) for kind, path in seat_file_paths(engine.name).items() if path in files}
    return {"name": engine.name, "host": engine.host, "port": engine.port, "health_url": engine.health_url, "sha1": sums, "cutover": cutover(engine.seat.started_by),
            "digest": restart_digest(seat_launch(engine.seat)) or ""}


def seat_file_paths(seat: str) -> dict[str, str]:
    """A seat's rendered files by kind (the kinds `seatplan_files` copies to the host)."""
    return {"env": f"env/{seat}.env", "compose": seat_compose_path(seat), "unit": f"systemd/{drop_in_dir(seat)}/{DROP_IN}"}


def drop_in_dir(seat: str) -> str:
    return f"seatplan-vllm@{seat}.service.d"


# The files one step writes for `seat` (a Jinja list, templated when a task uses it): the env file always, and the
# seat's compose service or systemd drop-in by restart kind. `seatplan_host_dir` may be overridden with -e.
SEAT_FILES = (
    "{{ [{'kind': 'env', 'src': seatplan_render_dir ~ '/env/' ~ seat.name ~ '.env', 'dest': seatplan_host_dir ~ '/env/' ~ seat.name ~ '.env'}]"
    " + ([{'kind': 'compose', 'src': seatplan_render_dir ~ '/compose-seats/' ~ seat.name ~ '.yaml', 'dest': seatplan_host_dir ~ '/compose/' ~ seat.name ~ '.yaml'}]"
    " if seatplan_restart == 'compose' else [])"
    " + ([{'kind': 'unit', 'src': seatplan_render_dir ~ '/systemd/seatplan-vllm@' ~ seat.name ~ '.service.d/" + DROP_IN + "', "
    "'dest': seatplan_systemd_dir ~ '/seatplan-vllm@' ~ seat.name ~ '.service.d/" + DROP_IN + "'}] if seatplan_restart == 'systemd' else []) }}"
)


def rollout_steps(plan: Plan, engines: list[Engine]) -> list[dict]:
    """The steps apply runs, in order: the plan's rollout where it has one (stop before start, from the current
    layout), else a restart of every engine host by host in boot order (each restarts only if its files changed)."""
    by_name = {engine.name: engine for engine in engines}
    if plan.rollout is None:
        ordered = sorted(engines, key=lambda engine: engine.host)  # stable: boot order within each host
        raw = [("restart", engine.name, list(engine.seat.gpus)) for engine in ordered]
    else:
        raw = [(step.action, step.seat, list(step.gpus)) for step in plan.rollout.steps
               # fixed seats are not seatplan's to start; a start of a seat the plan does not run as an engine cannot be
               if step.action == "stop" or step.seat in by_name]
        # every other engine gets a step too, after the rollout's, host by host in boot order: it restarts only when it
        # is not running as its files say (reconcile: killed, crashed, replaced by hand) or is cut over from started_by
        started = {seat for action, seat, _ in raw if action != "stop"}
        raw += [("restart", engine.name, list(engine.seat.gpus)) for engine in sorted(engines, key=lambda engine: engine.host) if engine.name not in started]
    steps = []
    for number, (action, seat, gpus) in enumerate(raw, 1):
        check_name("seat name", seat, f"rollout step {number}")
        host = by_name[seat].host if action != "stop" and seat in by_name else (gpus[0].rsplit(":", 1)[0] if gpus else "")
        check_name("host name", host, f"rollout step {number} ({action} {seat}), gpus")
        where = ", ".join(gpus) or host
        steps.append({"number": number, "action": action, "seat": seat, "host": host, "gpus": gpus,
                      "label": f"step {number}/{len(raw)} ({action} {seat} on {where})"})
    return steps


def secret_arguments(engines: list[Engine], host: str) -> list[str]:
    """The host check's arguments for the secrets the host's engines take by reference (``secrets`` in
    render/hostcheck.py): ``--var SEAT=NAME=SOURCE`` per ``from_host_env``, ``--file SEAT=PATH`` per ``env_files`` file."""
    words: list[str] = []
    for engine in engines:
        if engine.host != host:
            continue
        for name, source in sorted(engine.seat.env_from_host.items()):
            words += ["--var", f"{engine.name}={name}={source}"]
        for path in engine.seat.env_files:
            words += ["--file", f"{engine.name}={path}"]
    return words


def observe_arguments(engines: list[Engine], files: Files, host: str, fixed: list[FixedSeat]) -> list[str]:
    """The host check's ``observe`` arguments for the host's seats: ``--seat JSON`` each (its port, its GPUs, the
    planned env file's checksum, the engine its started_by names), and ``--fixed JSON`` for each fixed seat there (its
    GPUs, and the port of its health URL by which its process is known)."""
    words: list[str] = []
    for engine in engines:
        if engine.host == host:
            # a CPU host's "GPUs" are memory budgets: nvidia-smi has nothing to say about them
            gpus = gpu_indices(engine.seat) if engine.seat.device == "cuda" else []
            spec = {"seat": engine.name, "port": engine.port, "gpus": gpus, "sha1": sha1(files[f"env/{engine.name}.env"]),
                    "started_by": cutover(engine.seat.started_by), "digest": restart_digest(seat_launch(engine.seat))}
            words += ["--seat", json.dumps(spec, sort_keys=True)]
    for item in fixed:
        if item.host == host and item.seat.device == "cuda":
            words += ["--fixed", json.dumps({"seat": item.name, "gpus": item.gpu_indices, "port": url_port(item.seat.health_url)}, sort_keys=True)]
    return words


def url_port(url: str | None) -> int | None:
    """The port a health URL names (its scheme's default where it names none); None for no URL or a malformed one."""
    if not url:
        return None
    try:
        parsed = urlsplit(url)
        return parsed.port or {"http": 80, "https": 443}.get(parsed.scheme)
    except ValueError:
        return None


def variables(engines: list[Engine], files: Files, settings: RenderSettings, steps: list[dict], fixed: list[FixedSeat] | None = None) -> dict:
    fixed = fixed or []
    hosts = sorted({engine.host for engine in engines})
    seats = {host: [seat_entry(engine, files[f"env/{engine.name}.env"]) for engine in engines if engine.host == host] for host in hosts}
    info = {engine.name: seat_info(engine, files) for engine in engines}
    # each step carries its seat (a list, not a map keyed by seat: a diff of vars.yaml then never shows a neighbour's name)
    steps = [step | {"info": info.get(step["seat"], {"name": step["seat"], "host": None, "port": 0, "health_url": "", "sha1": {}, "cutover": None})} for step in steps]
    return {
        "seatplan_host_dir": Unsafe(settings.host_dir),
        "seatplan_render_dir": "{{ playbook_dir }}/..",
        "seatplan_tag": "seatplan",
        "seatplan_date": "{{ now(utc=true, fmt='%Y%m%d') }}",
        "seatplan_restart": settings.restart,
        # where the unit and the seats' drop-ins go (-e seatplan_systemd_dir=...: a test's stand-in systemd reads them there)
        "seatplan_systemd_dir": SYSTEMD_DIR,
        "seatplan_restart_script": Unsafe(settings.restart_script or ""),
        "seatplan_restart_command": RESTART_COMMANDS[settings.restart],
        "seatplan_stop_command": STOP_COMMANDS[settings.restart],
        "seatplan_health_retries": max(1, settings.health_timeout_s // HEALTH_POLL_S),
        # one deadline for each engine a step starts (render --health-timeout / apply --health-timeout)
        "seatplan_health_timeout_s": settings.health_timeout_s,
        "seatplan_health_delay_s": HEALTH_POLL_S,
        "seatplan_run_verify": True,
        # `seatplan apply` passes the plan's SHA-256 for the release record; `rollback --before TAG` sets the switch
        "seatplan_plan_sha256": "",
        "seatplan_rollback_before": False,
        # the tag whose backups hold the gateway's config and the rules as they were after the release rolled back to:
        # the earliest undone release's, as the engine hosts' records said (empty: nothing undone, nothing put back)
        "seatplan_rollback_tag": ("{{ groups['all'] | map('extract', hostvars) | selectattr('seatplan_undo', 'defined') | map(attribute='seatplan_undo') "
                                  "| map(attribute='restore_tag', default='') | select | first | default('') }}"),
        "seatplan_verify_command": Unsafe(verify_command(settings)),
        "seatplan_compose_files": ansible_unsafe({host: compose_path(host, compose_hosts(engines, fixed)) for host in hosts}),
        # the cold-boot compose.yaml per host as rendered: apply backs up the host's copy when it differs
        "seatplan_compose_sha1": {host: sha1(files.get(compose_path(host, compose_hosts(engines, fixed)), "")) for host in hosts},
        "seatplan_seats": seats,
        # each host's secret references, checked before the first step (secrets_tasks)
        "seatplan_secrets": ansible_unsafe({host: secret_arguments(engines, host) for host in hosts}),
        # each host's seats, as the first play observes what runs for them (observe_tasks; `apply --check` prints it)
        "seatplan_observe": ansible_unsafe({host: observe_arguments(engines, files, host, fixed) for host in hosts}),
        "seatplan_steps": ansible_unsafe(steps),
        "seatplan_files": SEAT_FILES,
        # fixed seats with a health URL, per host: the engines wait for each before the first restarts (issue 18)
        "seatplan_fixed": ansible_unsafe({host: [{"name": item.name, "health_url": item.seat.health_url} for item in fixed if item.host == host and item.seat.health_url]
                                          for host in hosts}),
    }


def verify_command(settings: RenderSettings) -> str:
    words = ["verify", settings.plan_path]
    if settings.verify_gateway:
        words += ["--gateway", settings.verify_gateway, "--key-env", settings.gateway_key_env]
    return f"{settings.seatplan_command} {shlex.join(words)}"


def mark(path: str, kind: str) -> str:
    """``<path>.<kind>-YYYYMMDD-<tag>``: a backup this apply made."""
    return path + "." + kind + "-{{ seatplan_date }}-{{ seatplan_tag }}"


def tagged(kind: str) -> str:
    """A ``find`` glob for the marks of ``kind`` carrying the tag, any date."""
    return "." + kind + "-[0-9][0-9][0-9][0-9][0-9][0-9][0-9][0-9]-{{ seatplan_tag }}"


ENV = "{{ seatplan_host_dir }}/env/{{ seat.name }}.env"
NOT_CHECK = "not ansible_check_mode"
CAN_START = "(seat.cutover is not none and (seat.cutover.start | default([]) | length > 0))"  # a stop_command may come without a start


def shell(name: str, command: str, when: str, **more: object) -> dict:
    return {"name": name, "ansible.builtin.shell": command, "args": OUT_OF_RENDER, "when": f"({when}) and {NOT_CHECK}", **more}


def host_check(command: str, *more: str) -> list[str]:
    """The argv of the host-side check (HEALTH_CHECK) for the step's seat, run with the host's Python."""
    return ["{{ ansible_python_interpreter | default('python3') }}", "{{ seatplan_host_dir }}/" + HEALTH_CHECK, command, "--seat", "{{ seat.name }}",
            "--port", "{{ seat.port }}", "--host-dir", "{{ seatplan_host_dir }}", "--mode", "{{ seatplan_restart }}", *more]


def health_wait(name: str, when: str, **more: object) -> dict:
    """Wait for the engine this step started: it must own the port's listening socket and answer /health 200 within
    ``seatplan_health_timeout_s``; one that exits fails at once with its log's last lines (render/hostcheck.py)."""
    argv = host_check("wait", "--url", "{{ seat.health_url }}", "--timeout-s", "{{ seatplan_health_timeout_s }}")
    return {"name": name, "ansible.builtin.command": {"argv": argv}, "register": "seatplan_health", "changed_when": False,
            "when": f"({when}) and {NOT_CHECK}", **more}


def port_check() -> dict:
    """Before a step touches anything: the seat's port is free, or held by its own engine or the one it cuts over
    from (the cut-over's stop comes later in the step); else the step fails here, naming the holder."""
    cuts = "'yes' if (seat.cutover is not none and not seatplan_before.results[0].stat.exists) else 'no'"
    argv = host_check("before", "--cutover", "{{ " + cuts + " }}", "--started-by", "{{ seat.cutover | to_json }}", "--digest", "{{ seat.digest | default('') }}")
    return {"name": "{{ seat.name }}: who holds port {{ seat.port }}", "ansible.builtin.command": {"argv": argv},
            "register": "seatplan_port", "changed_when": False, "when": NOT_CHECK}


def release_script(command: str, *more: str) -> list[str]:
    """The argv of the host-side release records (RELEASE_SCRIPT), run with the host's Python."""
    return ["{{ ansible_python_interpreter | default('python3') }}", "{{ seatplan_host_dir }}/" + RELEASE_SCRIPT, command, "--host-dir", "{{ seatplan_host_dir }}", *more]


# What every step tells the record (render/hostrelease.py's step_entry reads it): the seat, its commands as run, its
# files and what stood there before the step, and what the step did; a Jinja mapping, sent as JSON on stdin.
STEP_SEEN = ("'label': step.label, 'action': step.action, 'seat': seat.name, 'port': seat.port, 'health_url': seat.health_url, "
             "'mode': seatplan_restart, 'restart_command': seatplan_restart_command, 'stop_command': seatplan_stop_command, 'files': seatplan_files, "
             "'date': seatplan_date, 'tag': seatplan_tag, 'plan_sha256': seatplan_plan_sha256")


def record_task(seen: str) -> dict:
    """The step, once done, into this apply's release record on the host (rewritten whole, atomically)."""
    return {"name": "{{ seat.name }}: into the release record on the host",
            "ansible.builtin.command": {"argv": release_script("record", "--release", "{{ seatplan_release }}"), "stdin": "{{ {" + STEP_SEEN + ", " + seen + "} | to_json }}"},
            "changed_when": False, "when": NOT_CHECK}


def forget_pid(when: str) -> dict:
    """The launcher writes the PID it runs as to HOST_DIR/run/SEAT.pid; the one there before the start is the old
    engine's, kept as SEAT.pid.before, so that only the engine the restart command starts is waited for."""
    pid = "{{ seatplan_host_dir }}/run/{{ seat.name }}.pid"
    return {"name": "{{ seat.name }}: set aside the PID of the engine before", "ansible.builtin.command": {"argv": ["mv", "-f", pid, pid + ".before"], "removes": pid},
            "when": f"({when}) and {NOT_CHECK}"}


def daemon_reload(when: str, **more: object) -> dict:
    return {"name": "systemd reload", "ansible.builtin.systemd_service": {"daemon_reload": True},
            "when": f"seatplan_restart == 'systemd' and ({when}) and {NOT_CHECK}", **more}


def step_failed(what: str) -> dict:
    """The rescue's last task: the rollout stops here, naming the step (``seatplan apply`` reads the message). A failed
    host check's stderr (the reason, then the engine's last log lines) is kept whole, line by line."""
    reason = ("{{ (ansible_failed_result.stderr | default('') | trim | truncate(12000)) if (ansible_failed_result.stderr | default('') | trim) "
              "else (ansible_failed_result.msg | default('') | regex_replace('\\\\s+', ' ') | truncate(300)) }}")
    return {"name": "{{ step.label }} failed", "ansible.builtin.fail": {
        "msg": STEP_FAILED + ": {{ step.label }} failed at '{{ ansible_failed_task.name | default('?') }}': " + reason + "\n" + what}}


def start_step_tasks() -> list[dict]:
    """start or restart: back up the seat's files it replaces, write them, cut over from the engine started outside
    seatplan, (re)start, wait for /health. A failure puts back what the step changed, restarts what ran, and stops."""
    changed = "item.stat.exists and item.stat.checksum != (seat.sha1[item.item.kind] | default(''))"
    existed = "seatplan_before.results[0].stat.exists"
    # reconcile: an engine that is not running, or not from the files on the host, is started whatever changed
    # (the port check's verdict); `apply --restart SEAT` names seats restarted on purpose
    # the one change model (engine.change): where the running engine carries its restart digest, a new env file whose
    # change needs no restart (a utilisation beside a pinned KV cache) is written without one; a seat's compose
    # service or systemd drop-in that changed restarts it
    port = "(seatplan_port.stdout | default('{}', true) | from_json)"
    others_written = "(seatplan_written.results | default([]) | selectattr('changed') | map(attribute='item.kind') | reject('equalto', 'env') | list | length > 0)"
    restarts = (f"(seatplan_written is changed and not ({port}.digest_known | default(false))) or {others_written}"
                " or seat.name in (seatplan_stopped | default([])) or seatplan_cut is changed"
                f" or not ({port}.as_planned | default(true))"
                " or seat.name in (seatplan_force_restart | default('') | string).split(',')")
    block = [
        {"name": "{{ seat.name }}: dated backup of each file it replaces", "loop": "{{ seatplan_before.results }}", "loop_control": {"label": "{{ item.item.dest }}"},
         "ansible.builtin.copy": {"src": "{{ item.stat.path }}", "dest": mark("{{ item.stat.path }}", "bak"), "remote_src": True, "mode": "preserve"},
         "when": changed},
        {"name": "{{ seat.name }}: directories", "loop": "{{ seatplan_files }}", "loop_control": {"label": "{{ item.dest | dirname }}"},
         "ansible.builtin.file": {"path": "{{ item.dest | dirname }}", "state": "directory", "mode": "0755"}},
        {"name": "{{ seat.name }}: write its files", "loop": "{{ seatplan_files }}", "loop_control": {"label": "{{ item.dest }}"},
         "ansible.builtin.copy": {"src": "{{ item.src }}", "dest": "{{ item.dest }}", "mode": "0644"}, "register": "seatplan_written"},
        daemon_reload("seatplan_written is changed"),
        {"name": "{{ seat.name }}: cut over: stop the engine started outside seatplan",
         "ansible.builtin.command": {"argv": "{{ seat.cutover.stop }}"}, "register": "seatplan_cut",
         "when": f"seat.cutover is not none and not {existed} and {NOT_CHECK}"},
        forget_pid(restarts),
        shell("{{ seat.name }}: {{ step.action }}", "{{ seatplan_restart_command }}", restarts, register="seatplan_started"),
        health_wait("{{ seat.name }}: wait for /health before the next step", "seatplan_started is changed"),
        {"name": "{{ seat.name }}: running again", "ansible.builtin.set_fact": {"seatplan_stopped": "{{ seatplan_stopped | default([]) | difference([seat.name]) }}"}},
        record_task("'before': seatplan_before.results | map(attribute='stat') | list, 'sha1': seat.sha1, "
                    "'cutover': (seat.cutover if seatplan_cut is changed else none), 'started': seatplan_started is changed, "
                    "'health': seatplan_health.stdout | default('')"),
    ]
    rescue = [
        {"name": "{{ seat.name }}: put back the files this step replaced", "loop": "{{ seatplan_before.results }}", "loop_control": {"label": "{{ item.item.dest }}"},
         "ansible.builtin.copy": {"src": mark("{{ item.stat.path }}", "bak"), "dest": "{{ item.stat.path }}", "remote_src": True, "mode": "preserve"},
         "when": changed, "register": "seatplan_put_back"},
        shell("{{ seat.name }}: stop the engine this step started", "{{ seatplan_stop_command }}", f"not {existed}", ignore_errors=True),
        {"name": "{{ seat.name }}: remove the files this step added", "loop": "{{ seatplan_before.results }}", "loop_control": {"label": "{{ item.item.dest }}"},
         "ansible.builtin.file": {"path": "{{ item.item.dest }}", "state": "absent"}, "when": "not item.stat.exists"},
        daemon_reload("true", ignore_errors=True),
        {"name": "{{ seat.name }}: start the engine it cut over from again", "ansible.builtin.command": {"argv": "{{ seat.cutover.start }}", **OUT_OF_RENDER},
         "when": f"seatplan_cut is defined and seatplan_cut is changed and {CAN_START} and {NOT_CHECK}", "ignore_errors": True},
        forget_pid(f"{existed} and seatplan_put_back is changed and seat.name not in (seatplan_stopped | default([]))"),
        shell("{{ seat.name }}: restart it from the files put back", "{{ seatplan_restart_command }}",
              f"{existed} and seatplan_put_back is changed and seat.name not in (seatplan_stopped | default([]))", register="seatplan_restored", ignore_errors=True),
        health_wait("{{ seat.name }}: wait for /health of what ran", "seatplan_restored is changed and seatplan_restored is succeeded", ignore_errors=True),
        step_failed("what the step changed is put back{{ ' and ' ~ seat.name ~ ' restarted from it' if (seatplan_restored is changed) else '' }}; "
                    "roll back the earlier steps with: seatplan rollback DIR --to {{ seatplan_tag }}"),
    ]
    return [
        {"name": "{{ seat.name }}: its files now on the host", "loop": "{{ seatplan_files }}", "loop_control": {"label": "{{ item.dest }}"},
         "ansible.builtin.stat": {"path": "{{ item.dest }}", "checksum_algorithm": "sha1"}, "register": "seatplan_before"},
        {"name": "{{ step.label }}: the port", "block": [port_check()], "rescue": [step_failed("nothing was changed or stopped")]},
        {"name": "{{ step.label }}", "block": block, "rescue": rescue},
    ]


def stop_step_tasks() -> list[dict]:
    """stop: the seat's engine stops (it starts elsewhere in a later step, or leaves the plan). A seat already where
    the plan puts it (a second apply of the same plan) is left running. Leaving this host, its files are backed up
    and removed."""
    stays = "seat.host == inventory_hostname"
    done = f"{stays} and seatplan_env_now.stat.exists and seatplan_env_now.stat.checksum == seat.sha1.env"
    block = [
        shell("{{ seat.name }}: stop", "{{ seatplan_stop_command }}", "not seatplan_done", register="seatplan_stop_run"),
        forget_pid("not seatplan_done"),
        {"name": "{{ seat.name }}: stopped until its start", "ansible.builtin.set_fact": {"seatplan_stopped": "{{ (seatplan_stopped | default([])) + [seat.name] }}"},
         "when": "not seatplan_done"},
        {"name": "{{ seat.name }}: its files here", "loop": "{{ seatplan_files }}", "loop_control": {"label": "{{ item.dest }}"},
         "ansible.builtin.stat": {"path": "{{ item.dest }}"}, "register": "seatplan_leaving", "when": f"not seatplan_done and not ({stays})"},
        {"name": "{{ seat.name }}: dated backup of each file, as it leaves this host", "loop": "{{ seatplan_leaving.results | default([]) }}",
         "loop_control": {"label": "{{ item.item.dest }}"}, "when": "item.stat is defined and item.stat.exists",
         "ansible.builtin.copy": {"src": "{{ item.item.dest }}", "dest": mark("{{ item.item.dest }}", "bak"), "remote_src": True, "mode": "preserve"}},
        {"name": "{{ seat.name }}: remove its files", "loop": "{{ seatplan_leaving.results | default([]) }}", "loop_control": {"label": "{{ item.item.dest }}"},
         "when": "item.stat is defined and item.stat.exists", "ansible.builtin.file": {"path": "{{ item.item.dest }}", "state": "absent"}},
        record_task("'before': seatplan_leaving.results | default([]) | map(attribute='stat', default={}) | list, 'leaving': not (" + stays + "), "
                    "'stopped': not seatplan_done"),
    ]
    rescue = [
        {"name": "{{ seat.name }}: put its files back", "loop": "{{ seatplan_leaving.results | default([]) }}", "loop_control": {"label": "{{ item.item.dest }}"},
         "when": "item.stat is defined and item.stat.exists", "ignore_errors": True,
         "ansible.builtin.copy": {"src": mark("{{ item.item.dest }}", "bak"), "dest": "{{ item.item.dest }}", "remote_src": True, "mode": "preserve"}},
        shell("{{ seat.name }}: start it again", "{{ seatplan_restart_command }}", "not seatplan_done", ignore_errors=True),
        step_failed("the seat is started again from its files"),
    ]
    return [
        {"name": "{{ seat.name }}: its env file now on the host", "ansible.builtin.stat": {"path": ENV, "checksum_algorithm": "sha1"}, "register": "seatplan_env_now"},
        {"name": "{{ seat.name }}: already where the plan puts it?", "ansible.builtin.set_fact": {"seatplan_done": "{{ " + done + " }}"}},
        {"name": "{{ step.label }}", "block": block, "rescue": rescue},
    ]












def controller_script(command: str) -> dict:
    """The host check run from the controller's rendered copy (``script``: nothing is copied to the host first)."""
    return {"cmd": "{{ (seatplan_render_dir ~ '/" + HEALTH_CHECK + "') | quote }} " + command,
            "executable": "{{ ansible_python_interpreter | default('python3') }}"}


def observe_tasks() -> list[dict]:
    """Read-only, first on every host and in --check too: who listens on each seat's port (render/hostcheck.py
    ``observe``), one ``OBSERVED`` line per seat in the output that ``seatplan apply`` reads back."""
    command = ("observe --mode {{ seatplan_restart | quote }} --host-dir {{ seatplan_host_dir | quote }} "
               "{{ seatplan_observe[inventory_hostname] | default([]) | map('quote') | join(' ') }}")
    return [
        {"name": "what runs for each seat", "ansible.builtin.script": controller_script(command), "register": "seatplan_observed",
         "changed_when": False, "check_mode": False, "when": "seatplan_observe[inventory_hostname] | default([]) | length > 0"},
        {"name": "what runs, seat by seat", "loop": "{{ seatplan_observed.stdout_lines | default([]) }}",
         "loop_control": {"label": "{{ (item | from_json).seat }}"},
         "ansible.builtin.debug": {"msg": OBSERVED + " {{ inventory_hostname }} {{ item }}"}},
        {"name": "no seat's port or GPU is held by a process nobody declared", "when": f"{REFUSED_ROWS} | length > 0 and {NOT_CHECK}",
         "ansible.builtin.fail": {"msg": REFUSED + ": on {{ inventory_hostname }}: {{ " + REFUSED_ROWS + " | map(attribute='message') | join('\n') }}"}},
    ]


def secrets_tasks() -> list[dict]:
    """Before anything is written or stopped on any host: every secret a seat takes by reference reaches its engine
    (the host variable is set where the engines get their environment; each env_files file exists and is not readable
    by others). Run from the controller's copy (``script``: nothing is copied to the host first), in --check too."""
    command = "secrets --mode {{ seatplan_restart | quote }} {{ seatplan_secrets[inventory_hostname] | default([]) | map('quote') | join(' ') }}"
    check = {"name": "every secret reference reaches its engine", "ansible.builtin.script": controller_script(command),
             "register": "seatplan_secrets_check", "changed_when": False, "check_mode": False,
             "when": "seatplan_secrets[inventory_hostname] | default([]) | length > 0"}
    failed = {"name": "a secret reference would not reach its engine", "ansible.builtin.fail": {
        "msg": MISSING_SECRETS + ": on {{ inventory_hostname }}: {{ ansible_failed_result.stderr | default(ansible_failed_result.msg | default('')) | trim | truncate(6000) }}"}}
    return [{"name": "secrets", "block": [check], "rescue": [failed]}]


def prepare_tasks() -> list[dict]:
    """The directories, the engine launcher and the systemd unit the restart command uses."""
    return [
        {"name": "seatplan directories", "loop": ["env", "compose", "bin", "run"],
         "ansible.builtin.file": {"path": "{{ seatplan_host_dir }}/{{ item }}", "state": "directory", "mode": "0755"}},
        {"name": "the engine launcher",
         "ansible.builtin.copy": {"src": "{{ seatplan_render_dir }}/" + ENGINE_LAUNCHER, "dest": "{{ seatplan_host_dir }}/" + ENGINE_LAUNCHER, "mode": "0755"}},
        {"name": "the engines' health check",
         "ansible.builtin.copy": {"src": "{{ seatplan_render_dir }}/" + HEALTH_CHECK, "dest": "{{ seatplan_host_dir }}/" + HEALTH_CHECK, "mode": "0755"}},
        release_copy_task(),
        # one record per apply and host, named once here (UTC time to the microsecond, then the tag: they sort in order)
        {"name": "this apply's release record", "ansible.builtin.set_fact": {"seatplan_release": "{{ now(utc=true, fmt='%Y%m%dT%H%M%S%f') }}-{{ seatplan_tag }}"}},
        {
            "name": "systemd unit",
            "ansible.builtin.copy": {"src": "{{ seatplan_render_dir }}/systemd/" + SYSTEMD_UNIT, "dest": "{{ seatplan_systemd_dir }}/" + SYSTEMD_UNIT, "mode": "0644"},
            "register": "seatplan_unit",
            "when": "seatplan_restart == 'systemd'",
        },
        daemon_reload("seatplan_unit is changed"),
    ]


def release_copy_task() -> dict:
    return {"name": "the release records' script",
            "ansible.builtin.copy": {"src": "{{ seatplan_render_dir }}/" + RELEASE_SCRIPT, "dest": "{{ seatplan_host_dir }}/" + RELEASE_SCRIPT, "mode": "0755"}}


def release_finish_task() -> dict:
    return {"name": "the release record: landed", "ansible.builtin.command": {"argv": release_script("finish", "--release", "{{ seatplan_release }}")},
            "changed_when": False, "when": NOT_CHECK}


def compose_file_tasks(restore: bool) -> list[dict]:
    """The host's compose.yaml (what a cold `docker compose up -d` boots, in boot order), written after the steps
    with a dated backup; rollback puts the tagged one back. The engines restart from their own files, not from it."""
    dest = "{{ seatplan_host_dir }}/compose.yaml"
    when = "seatplan_restart == 'compose' and inventory_hostname in seatplan_compose_files"
    if restore:
        return [
            {"name": "compose.yaml as the earliest undone release found it", "ansible.builtin.find": {"paths": "{{ seatplan_host_dir }}",
             "patterns": "compose.yaml" + tagged("bak").replace("seatplan_tag", "seatplan_undo.restore_tag")},
             "register": "seatplan_compose_backup", "when": f"{when} and (seatplan_undo.restore_tag | default(none)) is not none"},
            {"name": "put compose.yaml back", "when": f"{when} and (seatplan_compose_backup.matched | default(0)) > 0",
             "ansible.builtin.copy": {"src": "{{ (seatplan_compose_backup.files | sort(attribute='mtime') | last).path }}", "dest": dest, "remote_src": True, "mode": "preserve"}},
        ]
    return [
        {"name": "compose.yaml now", "ansible.builtin.stat": {"path": dest, "checksum_algorithm": "sha1"}, "register": "seatplan_compose_now", "when": when},
        {"name": "dated backup of compose.yaml", "ansible.builtin.copy": {"src": dest, "dest": mark(dest, "bak"), "remote_src": True, "mode": "preserve"},
         "when": f"{when} and seatplan_compose_now.stat.exists and seatplan_compose_now.stat.checksum != seatplan_compose_sha1[inventory_hostname]"},
        {"name": "compose.yaml", "when": when,
         "ansible.builtin.copy": {"src": "{{ seatplan_render_dir }}/{{ seatplan_compose_files[inventory_hostname] }}", "dest": dest, "mode": "0644"}},
    ]


def play(name: str, tasks: list[dict], hosts: str = "all", **more: object) -> dict:
    return {"name": name, "hosts": hosts, "serial": 1, "gather_facts": False, "vars_files": ["vars.yaml"], **more, "tasks": tasks}


def step_play(index: int, step: dict, task_file: str) -> dict:
    """One play per step, on the step's host; any failure ends the whole playbook there (the steps are ordered across hosts)."""
    return play(step["label"], [{"name": step["label"], "ansible.builtin.include_tasks": task_file}], hosts=step["host"], any_errors_fatal=True,
                vars={"step": f"{{{{ seatplan_steps[{index}] }}}}", "seat": f"{{{{ seatplan_steps[{index}].info }}}}"})


def verify_play() -> dict:
    return {
        "name": "seatplan verify: every engine runs what was planned",
        "hosts": "localhost",
        "gather_facts": False,
        "vars_files": ["vars.yaml"],
        "tasks": [
            {
                "name": "seatplan verify",
                "ansible.builtin.command": "{{ seatplan_verify_command }}",
                "changed_when": False,
                "when": "seatplan_run_verify | bool and not ansible_check_mode",
            }
        ],
    }


def systemd_unit(settings: RenderSettings) -> str:
    host_dir = systemd_path(settings.host_dir, "--host-dir")
    return (
        HEADER
        + "[Unit]\nDescription=vLLM engine for seatplan seat %i\nAfter=network-online.target\n\n"
        + "[Service]\n"
        + f"EnvironmentFile={host_dir}/env/%i.env\n"
        # the seat's drop-in (seatplan-vllm@SEAT.service.d/seatplan.conf) adds its env_files and PassEnvironment=;
        # the launcher copies each secret named by reference and runs SEATPLAN_COMMAND
        + f"ExecStart={host_dir}/bin/seatplan-engine.sh\n"
        + "Restart=on-failure\nTimeoutStopSec=60\n\n[Install]\nWantedBy=multi-user.target\n"
    )


def drop_in(engine: Engine) -> str:
    """The seat's part of its unit: files on the host read after its env file, and the host variables passed through
    (systemd's own environment: `systemctl set-environment`, or the manager's)."""
    seat = engine.seat
    lines = [HEADER.rstrip("\n"), f"# seat {seat.name}: secrets by reference only (names and paths, never values)", "[Service]"]
    lines += [f"EnvironmentFile={systemd_path(path, f'seat {seat.name} env_files')}" for path in seat.env_files]
    sources = sorted(set(seat.env_from_host.values()))
    if sources:
        lines.append("PassEnvironment=" + " ".join(sources))
    return "\n".join(lines) + "\n"


def fixed_wait_task() -> dict:
    """The fixed seats boot first: wait for each one's health URL before restarting any engine on its host."""
    return url_wait_task("fixed seats: wait for their health URL before the engines", "{{ fixed.health_url }}", "seatplan_fixed_health",
                         loop="{{ seatplan_fixed[inventory_hostname] | default([]) }}",
                         loop_control={"loop_var": "fixed", "label": "{{ fixed.name }}"}, when=NOT_CHECK)


def gateway_plays(settings: RenderSettings) -> list[dict]:
    """The gateway's rollout (the LiteLLM config, the Prometheus rules, the smoke completion; render/gateway.py): run
    after every engine step succeeded and before the closing verify."""
    return [{"name": "seatplan apply: the gateway and the alert rules", "import_playbook": "gateway.yaml"}]


def apply_plays(steps: list[dict], settings: RenderSettings, fixed: list[FixedSeat]) -> list[dict]:
    waits = [fixed_wait_task()] if any(item.seat.health_url for item in fixed) else []
    # any host's missing secret ends the apply before the first host is prepared: nothing is changed anywhere
    plays = [play("seatplan apply: what runs, and every secret reference reaches its engine", observe_tasks() + secrets_tasks(), any_errors_fatal=True),
             play("seatplan apply: prepare every host", prepare_tasks() + waits)]
    plays += [step_play(index, step, "step-stop.yaml" if step["action"] == "stop" else "step-start.yaml") for index, step in enumerate(steps)]
    plays.append(play("seatplan apply: the hosts' compose.yaml (a cold boot's file)", compose_file_tasks(restore=False)))
    landed = play("seatplan apply: the release recorded on each host as landed", [release_finish_task()])
    return plays + gateway_plays(settings) + [landed, verify_play()]


def undo_tasks() -> list[dict]:
    """Rollback on one host, from its release records (render/hostrelease.py): the files put back, then every engine
    the undone releases touched stopped, then each one whose env file is back started again and waited for, then
    the starters they cut over from started again; the undone records are set aside."""
    which = "{{ '--before' if (seatplan_rollback_before | bool) else '--to' }}"
    check = "--check={{ 'yes' if ansible_check_mode else 'no' }}"
    return [
        # the rendered script, sent and run by `script` (in --check too; nothing is left on the host)
        {"name": "the releases recorded on this host, and what undoing them takes",
         "ansible.builtin.script": {"cmd": "{{ (seatplan_render_dir ~ '/" + RELEASE_SCRIPT + "') | quote }} undo --host-dir {{ seatplan_host_dir | quote }} "
                                    "--host {{ inventory_hostname | quote }} " + which + " {{ seatplan_tag | quote }} " + check,
                                    "executable": "{{ ansible_python_interpreter | default('python3') }}"},
         "register": "seatplan_undo_run", "check_mode": False, "changed_when": "(seatplan_undo_run.stdout | from_json).files | default([]) | length > 0"},
        {"name": "what the records say", "ansible.builtin.set_fact": {"seatplan_undo": "{{ seatplan_undo_run.stdout | from_json }}"}, "check_mode": False},
        {"name": "a release tagged {{ seatplan_tag }} is recorded here",
         "ansible.builtin.fail": {"msg": NO_BACKUPS + ": on {{ inventory_hostname }}; tags there: {{ seatplan_undo.tags | join(' ') or '(none)' }}"},
         "when": "seatplan_undo.error | default('') == 'unknown'"},
        {"name": "every backup the undo needs is there",
         "ansible.builtin.fail": {"msg": ROLLBACK_FAILED + ": on {{ inventory_hostname }}: the backups {{ seatplan_undo.missing | join(', ') }} are missing; "
                                  "nothing was put back or restarted"},
         "when": "seatplan_undo.error | default('') == 'missing'"},
        {"name": "nothing to undo here", "ansible.builtin.debug": {
            "msg": "{{ inventory_hostname }}: {{ ('the release tagged ' ~ seatplan_tag ~ ' is rolled back already') if (seatplan_undo.error | default('') == 'rolled-back') "
                   "else ('no release after ' ~ seatplan_tag ~ ': nothing to roll back') }}"},
         "when": "seatplan_undo.error | default('') == 'rolled-back' or (seatplan_undo.records | default([]) | length == 0)"},
        {"name": "{{ seat.name }}: stop the engine of the undone releases", "ansible.builtin.shell": "{{ seat.stop_command }}",
         "loop": "{{ seatplan_undo.stop | default([]) }}", "loop_control": {"loop_var": "seat", "label": "{{ seat.name }}"},
         "when": f"seat.stop_command | length > 0 and {NOT_CHECK}", "ignore_errors": True},
        {"name": "{{ seat.name }}: start it again from the files put back, and wait for it",
         "ansible.builtin.include_tasks": "undo-seat.yaml", "loop": "{{ seatplan_undo.start | default([]) }}",
         "loop_control": {"loop_var": "seat", "label": "{{ seat.name }}"}, "when": NOT_CHECK},
        {"name": "{{ seat.name }}: start the engine it was cut over from", "ansible.builtin.command": {"argv": "{{ seat.argv }}", **OUT_OF_RENDER},
         "loop": "{{ seatplan_undo.cutover_start | default([]) }}", "loop_control": {"loop_var": "seat", "label": "{{ seat.name }}"}, "when": NOT_CHECK},
        {"name": "the undone releases set aside",
         "ansible.builtin.script": {"cmd": "{{ (seatplan_render_dir ~ '/" + RELEASE_SCRIPT + "') | quote }} done --host-dir {{ seatplan_host_dir | quote }} "
                                    "{{ seatplan_undo.records | default([]) | map('quote') | join(' ') }}",
                                    "executable": "{{ ansible_python_interpreter | default('python3') }}"},
         "when": f"(seatplan_undo.records | default([]) | length > 0) and {NOT_CHECK}"},
    ]


def seat_wait() -> dict:
    """The health wait of a seat rollback starts again, in the restart mode its record names."""
    wait = health_wait("{{ seat.name }}: wait for /health before the next seat", "true")
    wait["ansible.builtin.command"]["argv"] = [word if word != "{{ seatplan_restart }}" else "{{ seat.mode }}" for word in wait["ansible.builtin.command"]["argv"]]
    return wait


def undo_seat_tasks(wait: dict) -> list[dict]:
    return [
        forget_pid("true"),
        {"name": "{{ seat.name }}: start", "ansible.builtin.shell": "{{ seat.restart_command }}", "args": OUT_OF_RENDER, "when": NOT_CHECK},
        wait,
    ]


def rollback_plays() -> list[dict]:
    """Rollback reads the releases recorded on each host and undoes those after the tag (render/hostrelease.py), host by
    host; the gateway's config and the alert rules go back to the backups the earliest undone release made."""
    plays = [play("seatplan rollback: the releases recorded on each host, undone", undo_tasks())]
    return plays + [play("seatplan rollback: the hosts' compose.yaml", compose_file_tasks(restore=True)),
                    {"name": "seatplan rollback: the gateway and the alert rules", "import_playbook": "gateway-rollback.yaml"}]


def ansible_files(plan: Plan, engines: list[Engine], files: Files, settings: RenderSettings, fixed: list[FixedSeat] | None = None,
                  gateway_texts: tuple[str, str, str | None] = ("", "", None)) -> Files:
    """``files``: what the other builders rendered (the env files, and the seats' compose files in compose mode);
    ``gateway_texts``: the rendered LiteLLM config and alert rules, which the gateway plays put in place after the engines,
    and the live gateway config render merged the seats' routes into (None: none was read)."""
    fixed = fixed or []
    header = HEADER
    steps = rollout_steps(plan, engines)
    out: Files = {}
    if settings.restart == "systemd":
        out[f"systemd/{SYSTEMD_UNIT}"] = systemd_unit(settings)
        out |= {f"systemd/{drop_in_dir(engine.name)}/{DROP_IN}": drop_in(engine) for engine in engines}
    everything = files | out
    values = variables(engines, everything, settings, steps, fixed) | gateway_variables(engines, settings, *gateway_texts)
    out |= {path: header + dump_yaml(plays) for path, plays in gateway_files(settings).items()}
    out |= {
        ENGINE_LAUNCHER: LAUNCHER_SCRIPT,
        HEALTH_CHECK: HOSTCHECK_TEXT,
        "ansible/inventory.yaml": header + dump_yaml(inventory(engines)),
        "ansible/vars.yaml": header + dump_yaml(values),
        "ansible/playbook.yaml": header + dump_yaml(apply_plays(steps, settings, fixed)),
        "ansible/step-start.yaml": header + dump_yaml(start_step_tasks()),
        "ansible/step-stop.yaml": header + dump_yaml(stop_step_tasks()),
        RELEASE_SCRIPT: RELEASE_TEXT,
        "ansible/rollback.yaml": header + dump_yaml(rollback_plays()),
        "ansible/undo-seat.yaml": header + dump_yaml(undo_seat_tasks(seat_wait())),
    }
    return out
