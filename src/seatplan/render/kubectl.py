"""Rolling a Kubernetes render out with ``kubectl``, in the plan's order: one seat's objects at a time (server-side apply),
``kubectl rollout status``, then the seat's ``/health`` through its Service, before the next start.

Every call names ``--context`` and is bounded twice: ``--request-timeout`` for each request kubectl sends, and a wall
clock deadline on the process. Each apply is recorded as a release (``DIR/kubernetes-releases/TAG/``: the manifests as
applied, in order, and ``release.json``); a seat whose rollout fails is put back to the last release's objects (or
removed, where it had none) and the rollout stops. ``rollback --to TAG`` applies a release's manifests again in reverse.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import yaml

from seatplan.documents.plan import Plan
from seatplan.encode import check_name
from seatplan.errors import SeatplanError
from seatplan.fileio import atomic_write_text
from seatplan.render.kubernetes import ALERTS_PATH, GATEWAY_PATH, ROOT, fixed_path, object_name, seat_path
from seatplan.render.settings import RenderSettings

RELEASES = "kubernetes-releases"
CURRENT = "CURRENT"  # the tag whose objects the cluster runs: what a failed step is put back to
REQUEST_TIMEOUT_S = 30  # one request to the API server
CALL_DEADLINE_S = 120  # one kubectl process that waits on nothing (apply, diff, delete, get)
HEALTH_TRIES = 10  # /health through the Service once the Deployment is available (its endpoints may lag a few seconds)
HEALTH_PAUSE_S = 3
FIELD_MANAGER = "seatplan"
Action = Literal["apply", "delete", "gateway", "alerts"]


@dataclass(frozen=True)
class ClusterStep:
    """One step on the cluster: apply a file (waiting for its Deployment where it has one) or delete a seat's objects."""

    action: Action
    seat: str | None
    path: str  # under DIR (kubernetes/...)
    deployment: str | None = None  # the Deployment to wait for
    port: int | None = None  # the Service port whose /health is asked


@dataclass
class Outcome:
    ok: bool
    tag: str
    steps: list[str] = field(default_factory=list)
    failed: str | None = None
    restored: str | None = None
    output: list[str] = field(default_factory=list)


def cluster_steps(plan: Plan, files: dict[str, str], *, alerts: bool = True) -> list[ClusterStep]:
    """The fixed seats' claims first, then the engines the rollout leaves as they are (in boot order: on a new cluster
    that is the cold boot; where they run, an unchanged apply changes nothing), then the rollout's steps in its order,
    then the gateway's config and the alerts."""
    steps: list[ClusterStep] = []
    ports = {seat.name: seat.port for seat in plan.vllm_seats()}
    for seat in sorted(plan.seats, key=lambda seat: seat.boot_order):
        if fixed_path(seat.name) in files:
            steps.append(ClusterStep("apply", seat.name, fixed_path(seat.name), deployment=object_name(seat.name)))
    rollout = plan.rollout.steps if plan.rollout is not None else []
    in_rollout = {step.seat for step in rollout}
    for seat in sorted(plan.vllm_seats(), key=lambda seat: seat.boot_order):
        if seat.name not in in_rollout and seat_path(seat.name) in files:
            steps.append(ClusterStep("apply", seat.name, seat_path(seat.name), deployment=object_name(seat.name), port=ports[seat.name]))
    for step in rollout:
        if step.action == "stop":
            steps.append(ClusterStep("delete", step.seat, seat_path(step.seat)))
        elif seat_path(step.seat) in files:
            steps.append(ClusterStep("apply", step.seat, seat_path(step.seat), deployment=object_name(step.seat), port=ports.get(step.seat)))
    steps.append(ClusterStep("gateway", None, GATEWAY_PATH))
    if alerts:
        steps.append(ClusterStep("alerts", None, ALERTS_PATH))
    return steps


# ----------------------------------------------------------------------------- kubectl


