"""What a render is for, beyond the plan: launcher, restart command, keys' variable names, alert tolerances.

Saved beside the rendered files (``seatplan-render.json``) so ``seatplan diff --against DIR`` renders the
new plan the same way the directory was rendered.
"""

from __future__ import annotations

import re
from typing import Literal

from pydantic import BaseModel, Field, ValidationError, field_validator, model_validator

from seatplan.documents.fleet import RestartKind
from seatplan.documents.plan import Plan
from seatplan.encode import address_problem, control_character, name_problem
from seatplan.engine.command import DEFAULT_LAUNCHER
from seatplan.errors import SeatplanError
from seatplan.units import GiB

Target = Literal["env", "compose", "ansible", "litellm", "prometheus", "kubernetes"]
TARGETS: tuple[Target, ...] = ("env", "compose", "ansible", "litellm", "prometheus")
# Not in `all`: a cluster's manifests are another way to run the same plan, not a part of a host's rollout.
KUBERNETES: Target = "kubernetes"
DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
PROMETHEUS_DURATION = re.compile(r"(\d+(ms|[smhdwy]))+")
URL = re.compile(r"https?://[^\s'\"`\\{}<>]+")


class RenderSettings(BaseModel):
    launcher: list[str] | None = Field(
        None, description="the words before the model: `vllm serve` or `python -m vllm.entrypoints.openai.api_server`; None: each host's "
        "(the fleet's hosts[].launcher), else `vllm serve`"
    )
    bind_host: str | None = Field(None, description="--host for the engines (vLLM's default: every interface)")
    plan_path: str = Field("plan.json", description="the plan as the controller sees it (for `seatplan verify`)")
    # Ansible
    host_dir: str = Field("/etc/seatplan", description="where env files (env/) and compose.yaml live on each host")
    restart: RestartKind = "compose"
    restart_script: str | None = Field(None, description="restart=script: run as SCRIPT SEAT ENV_FILE on the host")
    health_timeout_s: int = Field(900, ge=1, description="how long apply waits for a restarted engine's /health")
    verify_gateway: str | None = Field(None, description="the LiteLLM gateway the closing `seatplan verify` also checks (key from gateway_key_env)")
    seatplan_command: str = Field("seatplan", description="how the controller runs seatplan, as a shell line (for the final verify)")
    # Compose
    image: str | None = Field(
        None, description="the engine image for compose.yaml; default: the fleet's policy.image, else the plan's vLLM version's image"
    )
    # LiteLLM: variable names only, never the keys
    gateway_key_env: str = Field("LITELLM_MASTER_KEY", description="variable holding the gateway's master key")
    engine_key_env: str | None = Field(None, description="variable holding the engines' --api-key, when they have one")
    # The gateway and the alerts, rolled out after the engines (render/gateway.py); off while their paths are unset
    gateway_config: str | None = Field(None, description="the LiteLLM config's path on the gateway host: apply copies the rendered one there "
                                       "(with a backup), restarts the gateway when it changed and sends a one-token completion for every served model")
    gateway_host: str = Field("localhost", description="the inventory host that runs the gateway (localhost: the controller)")
    gateway_restart: str = Field("systemctl restart litellm", description="the shell line that restarts the gateway on its host")
    prometheus_rules: str | None = Field(None, description="the alert rules' path on the Prometheus host (a file its rule_files reads): "
                                         "apply checks the rendered rules with promtool, puts them there (with a backup) and reloads Prometheus")
    prometheus_host: str = Field("localhost", description="the inventory host that runs Prometheus")
    prometheus_url: str | None = Field(None, description="Prometheus' URL: apply POSTs /-/reload there (--web.enable-lifecycle) and reads back /api/v1/rules")
    prometheus_reload: str | None = Field(None, description="a shell line that reloads Prometheus instead of POST /-/reload (systemctl reload prometheus)")
    promtool: str = Field("promtool", description="promtool on the Prometheus host")
    # Kubernetes (render/kubernetes.py): the namespace every object goes in, the Secret the engines' references name
    namespace: str = Field("seatplan", description="the Kubernetes namespace of the rendered objects (the operator creates it)")
    # Prometheus
    free_tolerance_bytes: int = Field(GiB, ge=0, description="alert when free GPU memory is this far below the planned spare")
    kv_usage_threshold: float = Field(0.9, gt=0, le=1)
    kv_usage_for: str = Field("30m", description="how long KV usage must stay above the threshold")
    free_memory_for: str = Field("15m")

    @field_validator("*")
    @classmethod
    def _plain_text(cls, value: object) -> object:
        """No setting may hold a control character: each reaches a shell, a YAML file or a unit file."""
        for text in value if isinstance(value, list) else [value]:
            bad = control_character(text) if isinstance(text, str) else None
            if bad is not None:
                raise ValueError(f"{text!r} holds the control character {bad}")
        return value

    @field_validator("host_dir", "gateway_config", "prometheus_rules")
    @classmethod
    def _absolute(cls, value: str | None) -> str | None:
        if value is not None and (not value.startswith("/") or "/../" in value + "/" or value.endswith("/")):
            raise ValueError(f"{value!r} is not an absolute path without `..` (a path on the host)")
        return value

    @field_validator("namespace")
    @classmethod
    def _namespace(cls, value: str) -> str:
        if not DNS_LABEL.fullmatch(value):
            raise ValueError(f"{value!r} is not a Kubernetes namespace name (1 to 63 lower-case letters, digits and `-`, "
                             "starting and ending with a letter or digit)")
        return value

    @field_validator("gateway_host", "prometheus_host")
    @classmethod
    def _inventory_host(cls, value: str) -> str:
        problem = name_problem("host name", value)
        if problem is not None:
            raise ValueError(problem)
        return value

    @model_validator(mode="after")
    def _reachable(self) -> RenderSettings:
        if self.gateway_config is not None and self.verify_gateway is None:
            raise ValueError("gateway_config needs the gateway's URL (--gateway-url) for the completion that checks it")
        if self.prometheus_rules is not None and self.prometheus_url is None and self.prometheus_reload is None:
            raise ValueError("prometheus_rules needs --prometheus-url (POST /-/reload) or --prometheus-reload COMMAND")
        return self

    @field_validator("verify_gateway", "prometheus_url")
    @classmethod
    def _url(cls, value: str | None) -> str | None:
        if value is not None and not URL.fullmatch(value):
            raise ValueError(f"{value!r} is not an http:// or https:// URL without spaces, quotes or braces")
        return value

    @field_validator("bind_host")
    @classmethod
    def _bind(cls, value: str | None) -> str | None:
        problem = address_problem(value) if value is not None else None
        if problem is not None:
            raise ValueError(problem)
        return value

    @field_validator("image")
    @classmethod
    def _image(cls, value: str | None) -> str | None:
        if value is None:
            return None
        if not value or any(char.isspace() for char in value):
            raise ValueError(f"{value!r} is not an image reference (no spaces)")
        return value

    @field_validator("kv_usage_for", "free_memory_for")
    @classmethod
    def _duration(cls, value: str) -> str:
        if not PROMETHEUS_DURATION.fullmatch(value):
            raise ValueError(f"{value!r} is not a Prometheus duration (30m, 1h30m)")
        return value


