"""Pure builder of the plays that roll out the gateway and the alerts after the engines, and roll them back.

The operator's night ended each rollout the same way: the LiteLLM config copied with a backup, the gateway
restarted, one short completion through it for every served model, and the alert rules checked and reloaded.
These plays do that, each change guarded so that a failure puts the previous file back before it stops:

- the gateway (``--gateway-config PATH`` on ``--gateway-host``): back up the config it replaces, copy the
  rendered one, restart the gateway (``--gateway-restart``) only when it changed, wait for
  ``/health/liveliness``, then a one-token completion for every served model, the master key read on the
  controller from its variable (never written, ``no_log``). A failed restart or completion restores the
  backup, restarts the gateway on it and fails naming the step;
- the alerts (``--prometheus-rules PATH`` on ``--prometheus-host``): the rendered rules are copied beside the
  live file and checked with ``promtool check rules`` before they replace it (backed up), then Prometheus
  reloads (``POST /-/reload`` on ``--prometheus-url``, or ``--prometheus-reload``) and must list the
  ``seatplan`` group; a failed reload restores the backup and reloads again.

Rollback puts the tagged backups of both back the same way. ``seatplan apply --no-gateway`` / ``--no-alerts``
leave either out.
"""

from __future__ import annotations

import hashlib

from seatplan.encode import Unsafe, ansible_unsafe
from seatplan.render.engines import Engine
from seatplan.render.settings import RenderSettings
from seatplan.render.tasks import OUT_OF_RENDER, url_wait_task

SMOKE_TIMEOUT_S = 120
# What a failed step's message starts with: `seatplan apply` names the step from it.
GATEWAY_FAILED = "seatplan-gateway-failed"
ALERTS_FAILED = "seatplan-alerts-failed"
BACKUP = "{{ seatplan_date }}-{{ seatplan_tag }}"


def gateway_variables(engines: list[Engine], settings: RenderSettings, gateway_text: str, rules_text: str, live_text: str | None = None) -> dict:
    """The variables of the gateway and alert plays (in vars.yaml beside the engines' ones); ``live_text``: the gateway
    config render merged the seats' routes into (None: render read none, and wrote seatplan's own)."""
    return {
        "seatplan_gateway_rollout": settings.gateway_config is not None,
        "seatplan_gateway_sha1": hashlib.sha1(gateway_text.encode("utf-8")).hexdigest(),
        "seatplan_gateway_live_sha1": hashlib.sha1(live_text.encode("utf-8")).hexdigest() if live_text is not None else "",
        "seatplan_rules_sha1": hashlib.sha1(rules_text.encode("utf-8")).hexdigest(),
        "seatplan_gateway_config": Unsafe(settings.gateway_config or ""),
        "seatplan_gateway_restart_command": Unsafe(settings.gateway_restart),
        "seatplan_gateway_url": Unsafe((settings.verify_gateway or "").rstrip("/")),
        "seatplan_gateway_key_env": settings.gateway_key_env,
        "seatplan_gateway_models": ansible_unsafe(sorted({engine.seat.served_model_name for engine in engines})),
        "seatplan_alerts_rollout": settings.prometheus_rules is not None,
        "seatplan_prometheus_rules": Unsafe(settings.prometheus_rules or ""),
        "seatplan_prometheus_url": Unsafe((settings.prometheus_url or "http://127.0.0.1:9090").rstrip("/")),
        "seatplan_prometheus_reload_command": Unsafe(settings.prometheus_reload or "true"),
        # booleans, not comparisons with '': Ansible reads an empty `!unsafe` scalar as null
        "seatplan_prometheus_reload_by_command": settings.prometheus_reload is not None,
        "seatplan_prometheus_read_back": settings.prometheus_url is not None,
        "seatplan_promtool": Unsafe(settings.promtool),
    }


def _play(name: str, host: str, tasks: list[dict]) -> dict:
    # A play's `hosts` is read before vars.yaml is: the host name is written here (a checked host name; `localhost`,
    # Ansible's implicit controller, by default).
    return {"name": name, "hosts": Unsafe(host), "gather_facts": False, "vars_files": ["vars.yaml"], "tasks": tasks}


