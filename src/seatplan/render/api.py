"""The render stage's steps on files: read a plan, render it, write or compare the result, run the playbooks."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TextIO

from seatplan.documents.io import read_plan
from seatplan.documents.plan import FLEET_CURRENT_LAYOUT, Plan
from seatplan.errors import SeatplanError
from seatplan.fileio import read_bounded_bytes
from seatplan.render.bundle import MANIFEST, manifest, render_files
from seatplan.render.diff import DiffReport, diff_trees
from seatplan.render.gateway_config import LiveConfig
from seatplan.render.runner import PlaybookRun, playbook_command, run_playbook
from seatplan.render.settings import KUBERNETES, TARGETS, RenderSettings, Target
from seatplan.render.targets import Files
from seatplan.render.writer import Staged, WriteResult, owned, read_manifest, read_tree, stage_render, write_render


@dataclass(frozen=True)
class LoadedPlan:
    plan: Plan
    path: Path
    text: str


def load_plan(path: Path) -> LoadedPlan:
    plan = read_plan(path)
    return LoadedPlan(plan, path, path.read_text(encoding="utf-8"))


def targets_from(names: Iterable[str]) -> list[Target]:
    chosen: list[Target] = []
    for name in names:
        if name == "all":
            return list(TARGETS)
        if name == KUBERNETES:
            chosen.append(KUBERNETES)
            continue
        if name not in TARGETS:
            raise SeatplanError(f"unknown target {name!r}", where="--target", fix=f"use one of: {', '.join(TARGETS)}, {KUBERNETES}, all")
        chosen.append(name)
    return chosen or list(TARGETS)


MAX_GATEWAY_CONFIG_BYTES = 1 << 20  # a LiteLLM config is a few kilobytes; a long model_list a few hundred


def live_gateway_config(settings: RenderSettings, plan: Plan) -> LiveConfig | None:
    """The gateway's config as it runs, where render runs beside it (``--gateway-config PATH``, else the fleet's
    ``gateway.config``, names a file here): the rendered config keeps all of it but the seats' routes. None where there
    is none here (render writes its own, and apply refuses to replace a live one render did not read)."""
    named = settings.gateway_config or plan.gateway_config
    if named is None:
        return None
    path = Path(named)
    if not path.exists():
        return None
    fix = "give --gateway-config the gateway's config.yaml (readable where render runs)"
    data = read_bounded_bytes(path, "LiteLLM config", fix, MAX_GATEWAY_CONFIG_BYTES)
    try:
        return LiveConfig(display=str(path), text=data.decode("utf-8"))
    except UnicodeDecodeError:
        raise SeatplanError("the LiteLLM config is not UTF-8 text", where=str(path), fix=fix) from None


def rendered(loaded: LoadedPlan, settings: RenderSettings, targets: Sequence[Target] = TARGETS, live: LiveConfig | None = None) -> Files:
    """The plan's files; a problem names the plan file and the seat (one in the live gateway config names its own)."""
    try:
        return render_files(loaded.plan, settings, targets, live)
    except SeatplanError as problem:
        if live is not None and problem.where and problem.where.startswith(live.display):
            raise
        where = f"{loaded.path} ({problem.where})" if problem.where else str(loaded.path)
        raise SeatplanError(problem.message, where=where, fix=problem.fix) from None


def render_to(loaded: LoadedPlan, settings: RenderSettings, targets: Sequence[Target], directory: Path) -> WriteResult:
    files = rendered(loaded, settings, targets, live_gateway_config(settings, loaded.plan))
    return write_render(directory, files, targets, manifest(loaded.text, settings, files))


def stage_to(loaded: LoadedPlan, settings: RenderSettings, targets: Sequence[Target], directory: Path) -> Staged:
    """The render apply runs from, built beside ``directory``; ``Staged.promote`` makes it ``directory`` once it landed."""
    files = rendered(loaded, settings, targets, live_gateway_config(settings, loaded.plan))
    return stage_render(directory, files, targets, manifest(loaded.text, settings, files))


def plan_sha256(loaded: LoadedPlan) -> str:
    """The plan's digest as the render manifest and the release records give it."""
    return hashlib.sha256(loaded.text.encode("utf-8")).hexdigest()


