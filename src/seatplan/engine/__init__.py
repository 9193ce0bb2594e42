"""One engine codec: a planned seat's vLLM settings, its command line and env file, the one parser that
reads a command line back, and the URLs the engine answers on.

Every stage that starts, reaches or reads back a vLLM engine goes through here, so plan, render, observe,
usage and verify cannot drift apart on a flag, a default or an address.
"""

from seatplan.engine.command import DEFAULT_LAUNCHER, DEFAULT_PORT, MODULE_LAUNCHER, engine_command, shell_line
from seatplan.engine.endpoint import base_url, health_url, instance_label, url_host
from seatplan.engine.parse import parse_args, parse_env, yarn_override_factor
from seatplan.engine.settings import EngineHost, engine_settings, planned_engine_settings

__all__ = [
    "DEFAULT_LAUNCHER",
    "DEFAULT_PORT",
    "MODULE_LAUNCHER",
    "EngineHost",
    "base_url",
    "engine_command",
    "engine_settings",
    "health_url",
    "instance_label",
    "parse_args",
    "parse_env",
    "planned_engine_settings",
    "shell_line",
    "url_host",
    "yarn_override_factor",
]