def _backup(path: str, registered: str, rendered_sha1: str) -> list[dict]:
    """Stat the live file; copy it to PATH.bak-DATE-TAG when the rendered one differs."""
    return [
        {"name": f"the live {path}", "ansible.builtin.stat": {"path": "{{ " + path + " }}", "checksum_algorithm": "sha1"}, "register": registered},
        {
            "name": "dated backup of the file it replaces",
            "ansible.builtin.copy": {"src": "{{ " + path + " }}", "dest": "{{ " + path + " }}.bak-" + BACKUP, "remote_src": True, "mode": "preserve"},
            "when": f"{registered}.stat.exists and {registered}.stat.checksum != {rendered_sha1}",
        },
    ]


def _restore(path: str, registered: str, rendered_sha1: str, what: str) -> dict:
    """Put back the backup :func:`_backup` made before this change (a first rollout has none: nothing ran before it)."""
    return {
        "name": f"{what}: put the previous file back",
        "ansible.builtin.copy": {"src": "{{ " + path + " }}.bak-" + BACKUP, "dest": "{{ " + path + " }}", "remote_src": True, "mode": "preserve"},
        "when": f"{registered}.stat.exists and {registered}.stat.checksum != {rendered_sha1}",
    }


def gateway_health_task() -> dict:
    return url_wait_task("gateway: wait for /health/liveliness", "{{ seatplan_gateway_url }}/health/liveliness", "seatplan_gateway_health")


def gateway_smoke_tasks() -> list[dict]:
    """One completion of one token per served model, through the gateway, with its master key: the requests are never
    logged (``no_log``: they carry the key), so a second task fails naming each model that did not answer 200 and
    its status (names and numbers only)."""
    return [{
        # the name is templated before the loop defines `model` (Ansible: "'model' is undefined" on every apply):
        # it names the play's list instead
        "name": "gateway: one-token completion for {{ seatplan_gateway_models | join(', ') }}",
        "ansible.builtin.uri": {
            "url": "{{ seatplan_gateway_url }}/v1/chat/completions",
            "method": "POST",
            "body_format": "json",
            "body": {"model": "{{ model }}", "messages": [{"role": "user", "content": "ping"}], "max_tokens": 1},
            "headers": {"Authorization": "Bearer {{ lookup('env', seatplan_gateway_key_env) }}"},
            "status_code": 200,
            "timeout": SMOKE_TIMEOUT_S,
        },
        "loop": "{{ seatplan_gateway_models }}",
        "loop_control": {"loop_var": "model"},
        "register": "seatplan_smoke",
        "ignore_errors": True,
        "no_log": True,  # the request carries the master key
    }, {
        "name": "gateway: one-token completion for every served model answered 200",
        "ansible.builtin.fail": {"msg": "the gateway's smoke completion failed for "
                                 "{{ seatplan_smoke.results | selectattr('failed', 'defined') | selectattr('failed') "
                                 "| map(attribute='model') | map('string') | map('regex_replace', '[^A-Za-z0-9._:/@-]', '?') | join(', ') }} "
                                 "(HTTP {{ seatplan_smoke.results | selectattr('failed', 'defined') | selectattr('failed') "
                                 "| map(attribute='status', default='none') | map('string') | join(', ') }})"},
        "when": "seatplan_smoke is failed",
    }]


def gateway_restart_task() -> dict:
    return {"name": "gateway: restart", "ansible.builtin.shell": "{{ seatplan_gateway_restart_command }}", "args": OUT_OF_RENDER}


# what `stat` reports for the rendered file once written (lookup('file') would strip its last newline)
GATEWAY_SHA1 = "seatplan_gateway_sha1"
RULES_SHA1 = "seatplan_rules_sha1"