def settings_of(directory: Path) -> RenderSettings | None:
    document = read_manifest(directory)
    return document.settings if document else None


def diff_against(loaded: LoadedPlan, against: Path, settings: RenderSettings | None = None) -> DiffReport:
    """What rendering ``loaded`` would change against a rendered directory or an older plan."""
    if against.is_dir():
        settings = settings or settings_of(against) or RenderSettings()
        old = read_tree(against)
        if old and read_manifest(against) is None:
            # An empty directory is a new one (the diff is everything render would write); files without a
            # manifest are someone else's, and every line of the diff would be noise.
            raise SeatplanError(f"the directory holds files but no {MANIFEST}, so seatplan did not render it", where=str(against),
                                fix="pass the directory `seatplan render -o DIR` wrote, or an older plan.json")
        live = live_gateway_config(settings, loaded.plan)
        new = rendered(loaded, settings, rendered_targets(old), live)
        report = diff_trees(only_owned(old, new), new, str(against), live)
        report.warnings += blind_to_rollout(loaded, against, changed=report.changed)
        return report
    if not against.is_file():
        raise SeatplanError("nothing to compare with", where=str(against), fix="pass a directory `seatplan render` wrote, or an older plan.json")
    settings = settings or RenderSettings(plan_path=str(loaded.path))
    old_plan = load_plan(against)
    return diff_trees(rendered(old_plan, settings), rendered(loaded, settings), str(against))


def blind_to_rollout(loaded: LoadedPlan, directory: Path, *, changed: bool = True) -> list[str]:
    """A warning when a plan made without knowing what runs meets a rollout rendered from another plan (issue 18),
    or when a plan that counted moves from the fleet file's current_layout changes nothing here (issue 32: after a
    rollout the hand-written current_layout was stale, the plan said 4 moves, and diff said "nothing changes")."""
    rollout = read_manifest(directory)
    counted_from = loaded.plan.inputs.current_from
    if rollout is None:
        return []
    if counted_from == FLEET_CURRENT_LAYOUT:
        if changed or not loaded.plan.moves:
            return []
        return [f"the plan counts {loaded.plan.moves} move(s) from the fleet file's current_layout, yet against {directory} nothing "
                f"changes: the seats already run where it puts them, so current_layout is stale; update it, or plan with "
                f"`seatplan plan FLEET --current {directory}`"]
    if counted_from is not None:
        return []
    if rollout.plan_sha256 == plan_sha256(loaded):
        return []  # the rollout is this very plan's
    return [f"the plan was made without the current layout, but {directory} holds a rollout of another plan: it may move or "
            f"restart seats that need not; plan again with `seatplan plan FLEET --current {directory}`"]


def rendered_targets(tree: Files) -> list[Target]:
    """The targets a directory holds (all of them for an empty one)."""
    cluster = {path for path in tree if owned(path, [KUBERNETES]) and path != MANIFEST}
    if cluster and all(path in cluster or path == MANIFEST for path in tree):
        return [KUBERNETES]  # a directory rendered for a cluster only
    found = [target for target in TARGETS if any(owned(path, [target]) for path in tree)]
    return (found or list(TARGETS)) + ([KUBERNETES] if cluster else [])


def only_owned(old: Files, new: Files) -> Files:
    """The old files that a render writes (so a hand-made file in DIR is not reported as removed)."""
    top = {path.split("/", 1)[0] for path in new}
    return {path: text for path, text in old.items() if path.split("/", 1)[0] in top}


def default_tag(now: datetime | None = None) -> str:
    return (now or datetime.now(UTC)).strftime("%H%M%S")


def apply(directory: Path, inventory: Path, *, tag: str, check: bool, extra: Sequence[str], echo: TextIO | None) -> PlaybookRun:
    return run_playbook(playbook_command(directory / "ansible" / "playbook.yaml", inventory, tag=tag, check=check, extra=extra), echo=echo)


def rollback(directory: Path, inventory: Path, *, tag: str, check: bool, extra: Sequence[str], echo: TextIO | None) -> PlaybookRun:
    return run_playbook(playbook_command(directory / "ansible" / "rollback.yaml", inventory, tag=tag, check=check, extra=extra), echo=echo)
