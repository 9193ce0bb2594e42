"""A whole render in memory: the chosen targets' files plus the manifest that says how they were made."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable

from pydantic import BaseModel, ConfigDict

from seatplan.documents.plan import Plan
from seatplan.errors import SeatplanError
from seatplan.render.ansible import ansible_files
from seatplan.render.engines import fixed_seats, plan_engines
from seatplan.render.gateway_config import LiveConfig
from seatplan.render.kubernetes import kubernetes_files, kubernetes_warnings
from seatplan.render.settings import TARGETS, RenderSettings, Target
from seatplan.render.targets import (
    Files,
    compose_files,
    env_files,
    gateway_merge,
    litellm_config,
    open_engine_warnings,
    prometheus_rules,
    seat_compose_files,
    unreachable_route_warnings,
)

MANIFEST = "seatplan-render.json"


class RenderManifest(BaseModel):
    """``seatplan-render.json``: read back by diff and apply, so a hand-edited one is checked like any input."""

    model_config = ConfigDict(extra="forbid")
    plan_sha256: str
    settings: RenderSettings
    files: dict[str, str]


def render_files(plan: Plan, settings: RenderSettings, targets: Iterable[Target] = TARGETS, live: LiveConfig | None = None) -> Files:
    """Every file of the targets, keyed by its path under the output directory (errors before any file); ``live``: the
    gateway's config as it runs, which the LiteLLM config keeps all of but the seats' routes."""
    chosen = set(targets)
    engines = plan_engines(plan, settings)
    fixed = fixed_seats(plan)
    envs = env_files(engines, settings)
    files: Files = {}
    if "env" in chosen or "ansible" in chosen:  # the playbook ships the env files
        files |= envs
    # An engine image is needed only where compose runs the engines: with --restart systemd or script, compose.yaml is
    # no step's file, and it is written only when an image is known (issue 50: "no known engine image" stopped a
    # systemd render of a vLLM 0.11 plan)
    imaged = all(engine.image is not None for engine in engines)
    if "compose" in chosen and settings.restart == "compose" and not imaged:
        raise no_image(plan)
    if "compose" in chosen and imaged:
        files |= compose_files(engines, settings, fixed) | seat_compose_files(engines, settings)
    elif "ansible" in chosen and settings.restart == "compose" and imaged:
        files |= seat_compose_files(engines, settings)  # what apply recreates each seat from
    gateway, rules = litellm_config(engines, settings, live), prometheus_rules(plan, engines, settings)
    if "ansible" in chosen:
        gateway_texts = (gateway["litellm/config.yaml"], rules["prometheus/seatplan.rules.yaml"], live.text if live is not None else None)
        files |= ansible_files(plan, engines, files, settings, fixed, gateway_texts)
    if "litellm" in chosen:
        files |= gateway
    if "prometheus" in chosen:
        files |= rules
    if "kubernetes" in chosen:  # the cluster pulls the image: it must be known, as for compose
        if not imaged:
            raise no_image(plan)
        files |= kubernetes_files(plan, engines, fixed, settings, live)
    return files


def render_warnings(plan: Plan, settings: RenderSettings, targets: Iterable[Target] = TARGETS, live: LiveConfig | None = None) -> list[str]:
    """What render says on stderr about what it wrote: engines open to the network without a key, engines bound where
    the gateway does not reach them, a live gateway config whose comments could not be kept, and a compose.yaml left
    out for want of an engine image (a systemd or script restart runs none)."""
    engines = plan_engines(plan, settings)
    merged = gateway_merge(engines, settings, live)
    warnings = open_engine_warnings(engines, settings) + unreachable_route_warnings(engines, settings) + (merged.warnings if merged is not None else [])
    if "kubernetes" in targets:
        warnings += kubernetes_warnings(plan, engines, fixed_seats(plan))
    if "compose" in targets and settings.restart != "compose" and any(engine.image is None for engine in engines):
        warnings.append(f"compose.yaml not written: no known engine image for vLLM {plan.inputs.vllm_version}, and --restart {settings.restart} "
                        "runs none (pass --image IMAGE, or set policy.image in the fleet file, for a compose file to cold-boot from)")
    return warnings


def no_image(plan: Plan) -> SeatplanError:
    return SeatplanError(
        f"no known engine image for vLLM {plan.inputs.vllm_version} (the plan's numbers are for that version)", where="policy.vllm_version",
        fix="set policy.image in the fleet file (e.g. vllm/vllm-openai:vX.Y.Z of that release) and plan again, or pass --image",
    )


def manifest(plan_text: str, settings: RenderSettings, files: Files) -> str:
    document = {
        "plan_sha256": hashlib.sha256(plan_text.encode("utf-8")).hexdigest(),
        "settings": settings.model_dump(mode="json"),
        "files": {path: hashlib.sha256(text.encode("utf-8")).hexdigest() for path, text in sorted(files.items())},
    }
    return json.dumps(document, indent=2) + "\n"