def live_config_check_task() -> dict:
    """The rendered config keeps all of the live one but the seats' routes: refuse to replace a live config that is not
    the one render read (edited since, or render ran where the file is not), whose other sections would be lost."""
    return {
        "name": "gateway: the live config is the one render read",
        "ansible.builtin.fail": {"msg": GATEWAY_FAILED + ": the step 'gateway: the live config is the one render read' failed on {{ inventory_hostname }}: "
                                 "{{ seatplan_gateway_config }} is not the file render merged the seats' routes into (it changed since, or render ran "
                                 "where it is not), and replacing it would drop its own sections and entries; nothing was changed: render again "
                                 "where the file is (seatplan render --gateway-config PATH reads it)"},
        "when": "seatplan_gateway_live.stat.exists and seatplan_gateway_live.stat.checksum not in [seatplan_gateway_sha1, seatplan_gateway_live_sha1]",
    }


def gateway_tasks() -> list[dict]:
    restore = _restore("seatplan_gateway_config", "seatplan_gateway_live", GATEWAY_SHA1, "gateway")
    backup = _backup("seatplan_gateway_config", "seatplan_gateway_live", GATEWAY_SHA1)
    return [{
        "name": "the LiteLLM gateway",
        "when": "seatplan_gateway_rollout | bool",
        "block": [backup[0], live_config_check_task(), *backup[1:],
            {
                "name": "gateway: write the config",
                "ansible.builtin.copy": {"src": "{{ seatplan_render_dir }}/litellm/config.yaml", "dest": "{{ seatplan_gateway_config }}", "mode": "0640"},
                "register": "seatplan_gateway_written",
            },
            {
                "name": "gateway: restart it on the new config, and a completion through it for every served model",
                "when": "not ansible_check_mode",
                "block": [
                    {**gateway_restart_task(), "when": "seatplan_gateway_written is changed"},
                    {**gateway_health_task(), "when": "seatplan_gateway_written is changed"},
                    *gateway_smoke_tasks(),
                ],
                "rescue": [
                    restore,
                    {**gateway_restart_task(), "when": "seatplan_gateway_written is changed"},
                    {**gateway_health_task(), "when": "seatplan_gateway_written is changed", "ignore_errors": True},
                    {"name": "gateway: stop here", "ansible.builtin.fail": {
                        "msg": GATEWAY_FAILED + ": the step '{{ ansible_failed_task.name }}' failed on {{ inventory_hostname }}; "
                        "{{ 'the previous config is back and the gateway restarted on it' if seatplan_gateway_written is changed and seatplan_gateway_live.stat.exists "
                        "else 'the config is unchanged' if seatplan_gateway_written is not changed else 'there was no config before this one' }}"}},
                ],
            },
        ],
    }]


def _reload_tasks() -> list[dict]:
    return [
        {"name": "alerts: Prometheus reloads (POST /-/reload)",
         "ansible.builtin.uri": {"url": "{{ seatplan_prometheus_url }}/-/reload", "method": "POST", "status_code": 200},
         "when": "not seatplan_prometheus_reload_by_command"},
        {"name": "alerts: Prometheus reloads (the given command)", "ansible.builtin.shell": "{{ seatplan_prometheus_reload_command }}",
         "when": "seatplan_prometheus_reload_by_command"},
    ]


def _rules_loaded_task() -> dict:
    return {
        "name": "alerts: Prometheus lists the seatplan group",
        "ansible.builtin.uri": {"url": "{{ seatplan_prometheus_url }}/api/v1/rules", "return_content": True},
        "register": "seatplan_prometheus_groups",
        "failed_when": "'seatplan' not in (seatplan_prometheus_groups.json.data.groups | map(attribute='name') | list)",
        "when": "seatplan_prometheus_read_back",
    }


