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
import shlex
from pathlib import Path

from seatplan.documents.fleet import StartedBy
from seatplan.documents.plan import Plan
from seatplan.encode import TAG, Unsafe, ansible_unsafe, check_name, dump_yaml, systemd_path
from seatplan.render import hostcheck
from seatplan.render.engines import Engine, FixedSeat
from seatplan.render.gateway import gateway_files, gateway_variables
from seatplan.render.settings import RenderSettings
from seatplan.render.targets import ENGINE_LAUNCHER, HEADER, LAUNCHER_SCRIPT, Files, compose_hosts, compose_path, seat_compose_path
from seatplan.render.tasks import HEALTH_POLL_S, url_wait_task

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
# The message rollback fails with when no backup carries the tag; `seatplan rollback` turns it into error/fix.
NO_BACKUPS = "seatplan-no-backups"
# The message a failed step ends the rollout with (after putting back what it changed); `seatplan apply` names the step.
STEP_FAILED = "seatplan-step-failed"
# What a step leaves beside a seat's files, named `<file>.<mark>-YYYYMMDD-<tag>`: the file it replaced (bak), that
# the file is new with this tag (new), that the seat was stopped (stopped), that the engine started outside seatplan
# was stopped for seatplan's (cutover). Rollback reads them back.
MARKS = ("bak", "new", "stopped", "cutover")
# The host-side check of who holds a seat's port and whether the engine a step started is the one answering /health
# (render/hostcheck.py, standard library only), copied to each host beside the launcher.
HEALTH_CHECK = "bin/seatplan-health.py"
HOSTCHECK_TEXT = Path(hostcheck.__file__).read_text(encoding="utf-8")


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
                "start": ["docker", "compose", "-f", file, "up", "-d", service]}
    if started_by.kind == "systemd":
        unit = started_by.systemd_unit or ""
        return {"kind": "systemd", "stop": ["systemctl", "disable", "--now", unit], "start": ["systemctl", "enable", "--now", unit]}
    return {"kind": "command", "stop": list(started_by.stop_command), "start": list(started_by.start_command)}