@dataclass(frozen=True)
class Kubectl:
    context: str
    namespace: str
    executable: str = "kubectl"
    echo: Callable[[str], None] | None = None

    def run(self, *args: str, deadline_s: float = CALL_DEADLINE_S) -> subprocess.CompletedProcess[str]:
        command = [self.executable, "--context", self.context, "--namespace", self.namespace, f"--request-timeout={REQUEST_TIMEOUT_S}s", *args]
        try:
            done = subprocess.run(command, capture_output=True, text=True, timeout=deadline_s, stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            return subprocess.CompletedProcess(command, 124, "", f"kubectl {' '.join(args[:2])} gave no answer in {deadline_s:.0f} s")
        if self.echo is not None:
            for line in (done.stdout + done.stderr).splitlines():
                self.echo(f"  {line}")
        return done


def find_kubectl() -> str:
    found = shutil.which("kubectl")
    if found is None:
        raise SeatplanError("kubectl is not installed", fix="install kubectl (https://kubernetes.io/docs/tasks/tools/) and give --context the cluster's context")
    return found


def apply_file(kubectl: Kubectl, path: Path) -> subprocess.CompletedProcess[str]:
    return kubectl.run("apply", "--server-side", f"--field-manager={FIELD_MANAGER}", "--force-conflicts", "-f", str(path))


def delete_seat(kubectl: Kubectl, seat: str, settings: RenderSettings) -> subprocess.CompletedProcess[str]:
    """The seat's Deployment, Service and claim template, by its label (a seat the new render no longer has has no file);
    waits until its pod has gone, so its claim's bytes are free before the next start."""
    return kubectl.run("delete", "deployment,service,resourceclaimtemplate", "-l", f"app.kubernetes.io/instance={object_name(seat)}",
                       "--ignore-not-found", "--wait=true", f"--timeout={settings.health_timeout_s}s", deadline_s=settings.health_timeout_s + 30)


def rollout_status(kubectl: Kubectl, deployment: str, settings: RenderSettings) -> subprocess.CompletedProcess[str]:
    return kubectl.run("rollout", "status", f"deployment/{deployment}", f"--timeout={settings.health_timeout_s}s", deadline_s=settings.health_timeout_s + 30)


def service_health(kubectl: Kubectl, service: str, settings: RenderSettings, pause: Callable[[float], None]) -> subprocess.CompletedProcess[str]:
    """``GET /health`` on the seat's Service through the API server's service proxy (what reaches a ClusterIP from outside)."""
    done = subprocess.CompletedProcess[str]([], 1, "", "")
    for attempt in range(HEALTH_TRIES):
        done = kubectl.run("get", "--raw", f"/api/v1/namespaces/{settings.namespace}/services/http:{service}:http/proxy/health")
        if done.returncode == 0:
            return done
        if attempt + 1 < HEALTH_TRIES:
            pause(HEALTH_PAUSE_S)
    return done


def diff_file(kubectl: Kubectl, path: Path) -> subprocess.CompletedProcess[str]:
    """``kubectl diff`` exits 0 with no difference, 1 with some, more on an error."""
    return kubectl.run("diff", "--server-side", f"--field-manager={FIELD_MANAGER}", "--force-conflicts", "-f", str(path))


# ----------------------------------------------------------------------------- releases


def releases_dir(directory: Path) -> Path:
    return directory / RELEASES


def current_tag(directory: Path) -> str | None:
    path = releases_dir(directory) / CURRENT
    return path.read_text(encoding="utf-8").strip() or None if path.is_file() else None


@dataclass(frozen=True)
class Release:
    tag: str
    applied: list[str]  # the files under kubernetes/, in the order they were applied
    ok: bool


def read_release(directory: Path, tag: str) -> Release:
    """A release's record: the order its files were applied in, whether it completed."""
    record = releases_dir(directory) / check_name("tag", tag, "--to") / "release.json"
    if not record.is_file():
        tags = sorted(path.name for path in releases_dir(directory).iterdir() if (path / "release.json").is_file()) if releases_dir(directory).is_dir() else []
        raise SeatplanError(f"no release tagged {tag} in {releases_dir(directory)}; tags there: {', '.join(tags) or 'none'}", where="--to",
                            fix="pass --to with one of the tags there (apply --tag names them)" if tags else "there is nothing to roll back to: apply records the releases")
    try:
        loaded = json.loads(record.read_text(encoding="utf-8"))
        applied = [str(path) for path in loaded["applied"]]
        if any(not path.startswith(f"{ROOT}/") or "/../" in f"/{path}/" for path in applied):
            raise ValueError("a path outside kubernetes/")
        return Release(tag=tag, applied=applied, ok=bool(loaded["ok"]))
    except (ValueError, KeyError, TypeError) as problem:
        raise SeatplanError(f"the release record is not one apply wrote ({problem})", where=str(record),
                            fix="roll back to another tag; apply writes a release.json per tag") from None


def record_release(directory: Path, tag: str, plan_sha256: str, applied: list[str], ok: bool) -> None:
    """The manifests as applied (copies under the tag, in the order of ``applied``) and the record; CURRENT names it when it completed."""
    target = releases_dir(directory) / tag
    for path in applied:
        (target / path).parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(target / path, (directory / path).read_text(encoding="utf-8"), backup=False)
    atomic_write_text(target / "release.json", json.dumps({"tag": tag, "plan_sha256": plan_sha256, "applied": applied, "ok": ok}, indent=2) + "\n", backup=False)
    if ok:
        atomic_write_text(releases_dir(directory) / CURRENT, tag + "\n", backup=False)


# ----------------------------------------------------------------------------- the rollout


def wait_for(kubectl: Kubectl, step: ClusterStep, settings: RenderSettings, pause: Callable[[float], None]) -> str | None:
    """Why the step's seat is not serving (None: its Deployment is available and /health answers through its Service)."""
    if step.deployment is None:
        return None
    status = rollout_status(kubectl, step.deployment, settings)
    if status.returncode != 0:
        return f"kubectl rollout status deployment/{step.deployment}: {(status.stderr or status.stdout).strip() or f'exit {status.returncode}'}"
    if step.port is None:
        return None  # a fixed seat's holder: its claim is allocated once its pod runs
    health = service_health(kubectl, step.deployment, settings, pause)
    if health.returncode != 0:
        return f"/health through Service {step.deployment}: {(health.stderr or health.stdout).strip() or f'exit {health.returncode}'}"
    return None


def restore(kubectl: Kubectl, directory: Path, step: ClusterStep, settings: RenderSettings, pause: Callable[[float], None]) -> str:
    """The failed seat's objects as the last completed release applied them, or none where that release had none."""
    previous = current_tag(directory)
    earlier = releases_dir(directory) / previous / step.path if previous else None
    if earlier is not None and earlier.is_file():
        applied = apply_file(kubectl, earlier)
        problem = (applied.stderr.strip() or f"exit {applied.returncode}") if applied.returncode != 0 else wait_for(kubectl, step, settings, pause)
        return f"put back as release {previous} applied it" + (f", which failed too: {problem}" if problem else "")
    if step.seat is None:
        return "nothing to put back (no earlier release)"
    delete_seat(kubectl, step.seat, settings)
    return "removed (no earlier release had it)"


def label(step: ClusterStep) -> str:
    return f"{step.action} {step.seat or step.path}"


def run_steps(kubectl: Kubectl, directory: Path, steps: list[ClusterStep], settings: RenderSettings, tag: str, plan_sha256: str | None,
              pause: Callable[[float], None], say: Callable[[str], None]) -> Outcome:
    """Each step in order; the first that fails is put back and ends the rollout. An apply's release is recorded either
    way (``plan_sha256`` None: a rollback, which records nothing new and makes its tag CURRENT when it completes)."""
    outcome = Outcome(ok=True, tag=tag)
    applied: list[str] = []
    for number, step in enumerate(steps, 1):
        name = f"step {number}/{len(steps)} ({label(step)})"
        say(name)
        outcome.steps.append(name)
        if step.action == "delete":
            assert step.seat is not None
            done = delete_seat(kubectl, step.seat, settings)
            problem = None if done.returncode == 0 else f"kubectl delete: {(done.stderr or done.stdout).strip() or f'exit {done.returncode}'}"
        else:
            done = apply_file(kubectl, directory / step.path)
            problem = None if done.returncode == 0 else f"kubectl apply: {(done.stderr or done.stdout).strip() or f'exit {done.returncode}'}"
            if problem is None:
                applied.append(step.path)
                problem = wait_for(kubectl, step, settings, pause)
        if problem is not None:
            outcome.ok, outcome.failed = False, f"{name}: {problem}"
            if step.action != "delete" and plan_sha256 is not None:
                outcome.restored = restore(kubectl, directory, step, settings, pause)
            break
    if plan_sha256 is not None:
        record_release(directory, tag, plan_sha256, applied, outcome.ok)
    elif outcome.ok:
        atomic_write_text(releases_dir(directory) / CURRENT, tag + "\n", backup=False)
    return outcome


def check_steps(kubectl: Kubectl, directory: Path, steps: list[ClusterStep], say: Callable[[str], None]) -> Outcome:
    """``--check``: what each step would change (``kubectl diff``), nothing applied, no release recorded."""
    outcome = Outcome(ok=True, tag="check")
    for number, step in enumerate(steps, 1):
        name = f"step {number}/{len(steps)} ({label(step)})"
        if step.action == "delete":
            say(f"{name}: would delete the objects of seat {step.seat}")
            continue
        done = diff_file(kubectl, directory / step.path)
        say(f"{name}: {'no change' if done.returncode == 0 else 'changes' if done.returncode == 1 else f'kubectl diff failed (exit {done.returncode})'}")
        outcome.output.append(done.stdout)
        if done.returncode > 1:
            outcome.ok, outcome.failed = False, f"{name}: {(done.stderr or done.stdout).strip()}"
            break
    return outcome


def rollback_steps(directory: Path, tag: str) -> list[ClusterStep]:
    """The seats the cluster runs now (CURRENT's release) that the tag had not, deleted first so their bytes are free;
    then the release's files applied again in reverse order (alerts and gateway first, the first engine last)."""
    applied = read_release(directory, tag).applied
    now = current_tag(directory)
    now_applied = read_release(directory, now).applied if now and now != tag else []
    gone = [path for path in now_applied if path.startswith(f"{ROOT}/seats/") and path not in applied]
    steps = [ClusterStep("delete", Path(path).stem, path) for path in gone]
    for path in reversed(applied):
        seat = Path(path).stem if path.startswith((f"{ROOT}/seats/", f"{ROOT}/fixed/")) else None
        action: Action = "apply" if seat is not None else ("alerts" if path == ALERTS_PATH else "gateway")
        port = port_of(releases_dir(directory) / tag / path) if path.startswith(f"{ROOT}/seats/") else None
        steps.append(ClusterStep(action, seat, f"{RELEASES}/{tag}/{path}", deployment=seat, port=port))
    return steps


def port_of(path: Path) -> int | None:
    """The Service port of a seat's recorded manifest (its /health is asked there)."""
    for document in yaml.safe_load_all(path.read_text(encoding="utf-8")):
        if isinstance(document, dict) and document.get("kind") == "Service":
            return int(document["spec"]["ports"][0]["port"])
    return None


def apply_to_cluster(plan: Plan, plan_sha256: str, directory: Path, settings: RenderSettings, *, context: str, tag: str, check: bool, alerts: bool,
                     say: Callable[[str], None], pause: Callable[[float], None]) -> Outcome:
    """``seatplan apply PLAN --target kubernetes``: DIR rendered for the cluster already (render_to), its steps run or checked."""
    files = {path.relative_to(directory).as_posix(): "" for path in (directory / ROOT).rglob("*.yaml")}
    steps = cluster_steps(plan, files, alerts=alerts)
    kubectl = Kubectl(context=context, namespace=settings.namespace, executable=find_kubectl(), echo=say)
    if check:
        return check_steps(kubectl, directory, steps, say)
    if (releases_dir(directory) / tag).exists():
        raise SeatplanError(f"a release tagged {tag} exists already", where="--tag", fix="give this apply a new --tag (rollback --to names the old one)")
    return run_steps(kubectl, directory, steps, settings, tag, plan_sha256, pause, say)


def rollback_cluster(directory: Path, settings: RenderSettings, *, context: str, tag: str, check: bool,
                     say: Callable[[str], None], pause: Callable[[float], None]) -> Outcome:
    steps = rollback_steps(directory, tag)
    kubectl = Kubectl(context=context, namespace=settings.namespace, executable=find_kubectl(), echo=say)
    if check:
        return check_steps(kubectl, directory, steps, say)
    return run_steps(kubectl, directory, steps, settings, tag, None, pause, say)