def alert_tasks() -> list[dict]:
    candidate = "{{ seatplan_prometheus_rules }}.seatplan-new"
    restore = _restore("seatplan_prometheus_rules", "seatplan_rules_live", RULES_SHA1, "alerts")
    return [{
        "name": "the Prometheus alert rules",
        "when": "seatplan_alerts_rollout | bool",
        "block": [
            {"name": "alerts: the rendered rules beside the live file",
             "ansible.builtin.copy": {"src": "{{ seatplan_render_dir }}/prometheus/seatplan.rules.yaml", "dest": candidate, "mode": "0644"},
             "check_mode": False, "changed_when": False},
            {"name": "alerts: promtool check rules", "ansible.builtin.command": {"argv": ["{{ seatplan_promtool }}", "check", "rules", candidate]},
             "changed_when": False, "check_mode": False},
            *_backup("seatplan_prometheus_rules", "seatplan_rules_live", RULES_SHA1),
            {"name": "alerts: the checked rules in place",
             "ansible.builtin.copy": {"src": candidate, "dest": "{{ seatplan_prometheus_rules }}", "remote_src": True, "mode": "0644"},
             "register": "seatplan_rules_written"},
            {"name": "alerts: reload and check", "when": "seatplan_rules_written is changed and not ansible_check_mode",
             "block": [*_reload_tasks(), _rules_loaded_task()],
             "rescue": [
                 restore,
                 *[{**task, "ignore_errors": True} for task in _reload_tasks()],
                 {"name": "alerts: stop here", "ansible.builtin.fail": {
                     "msg": ALERTS_FAILED + ": the step '{{ ansible_failed_task.name }}' failed on {{ inventory_hostname }}; the previous rules are back"}},
             ]},
        ],
        "always": [{"name": "alerts: remove the candidate", "ansible.builtin.file": {"path": candidate, "state": "absent"}, "check_mode": False, "changed_when": False}],
    }]


def _rollback_file(path: str, what: str, restart: list[dict]) -> list[dict]:
    """Put PATH.bak-*-TAG (the newest) back and, when it changed the file, run ``restart``."""
    return [
        # the earliest undone release's backups hold the file as the release rolled back to left it
        {"name": f"{what}: backups tagged {{{{ seatplan_rollback_tag }}}}",
         "ansible.builtin.find": {"paths": "{{ " + path + " | dirname }}",
                                  "patterns": "{{ " + path + " | basename }}.bak-[0-9][0-9][0-9][0-9][0-9][0-9][0-9][0-9]-{{ seatplan_rollback_tag }}"},
         "register": "seatplan_found", "when": "seatplan_rollback_tag | length > 0"},
        {"name": f"{what}: put the newest one back",
         "ansible.builtin.copy": {"src": "{{ (seatplan_found.files | sort(attribute='mtime') | last).path }}", "dest": "{{ " + path + " }}",
                                  "remote_src": True, "mode": "preserve"},
         "when": "(seatplan_found.matched | default(0)) > 0", "register": "seatplan_put_back"},
        {"name": f"{what}: restart on it", "when": "seatplan_put_back is changed and not ansible_check_mode", "block": restart},
    ]


def gateway_files(settings: RenderSettings) -> dict[str, list[dict]]:
    """The plays, by file under ansible/: the playbook and rollback import them after the engines."""
    return {
        "ansible/gateway.yaml": [
            _play("seatplan apply: the LiteLLM gateway, then a completion through it for every served model", settings.gateway_host, gateway_tasks()),
            _play("seatplan apply: the Prometheus alert rules, checked and reloaded", settings.prometheus_host, alert_tasks()),
        ],
        "ansible/gateway-rollback.yaml": [
            _play("seatplan rollback: the gateway's config", settings.gateway_host, [{
                "name": "the LiteLLM gateway", "when": "seatplan_gateway_rollout | bool",
                "block": _rollback_file("seatplan_gateway_config", "gateway", [gateway_restart_task(), gateway_health_task(), *gateway_smoke_tasks()])}]),
            _play("seatplan rollback: the alert rules", settings.prometheus_host, [{
                "name": "the Prometheus alert rules", "when": "seatplan_alerts_rollout | bool",
                "block": _rollback_file("seatplan_prometheus_rules", "alerts", [*_reload_tasks(), _rules_loaded_task()])}]),
        ],
    }