def seat_info(engine: Engine, files: Files) -> dict:
    """What the steps need of a seat in the plan: its host, health URL, the checksum of each of its files, the cut-over."""
    sums = {kind: sha1(files[path]) for kind, path in seat_file_paths(engine.name).items() if path in files}
    return {"name": engine.name, "host": engine.host, "port": engine.port, "health_url": engine.health_url, "sha1": sums, "cutover": cutover(engine.seat.started_by)}


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
    " + ([{'kind': 'unit', 'src': seatplan_render_dir ~ '/systemd/seatplan-vllm@' ~ seat.name ~ '.service.d/" + DROP_IN + "', 'dest': '"
    + SYSTEMD_DIR + "/seatplan-vllm@' ~ seat.name ~ '.service.d/" + DROP_IN + "'}] if seatplan_restart == 'systemd' else []) }}"
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
        "seatplan_restart_script": Unsafe(settings.restart_script or ""),
        "seatplan_restart_command": RESTART_COMMANDS[settings.restart],
        "seatplan_stop_command": STOP_COMMANDS[settings.restart],
        "seatplan_health_retries": max(1, settings.health_timeout_s // HEALTH_POLL_S),
        # one deadline for each engine a step starts (render --health-timeout / apply --health-timeout)
        "seatplan_health_timeout_s": settings.health_timeout_s,
        "seatplan_health_delay_s": HEALTH_POLL_S,
        "seatplan_run_verify": True,
        "seatplan_verify_command": Unsafe(verify_command(settings)),
        "seatplan_compose_files": ansible_unsafe({host: compose_path(host, compose_hosts(engines, fixed)) for host in hosts}),
        # the cold-boot compose.yaml per host as rendered: apply backs up the host's copy when it differs
        "seatplan_compose_sha1": {host: sha1(files.get(compose_path(host, compose_hosts(engines, fixed)), "")) for host in hosts},
        "seatplan_seats": seats,
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
    """``<path>.<kind>-YYYYMMDD-<tag>``: a backup or a marker of this apply (MARKS)."""
    return path + "." + kind + "-{{ seatplan_date }}-{{ seatplan_tag }}"


def tagged(kind: str) -> str:
    """A ``find`` glob for the marks of ``kind`` carrying the tag, any date."""
    return "." + kind + "-[0-9][0-9][0-9][0-9][0-9][0-9][0-9][0-9]-{{ seatplan_tag }}"


ENV = "{{ seatplan_host_dir }}/env/{{ seat.name }}.env"
NOT_CHECK = "not ansible_check_mode"
CAN_START = "(seat.cutover is not none and (seat.cutover.start | default([]) | length > 0))"  # a stop_command may come without a start


def shell(name: str, command: str, when: str, **more: object) -> dict:
    return {"name": name, "ansible.builtin.shell": command, "when": f"({when}) and {NOT_CHECK}", **more}


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
    return {"name": "{{ seat.name }}: who holds port {{ seat.port }}", "ansible.builtin.command": {"argv": host_check("before", "--cutover", "{{ " + cuts + " }}")},
            "register": "seatplan_port", "changed_when": False, "when": NOT_CHECK}


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
    restarts = ("seatplan_written is changed or seat.name in (seatplan_stopped | default([])) or seatplan_cut is changed"
                " or not ((seatplan_port.stdout | default('{}', true) | from_json).as_planned | default(true))"
                " or seat.name in (seatplan_force_restart | default('') | string).split(',')")
    block = [
        {"name": "{{ seat.name }}: dated backup of each file it replaces", "loop": "{{ seatplan_before.results }}", "loop_control": {"label": "{{ item.item.dest }}"},
         "ansible.builtin.copy": {"src": "{{ item.stat.path }}", "dest": mark("{{ item.stat.path }}", "bak"), "remote_src": True, "mode": "preserve"},
         "when": changed},
        {"name": "{{ seat.name }}: mark the files that are new with this tag", "loop": "{{ seatplan_before.results }}", "loop_control": {"label": "{{ item.item.dest }}"},
         "ansible.builtin.copy": {"content": "", "dest": mark("{{ item.item.dest }}", "new"), "mode": "0644"}, "when": "not item.stat.exists"},
        {"name": "{{ seat.name }}: directories", "loop": "{{ seatplan_files }}", "loop_control": {"label": "{{ item.dest | dirname }}"},
         "ansible.builtin.file": {"path": "{{ item.dest | dirname }}", "state": "directory", "mode": "0755"}},
        {"name": "{{ seat.name }}: write its files", "loop": "{{ seatplan_files }}", "loop_control": {"label": "{{ item.dest }}"},
         "ansible.builtin.copy": {"src": "{{ item.src }}", "dest": "{{ item.dest }}", "mode": "0644"}, "register": "seatplan_written"},
        daemon_reload("seatplan_written is changed"),
        {"name": "{{ seat.name }}: cut over: stop the engine started outside seatplan",
         "ansible.builtin.command": {"argv": "{{ seat.cutover.stop }}"}, "register": "seatplan_cut",
         "when": f"seat.cutover is not none and not {existed} and {NOT_CHECK}"},
        {"name": "{{ seat.name }}: mark the cut-over", "ansible.builtin.copy": {"content": "{{ seat.cutover.kind }}\n", "dest": mark(ENV, "cutover"), "mode": "0644"},
         "when": "seatplan_cut is changed"},
        forget_pid(restarts),
        shell("{{ seat.name }}: {{ step.action }}", "{{ seatplan_restart_command }}", restarts, register="seatplan_started"),
        health_wait("{{ seat.name }}: wait for /health before the next step", "seatplan_started is changed"),
        {"name": "{{ seat.name }}: running again", "ansible.builtin.set_fact": {"seatplan_stopped": "{{ seatplan_stopped | default([]) | difference([seat.name]) }}"}},
    ]
    rescue = [
        {"name": "{{ seat.name }}: put back the files this step replaced", "loop": "{{ seatplan_before.results }}", "loop_control": {"label": "{{ item.item.dest }}"},
         "ansible.builtin.copy": {"src": mark("{{ item.stat.path }}", "bak"), "dest": "{{ item.stat.path }}", "remote_src": True, "mode": "preserve"},
         "when": changed, "register": "seatplan_put_back"},
        shell("{{ seat.name }}: stop the engine this step started", "{{ seatplan_stop_command }}", f"not {existed}", ignore_errors=True),
        {"name": "{{ seat.name }}: remove the files this step added", "loop": "{{ seatplan_before.results }}", "loop_control": {"label": "{{ item.item.dest }}"},
         "ansible.builtin.file": {"path": "{{ item.item.dest }}", "state": "absent"}, "when": "not item.stat.exists"},
        daemon_reload("true", ignore_errors=True),
        {"name": "{{ seat.name }}: start the engine it cut over from again", "ansible.builtin.command": {"argv": "{{ seat.cutover.start }}"},
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
        {"name": "{{ seat.name }}: mark it stopped", "ansible.builtin.copy": {"content": "", "dest": mark(ENV, "stopped"), "mode": "0644"}, "when": "not seatplan_done"},
        {"name": "{{ seat.name }}: stopped until its start", "ansible.builtin.set_fact": {"seatplan_stopped": "{{ (seatplan_stopped | default([])) + [seat.name] }}"},
         "when": "not seatplan_done"},
        {"name": "{{ seat.name }}: its files here", "loop": "{{ seatplan_files }}", "loop_control": {"label": "{{ item.dest }}"},
         "ansible.builtin.stat": {"path": "{{ item.dest }}"}, "register": "seatplan_leaving", "when": f"not seatplan_done and not ({stays})"},
        {"name": "{{ seat.name }}: dated backup of each file, as it leaves this host", "loop": "{{ seatplan_leaving.results | default([]) }}",
         "loop_control": {"label": "{{ item.item.dest }}"}, "when": "item.stat is defined and item.stat.exists",
         "ansible.builtin.copy": {"src": "{{ item.item.dest }}", "dest": mark("{{ item.item.dest }}", "bak"), "remote_src": True, "mode": "preserve"}},
        {"name": "{{ seat.name }}: remove its files", "loop": "{{ seatplan_leaving.results | default([]) }}", "loop_control": {"label": "{{ item.item.dest }}"},
         "when": "item.stat is defined and item.stat.exists", "ansible.builtin.file": {"path": "{{ item.item.dest }}", "state": "absent"}},
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


def find_marks(kind: str, register: str, paths: str = "{{ seatplan_files }}") -> dict:
    """Per seat file, the marks of ``kind`` this tag left beside it (newest last by mtime)."""
    return {"name": "{{ seat.name }}: its " + kind + " marks tagged {{ seatplan_tag }}", "loop": paths, "loop_control": {"label": "{{ item.dest }}"},
            "ansible.builtin.find": {"paths": "{{ item.dest | dirname }}", "patterns": "{{ item.dest | basename }}" + tagged(kind), "get_checksum": True},
            "register": register}


def undo_start_tasks() -> list[dict]:
    """Rollback of a start or restart: the seat's files as they were before the tag (a file the tag added goes), the
    engine stopped (start) or restarted from them (restart), the engine it cut over from started again."""
    differs = "item.matched > 0 and (item.files | sort(attribute='mtime') | last).checksum != (seatplan_now.results[ansible_loop.index0].stat.checksum | default(''))"
    new_any = "(seatplan_new.results | selectattr('matched', 'gt', 0) | list | length > 0)"
    return [
        {"name": "{{ seat.name }}: its files now", "loop": "{{ seatplan_files }}", "loop_control": {"label": "{{ item.dest }}"},
         "ansible.builtin.stat": {"path": "{{ item.dest }}", "checksum_algorithm": "sha1"}, "register": "seatplan_now"},
        find_marks("bak", "seatplan_backups"),
        find_marks("new", "seatplan_new"),
        {"name": "{{ seat.name }}: did the tag add it?", "ansible.builtin.set_fact": {"seatplan_added": "{{ " + new_any + " }}", "seatplan_differs": False}},
        {"name": "{{ seat.name }}: does a file differ from the one tagged?", "loop": "{{ seatplan_backups.results }}",
         "loop_control": {"label": "{{ item.item.dest }}", "extended": True}, "when": differs, "ansible.builtin.set_fact": {"seatplan_differs": True}},
        shell("{{ seat.name }}: stop the engine the tag started", "{{ seatplan_stop_command }}",
              "seatplan_added or (step.action == 'start' and seatplan_differs)", ignore_errors=True),
        {"name": "{{ seat.name }}: put back the newest file tagged {{ seatplan_tag }}", "loop": "{{ seatplan_backups.results }}",
         "loop_control": {"label": "{{ item.item.dest }}", "extended": True},
         "ansible.builtin.copy": {"src": "{{ (item.files | sort(attribute='mtime') | last).path }}", "dest": "{{ item.item.dest }}", "remote_src": True, "mode": "preserve"},
         "when": differs, "register": "seatplan_put_back"},
        {"name": "{{ seat.name }}: remove the files the tag added", "loop": "{{ seatplan_new.results }}", "loop_control": {"label": "{{ item.item.dest }}"},
         "ansible.builtin.file": {"path": "{{ item.item.dest }}", "state": "absent"}, "when": "item.matched > 0"},
        {"name": "{{ seat.name }}: and their marks", "loop": "{{ seatplan_new.results | map(attribute='files') | flatten | map(attribute='path') | list }}",
         "ansible.builtin.file": {"path": "{{ item }}", "state": "absent"}},
        daemon_reload("seatplan_put_back is changed or seatplan_added"),
        forget_pid("step.action == 'restart' and seatplan_put_back is changed and not seatplan_added"),
        shell("{{ seat.name }}: restart from the files put back", "{{ seatplan_restart_command }}",
              "step.action == 'restart' and seatplan_put_back is changed and not seatplan_added", register="seatplan_started"),
        health_wait("{{ seat.name }}: wait for /health before the next seat", "seatplan_started is changed"),
        find_marks("cutover", "seatplan_cutovers", "{{ seatplan_files[:1] }}"),
        {"name": "{{ seat.name }}: start the engine it was cut over from", "ansible.builtin.command": {"argv": "{{ seat.cutover.start }}"},
         "when": f"seatplan_cutovers.results[0].matched > 0 and {CAN_START} and {NOT_CHECK}"},
        {"name": "{{ seat.name }}: the cut-over is undone", "loop": "{{ seatplan_cutovers.results[0].files | map(attribute='path') | list }}",
         "ansible.builtin.file": {"path": "{{ item }}", "state": "absent"}, "when": NOT_CHECK},
    ]


def undo_stop_tasks() -> list[dict]:
    """Rollback of a stop: the seat's files back where they were removed, and its engine started from them."""
    return [
        find_marks("stopped", "seatplan_stops", "{{ seatplan_files[:1] }}"),
        {"name": "{{ seat.name }}: its files now", "loop": "{{ seatplan_files }}", "loop_control": {"label": "{{ item.dest }}"},
         "ansible.builtin.stat": {"path": "{{ item.dest }}"}, "register": "seatplan_now", "when": "seatplan_stops.results[0].matched > 0"},
        find_marks("bak", "seatplan_backups"),
        {"name": "{{ seat.name }}: put back the files it left with", "loop": "{{ seatplan_backups.results }}", "loop_control": {"label": "{{ item.item.dest }}", "extended": True},
         "ansible.builtin.copy": {"src": "{{ (item.files | sort(attribute='mtime') | last).path }}", "dest": "{{ item.item.dest }}", "remote_src": True, "mode": "preserve"},
         "when": "seatplan_stops.results[0].matched > 0 and item.matched > 0 and not seatplan_now.results[ansible_loop.index0].stat.exists"},
        daemon_reload("seatplan_stops.results[0].matched > 0"),
        forget_pid("seatplan_stops.results[0].matched > 0"),
        shell("{{ seat.name }}: start it again", "{{ seatplan_restart_command }}", "seatplan_stops.results[0].matched > 0", register="seatplan_started"),
        health_wait("{{ seat.name }}: wait for /health before the next seat", "seatplan_started is changed"),
        {"name": "{{ seat.name }}: the stop is undone", "loop": "{{ seatplan_stops.results[0].files | map(attribute='path') | list }}",
         "ansible.builtin.file": {"path": "{{ item }}", "state": "absent"}, "when": NOT_CHECK},
    ]


def backup_tags() -> str:
    """Jinja: the tags of the marks found on the host (only names a tag may be, so the message stays plain)."""
    return ("seatplan_all_backups.files | map(attribute='path') | map('basename') "
            f"| map('regex_replace', '^.*[.]({'|'.join(MARKS)})-[0-9]{{8}}-', '') "
            f"| select('match', '^{TAG.pattern}$') | unique | sort")


def rollback_check_tasks() -> list[dict]:
    """Refuse a tag no backup on the host carries, naming the tags there (else rollback restores nothing, exit 0)."""
    return [
        {
            "name": "the backups on this host",
            "ansible.builtin.find": {"paths": "{{ seatplan_host_dir }}/env", "patterns": [f"*.env.{kind}-[0-9][0-9][0-9][0-9][0-9][0-9][0-9][0-9]-*" for kind in MARKS]},
            "register": "seatplan_all_backups",
        },
        {
            "name": "a backup tagged {{ seatplan_tag }} exists",
            "ansible.builtin.fail": {"msg": NO_BACKUPS + ": on {{ inventory_hostname }}; tags there: {{ (" + backup_tags() + ") | join(' ') or '(none)' }}"},
            "when": "seatplan_tag not in (" + backup_tags() + ")",
        },
    ]


def prepare_tasks() -> list[dict]:
    """The directories, the engine launcher and the systemd unit the restart command uses."""
    return [
        {"name": "seatplan directories", "loop": ["env", "compose", "bin", "run"],
         "ansible.builtin.file": {"path": "{{ seatplan_host_dir }}/{{ item }}", "state": "directory", "mode": "0755"}},
        {"name": "the engine launcher",
         "ansible.builtin.copy": {"src": "{{ seatplan_render_dir }}/" + ENGINE_LAUNCHER, "dest": "{{ seatplan_host_dir }}/" + ENGINE_LAUNCHER, "mode": "0755"}},
        {"name": "the engines' health check",
         "ansible.builtin.copy": {"src": "{{ seatplan_render_dir }}/" + HEALTH_CHECK, "dest": "{{ seatplan_host_dir }}/" + HEALTH_CHECK, "mode": "0755"}},
        {
            "name": "systemd unit",
            "ansible.builtin.copy": {"src": "{{ seatplan_render_dir }}/systemd/" + SYSTEMD_UNIT, "dest": SYSTEMD_DIR + "/" + SYSTEMD_UNIT, "mode": "0644"},
            "register": "seatplan_unit",
            "when": "seatplan_restart == 'systemd'",
        },
        daemon_reload("seatplan_unit is changed"),
    ]


def compose_file_tasks(restore: bool) -> list[dict]:
    """The host's compose.yaml (what a cold `docker compose up -d` boots, in boot order), written after the steps
    with a dated backup; rollback puts the tagged one back. The engines restart from their own files, not from it."""
    dest = "{{ seatplan_host_dir }}/compose.yaml"
    when = "seatplan_restart == 'compose' and inventory_hostname in seatplan_compose_files"
    if restore:
        return [
            {"name": "compose.yaml tagged {{ seatplan_tag }}", "ansible.builtin.find": {"paths": "{{ seatplan_host_dir }}", "patterns": "compose.yaml" + tagged("bak")},
             "register": "seatplan_compose_backup", "when": when},
            {"name": "put compose.yaml back", "when": f"{when} and seatplan_compose_backup.matched > 0",
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
    plays = [play("seatplan apply: prepare every host", prepare_tasks() + waits)]
    plays += [step_play(index, step, "step-stop.yaml" if step["action"] == "stop" else "step-start.yaml") for index, step in enumerate(steps)]
    plays.append(play("seatplan apply: the hosts' compose.yaml (a cold boot's file)", compose_file_tasks(restore=False)))
    return plays + gateway_plays(settings) + [verify_play()]


def rollback_plays(steps: list[dict]) -> list[dict]:
    """The apply's steps undone in reverse order: a start is stopped before the stop before it is started again."""
    plays = [play("seatplan rollback: the tag exists", rollback_check_tasks())]
    plays += [step_play(index, step, "undo-stop.yaml" if step["action"] == "stop" else "undo-start.yaml") for index, step in reversed(list(enumerate(steps)))]
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
        "ansible/rollback.yaml": header + dump_yaml(rollback_plays(steps)),
        "ansible/undo-start.yaml": header + dump_yaml(undo_start_tasks()),
        "ansible/undo-stop.yaml": header + dump_yaml(undo_stop_tasks()),
    }
    return out
