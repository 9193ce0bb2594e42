"""What a render is for, beyond the plan: launcher, restart command, keys' variable names, alert tolerances.

Saved beside the rendered files (``seatplan-render.json``) so ``seatplan diff --against DIR`` renders the
new plan the same way the directory was rendered.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from seatplan.engine.command import DEFAULT_LAUNCHER
from seatplan.units import GiB

Target = Literal["env", "compose", "ansible", "litellm", "prometheus"]
TARGETS: tuple[Target, ...] = ("env", "compose", "ansible", "litellm", "prometheus")
RestartKind = Literal["compose", "systemd", "script"]


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
