"""Pure builder of DIR/ansible/: an inventory, the variables, the rolling-restart playbook and its rollback.

The playbook goes host by host (``serial: 1``) and, on each host, seat by seat in boot order. For a seat
it writes the env file, first copying the file it replaces to ``<file>.bak-YYYYMMDD-<tag>``, and
restarts the engine only when the file changed, then waits for ``/health`` before the next seat. In
``--check --diff`` it shows each env file's diff and restarts nothing. The last play runs ``seatplan
verify`` on the controller.
"""

from __future__ import annotations

import hashlib
import ipaddress
import shlex

from seatplan.encode import TAG, Unsafe, ansible_unsafe, dump_yaml, systemd_path
from seatplan.render.engines import Engine, FixedSeat
from seatplan.render.gateway import gateway_files, gateway_variables
from seatplan.render.settings import RenderSettings
from seatplan.render.targets import HEADER, Files, compose_hosts, compose_path

HEALTH_POLL_S = 5
SYSTEMD_UNIT = "seatplan-vllm@.service"

# Run by Ansible's `shell`: every value is shell-quoted by Jinja's `quote` at the moment it is used, so a
# `-e seatplan_host_dir=...` override is quoted too (the rendered values are `!unsafe`, never templated).
RESTART_COMMANDS = {
    "compose": "docker compose -f {{ (seatplan_host_dir ~ '/compose.yaml') | quote }} up -d --no-deps --force-recreate {{ seat.name | quote }}",
    "systemd": "systemctl restart {{ ('seatplan-vllm@' ~ seat.name ~ '.service') | quote }}",
    "script": "{{ seatplan_restart_script | quote }} {{ seat.name | quote }} {{ (seatplan_host_dir ~ '/env/' ~ seat.name ~ '.env') | quote }}",
}
# The message rollback fails with when no backup carries the tag; `seatplan rollback` turns it into error/fix.
NO_BACKUPS = "seatplan-no-backups"


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


