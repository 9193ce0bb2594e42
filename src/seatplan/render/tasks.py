"""Ansible tasks more than one playbook builds: the one "wait until a URL answers 200" task.

The engines' steps (render/ansible.py: a seat's /health, the fixed seats' health URLs) and the gateway's play
(render/gateway.py: /health/liveliness) all poll a URL the same way; what differs is passed in.
"""

from __future__ import annotations

HEALTH_POLL_S = 5  # seconds between polls where the playbook does not set seatplan_health_delay_s


# What a task starts runs from "/": Ansible runs a local task in the playbook's directory, and apply's playbook runs
# from a staging directory that a failed apply removes, so an engine or gateway started there lost its working
# directory (LiteLLM then answers 500: os.path.abspath fails in its guardrail import)
OUT_OF_RENDER = {"chdir": "/"}


def url_wait_task(name: str, url: str, register: str, *, delay: int | str = HEALTH_POLL_S, **more: object) -> dict:
    """Poll ``url`` until it answers 200, ``seatplan_health_retries`` times; ``more`` adds keys after these
    (``when``, ``loop``, ``ignore_errors``...) in the order given, so the rendered YAML keeps its key order."""
    return {
        "name": name,
        "ansible.builtin.uri": {"url": url, "status_code": 200},
        "register": register,
        "until": f"{register}.status == 200",
        "retries": "{{ seatplan_health_retries }}",
        "delay": delay,
        **more,
    }