def host_launcher(settings: RenderSettings, plan: Plan, host: str) -> list[str]:
    """The words before the model in the host's env files (what systemd and script restarts run): ``--launcher``, else
    the host's own (``hosts[].launcher``, what adopt read off the box), else ``vllm serve``."""
    if settings.launcher is not None:
        return list(settings.launcher)
    planned = plan.hosts.get(host)
    return list(planned.launcher) if planned is not None and planned.launcher else list(DEFAULT_LAUNCHER)


def container_launcher(settings: RenderSettings) -> list[str]:
    """compose's entrypoint: ``--launcher``, else ``vllm serve`` (a host's launcher is a path on the host, not in the image)."""
    return list(settings.launcher) if settings.launcher is not None else list(DEFAULT_LAUNCHER)


def default_restart(plan: Plan) -> RestartKind:
    """``render --restart`` when it is not given: the mode every host that runs an engine names (``hosts[].restart``,
    what adopt read off the box), else compose."""
    engine_hosts = {seat.host for seat in plan.vllm_seats() if seat.host is not None}
    named = {planned.restart for host, planned in plan.hosts.items() if host in engine_hosts}
    only = named.pop() if len(named) == 1 else None
    unnamed = engine_hosts - {host for host, planned in plan.hosts.items() if planned.restart is not None}
    return only if only is not None and not unnamed else "compose"


def settings_error(error: ValidationError) -> SeatplanError:
    """The first bad render setting as the flag that sets it."""
    first = error.errors(include_url=False)[0]
    field = str(first["loc"][0]) if first["loc"] else str(first["msg"]).removeprefix("Value error, ").split(" ", 1)[0]
    message = str(first["msg"]).removeprefix("Value error, ")
    return SeatplanError(f"{field}: {message}", where=f"--{field.replace('_', '-')}", fix="see `seatplan render --help`")