def variables(engines: list[Engine], env_texts: dict[str, str], settings: RenderSettings, fixed: list[FixedSeat] | None = None) -> dict:
    fixed = fixed or []
    hosts = sorted({engine.host for engine in engines})
    seats = {host: [seat_entry(engine, env_texts[engine.name]) for engine in engines if engine.host == host] for host in hosts}
    return {
        "seatplan_host_dir": Unsafe(settings.host_dir),
        "seatplan_render_dir": "{{ playbook_dir }}/..",
        "seatplan_tag": "seatplan",
        "seatplan_date": "{{ now(utc=true, fmt='%Y%m%d') }}",
        "seatplan_restart": settings.restart,
        "seatplan_restart_script": Unsafe(settings.restart_script or ""),
        "seatplan_restart_command": RESTART_COMMANDS[settings.restart],
        "seatplan_health_retries": max(1, settings.health_timeout_s // HEALTH_POLL_S),
        "seatplan_run_verify": True,
        "seatplan_verify_command": Unsafe(verify_command(settings)),
        "seatplan_compose_files": ansible_unsafe({host: compose_path(host, compose_hosts(engines, fixed)) for host in hosts}),
        "seatplan_seats": seats,
        # fixed seats with a health URL, per host: the engines wait for each before the first restarts (issue 18)
        "seatplan_fixed": ansible_unsafe({host: [{"name": item.name, "health_url": item.seat.health_url} for item in fixed if item.host == host and item.seat.health_url]
                                          for host in hosts}),
    }


def verify_command(settings: RenderSettings) -> str:
    words = ["verify", settings.plan_path]
    if settings.verify_gateway:
        words += ["--gateway", settings.verify_gateway, "--key-env", settings.gateway_key_env]
    return f"{settings.seatplan_command} {shlex.join(words)}"


def restart_tasks() -> list[dict]:
    """Restart the seat and wait for its /health: shared by the rollout and the rollback."""
    return [
        {
            "name": "{{ seat.name }}: restart",
            "ansible.builtin.shell": "{{ seatplan_restart_command }}",
            "when": "not ansible_check_mode",
        },
        {
            "name": "{{ seat.name }}: wait for /health before the next seat",
            "ansible.builtin.uri": {"url": "{{ seat.health_url }}", "status_code": 200},
            "register": "seatplan_health",
            "until": "seatplan_health.status == 200",
            "retries": "{{ seatplan_health_retries }}",
            "delay": HEALTH_POLL_S,
            "when": "not ansible_check_mode",
        },
    ]


def env_path(seat: str = "{{ seat.name }}") -> str:
    return "{{ seatplan_host_dir }}/env/" + seat + ".env"


def seat_tasks() -> list[dict]:
    return [
        {
            "name": "{{ seat.name }}: the env file now on the host",
            "ansible.builtin.stat": {"path": env_path(), "checksum_algorithm": "sha1"},
            "register": "seatplan_current",
        },
        {
            "name": "{{ seat.name }}: dated backup of the file it replaces",
            "ansible.builtin.copy": {
                "src": env_path(),
                "dest": env_path() + ".bak-{{ seatplan_date }}-{{ seatplan_tag }}",
                "remote_src": True,
                "mode": "preserve",
            },
            "when": "seatplan_current.stat.exists and seatplan_current.stat.checksum != seat.sha1",
        },
        {
            "name": "{{ seat.name }}: write the env file",
            "ansible.builtin.copy": {"src": "{{ seatplan_render_dir }}/env/{{ seat.name }}.env", "dest": env_path(), "mode": "0644"},
            "register": "seatplan_written",
        },
        {
            "name": "{{ seat.name }}: restart only if its file changed",
            "ansible.builtin.include_tasks": "restart.yaml",
            "when": "seatplan_written is changed",
        },
    ]


def backup_tags() -> str:
    """Jinja: the tags of the backups found on the host (only names a tag may be, so the message stays plain)."""
    return ("seatplan_all_backups.files | map(attribute='path') | map('basename') "
            "| map('regex_replace', '^.*[.]env[.]bak-[0-9]{8}-', '') "
            f"| select('match', '^{TAG.pattern}$') | unique | sort")


def rollback_check_tasks() -> list[dict]:
    """Refuse a tag no backup on the host carries, naming the tags there (else rollback restores nothing, exit 0)."""
    return [
        {
            "name": "the backups on this host",
            "ansible.builtin.find": {"paths": "{{ seatplan_host_dir }}/env", "patterns": "*.env.bak-[0-9][0-9][0-9][0-9][0-9][0-9][0-9][0-9]-*"},
            "register": "seatplan_all_backups",
        },
        {
            "name": "a backup tagged {{ seatplan_tag }} exists",
            "ansible.builtin.fail": {"msg": NO_BACKUPS + ": on {{ inventory_hostname }}; tags there: {{ (" + backup_tags() + ") | join(' ') or '(none)' }}"},
            "when": "seatplan_tag not in (" + backup_tags() + ")",
        },
    ]


def rollback_seat_tasks() -> list[dict]:
    return [
        {
            "name": "{{ seat.name }}: backups tagged {{ seatplan_tag }}",
            "ansible.builtin.find": {
                "paths": "{{ seatplan_host_dir }}/env",
                "patterns": "{{ seat.name }}.env.bak-[0-9][0-9][0-9][0-9][0-9][0-9][0-9][0-9]-{{ seatplan_tag }}",
            },
            "register": "seatplan_backups",
        },
        {
            "name": "{{ seat.name }}: put the newest one back",
            "ansible.builtin.copy": {
                "src": "{{ (seatplan_backups.files | sort(attribute='mtime') | last).path }}",
                "dest": env_path(),
                "remote_src": True,
                "mode": "preserve",
            },
            "when": "seatplan_backups.matched > 0",
            "register": "seatplan_written",
        },
        {
            "name": "{{ seat.name }}: restart only if its file changed",
            "ansible.builtin.include_tasks": "restart.yaml",
            "when": "seatplan_written is changed",
        },
    ]


def prepare_tasks() -> list[dict]:
    """The directories, and the compose file or systemd unit the restart command uses."""
    return [
        {"name": "seatplan directories", "ansible.builtin.file": {"path": "{{ seatplan_host_dir }}/env", "state": "directory", "mode": "0755"}},
        {
            "name": "compose file",
            "ansible.builtin.copy": {
                "src": "{{ seatplan_render_dir }}/{{ seatplan_compose_files[inventory_hostname] }}",
                "dest": "{{ seatplan_host_dir }}/compose.yaml",
                "mode": "0644",
            },
            "when": "seatplan_restart == 'compose'",
        },
        {
            "name": "systemd unit",
            "ansible.builtin.copy": {"src": "{{ seatplan_render_dir }}/systemd/" + SYSTEMD_UNIT, "dest": "/etc/systemd/system/" + SYSTEMD_UNIT, "mode": "0644"},
            "register": "seatplan_unit",
            "when": "seatplan_restart == 'systemd'",
        },
        {
            "name": "systemd reload",
            "ansible.builtin.systemd_service": {"daemon_reload": True},
            "when": "seatplan_restart == 'systemd' and seatplan_unit is changed and not ansible_check_mode",
        },
    ]


def play(name: str, tasks: list[dict]) -> dict:
    return {"name": name, "hosts": "all", "serial": 1, "gather_facts": False, "vars_files": ["vars.yaml"], "tasks": tasks}


def seats_loop(task_file: str) -> dict:
    return {
        "name": "seats one at a time, in boot order",
        "ansible.builtin.include_tasks": task_file,
        "loop": "{{ seatplan_seats[inventory_hostname] | default([]) }}",
        "loop_control": {"loop_var": "seat", "label": "{{ seat.name }}"},
    }


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
    return (
        HEADER
        + "[Unit]\nDescription=vLLM engine for seatplan seat %i\nAfter=network-online.target\n\n"
        + "[Service]\n"
        + f"EnvironmentFile={systemd_path(settings.host_dir, '--host-dir')}/env/%i.env\n"
        # `$$`: systemd passes `$SEATPLAN_COMMAND` to sh, which reads it from the environment; systemd's own
        # `$VAR` expansion would paste the value, quotes and all, into the sh -c script
        + "ExecStart=/bin/sh -c 'eval \"exec $$SEATPLAN_COMMAND\"'\n"
        + "Restart=on-failure\nTimeoutStopSec=60\n\n[Install]\nWantedBy=multi-user.target\n"
    )


def fixed_wait_task() -> dict:
    """The fixed seats boot first: wait for each one's health URL before restarting any engine on its host."""
    return {
        "name": "fixed seats: wait for their health URL before the engines",
        "ansible.builtin.uri": {"url": "{{ fixed.health_url }}", "status_code": 200},
        "register": "seatplan_fixed_health",
        "until": "seatplan_fixed_health.status == 200",
        "retries": "{{ seatplan_health_retries }}",
        "delay": HEALTH_POLL_S,
        "loop": "{{ seatplan_fixed[inventory_hostname] | default([]) }}",
        "loop_control": {"loop_var": "fixed", "label": "{{ fixed.name }}"},
        "when": "not ansible_check_mode",
    }


def ansible_files(engines: list[Engine], env_texts: dict[str, str], settings: RenderSettings, fixed: list[FixedSeat] | None = None,
                  gateway_texts: tuple[str, str] = ("", "")) -> Files:
    """``gateway_texts``: the rendered LiteLLM config and alert rules, which the gateway plays put in place after the engines."""
    header = HEADER
    waits = [fixed_wait_task()] if any(item.seat.health_url for item in fixed or []) else []
    gateway = {path: header + dump_yaml(plays) for path, plays in gateway_files(settings).items()}
    files = gateway | {
        "ansible/inventory.yaml": header + dump_yaml(inventory(engines)),
        "ansible/vars.yaml": header + dump_yaml(variables(engines, env_texts, settings, fixed) | gateway_variables(engines, settings, *gateway_texts)),
        "ansible/playbook.yaml": header + dump_yaml([
            play("seatplan apply: rolling restart, one engine at a time", prepare_tasks() + waits + [seats_loop("seat.yaml")]),
            {"import_playbook": "gateway.yaml"}, verify_play()]),
        "ansible/seat.yaml": header + dump_yaml(seat_tasks()),
        "ansible/restart.yaml": header + dump_yaml(restart_tasks()),
        "ansible/rollback.yaml": header + dump_yaml([play("seatplan rollback: the tagged backups back, one engine at a time",
                                                          rollback_check_tasks() + [seats_loop("rollback-seat.yaml")]),
                                                     {"import_playbook": "gateway-rollback.yaml"}]),
        "ansible/rollback-seat.yaml": header + dump_yaml(rollback_seat_tasks()),
    }
    if settings.restart == "systemd":
        files[f"systemd/{SYSTEMD_UNIT}"] = systemd_unit(settings)
    return files
