"""What a render is for, beyond the plan: launcher, restart command, keys' variable names, alert tolerances.

Saved beside the rendered files (``seatplan-render.json``) so ``seatplan diff --against DIR`` renders the
new plan the same way the directory was rendered.
"""

from __future__ import annotations

import re
from typing import Literal

from pydantic import BaseModel, Field, ValidationError, field_validator

from seatplan.encode import address_problem, control_character
from seatplan.engine.command import DEFAULT_LAUNCHER
from seatplan.errors import SeatplanError
from seatplan.units import GiB

Target = Literal["env", "compose", "ansible", "litellm", "prometheus"]
TARGETS: tuple[Target, ...] = ("env", "compose", "ansible", "litellm", "prometheus")
RestartKind = Literal["compose", "systemd", "script"]
PROMETHEUS_DURATION = re.compile(r"(\d+(ms|[smhdwy]))+")
URL = re.compile(r"https?://[^\s'\"`\\{}<>]+")


class RenderSettings(BaseModel):
    launcher: list[str] = Field(
        default_factory=lambda: list(DEFAULT_LAUNCHER), description="the words before the model: `vllm serve` or `python -m vllm.entrypoints.openai.api_server`"
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

    @field_validator("host_dir")
    @classmethod
    def _absolute(cls, value: str) -> str:
        if not value.startswith("/") or "/../" in value + "/":
            raise ValueError(f"{value!r} is not an absolute path without `..` (the directory on each host)")
        return value

    @field_validator("verify_gateway")
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


def settings_error(error: ValidationError) -> SeatplanError:
    """The first bad render setting as the flag that sets it."""
    first = error.errors(include_url=False)[0]
    field = str(first["loc"][0]) if first["loc"] else "settings"
    message = str(first["msg"]).removeprefix("Value error, ")
    return SeatplanError(f"{field}: {message}", where=f"--{field.replace('_', '-')}", fix="see `seatplan render --help`")
