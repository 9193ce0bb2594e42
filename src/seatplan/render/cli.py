"""``seatplan render``, ``diff``, ``apply`` and ``rollback``.

Only Typer is imported at load time; the render modules are imported inside the commands.
"""

from __future__ import annotations

import shlex
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from seatplan.clihelp import add_command
from seatplan.numeric_options import count_option, size_option

if TYPE_CHECKING:
    from collections.abc import Callable

    from seatplan.documents.plan import Plan
    from seatplan.render.api import LoadedPlan
    from seatplan.render.kubectl import Outcome
    from seatplan.render.runner import PlaybookRun
    from seatplan.render.settings import RenderSettings

EXIT_PLAYBOOK_FAILED = 1
EXIT_DIFF_CHANGES = 1  # `seatplan diff`: something would change (0: nothing would)

PLAN_ARGUMENT = typer.Argument(..., metavar="PLAN", help="a plan saved with `seatplan plan FLEET -o plan.json`")
LAUNCHER = typer.Option(None, "--launcher", help="the words before the model: `vllm serve`, or `PYTHON -m vllm.entrypoints.openai.api_server` for the PyPI CPU build "
                        "(default: each host's hosts[].launcher, else `vllm serve`)")
BIND_HOST = typer.Option(None, "--bind", help="--host for the engines (default: vLLM's, every interface)")
RESTART = typer.Option(None, "--restart", help="how a host restarts one engine: compose, systemd or script (default: the mode the fleet's hosts[].restart "
                       "names for every engine host, else compose)")
RESTART_SCRIPT = typer.Option(None, "--restart-script", help="with --restart script: the host runs SCRIPT SEAT ENV_FILE")
HOST_DIR = typer.Option("/etc/seatplan", "--host-dir", help="where env files and compose.yaml live on each host")
IMAGE = typer.Option(None, "--image", help="the engine image in compose.yaml (default: the host's hosts[].image, else policy.image, else the plan's vLLM "
                     "version's vllm/vllm-openai tag)")
GATEWAY_KEY_ENV = typer.Option("LITELLM_MASTER_KEY", "--gateway-key-env", help="variable that holds the gateway's master key")
ENGINE_KEY_ENV = typer.Option(None, "--engine-key-env", help="variable that holds the engines' API key, if they have one")
FREE_TOLERANCE = typer.Option("1GiB", "--free-tolerance", parser=size_option("--free-tolerance", minimum=0, example="1GiB"), metavar="<size>",
                              help="alert when a GPU's free memory is this far below the planned spare")
VERIFY_GATEWAY = typer.Option(None, "--gateway-url", "--verify-gateway",
                              help="the LiteLLM gateway's URL: apply's smoke completions and the closing `seatplan verify` go through it")
GATEWAY_CONFIG = typer.Option(None, "--gateway-config", metavar="PATH",
                              help="the LiteLLM config's path on the gateway host: where it exists where render runs, the rendered one keeps "
                              "all of it but the seats' routes; apply puts it there (backed up), restarts the gateway and smoke-tests every served model")
GATEWAY_HOST = typer.Option("localhost", "--gateway-host", metavar="HOST", help="the inventory host that runs the gateway (default: the controller)")
GATEWAY_RESTART = typer.Option("systemctl restart litellm", "--gateway-restart", metavar="COMMAND", help="the shell line that restarts the gateway there")
PROMETHEUS_RULES = typer.Option(None, "--prometheus-rules", metavar="PATH",
                                help="the alert rules' path on the Prometheus host: apply checks them with promtool, puts them there (backed up) and reloads Prometheus")
PROMETHEUS_HOST = typer.Option("localhost", "--prometheus-host", metavar="HOST", help="the inventory host that runs Prometheus (default: the controller)")
PROMETHEUS_URL = typer.Option(None, "--prometheus-url", metavar="URL",
                              help="Prometheus' URL: POST /-/reload there (needs --web.enable-lifecycle), then its /api/v1/rules must list the rules")
PROMETHEUS_RELOAD = typer.Option(None, "--prometheus-reload", metavar="COMMAND", help="a shell line that reloads Prometheus instead of POST /-/reload")
PROMTOOL = typer.Option("promtool", "--promtool", metavar="PATH", help="promtool on the Prometheus host")
JSON_OUTPUT = typer.Option(False, "--json", help="print one JSON document")
HEALTH_TIMEOUT_PARSER = count_option("--health-timeout", maximum=7 * 24 * 3600, example="900")  # a week: beyond it, a slip of the unit
HEALTH_TIMEOUT_DIR_HELP_SUFFIX = "; default: DIR's render setting (900)"
HEALTH_TIMEOUT_HELP = ("seconds each step waits for the engine it started to own its port and answer /health 200 "
                       "(an engine that exits fails the step at once)")
HEALTH_TIMEOUT_DIR_HELP = HEALTH_TIMEOUT_HELP + HEALTH_TIMEOUT_DIR_HELP_SUFFIX


TARGET_OPTION = typer.Option("hosts", "--target", metavar="<target>", help="hosts (ansible-playbook, the default) or kubernetes (kubectl; docs/kubernetes.md)")
CONTEXT_OPTION = typer.Option(None, "--context", metavar="NAME", help="--target kubernetes: the kubeconfig context kubectl talks to")


def register(app: typer.Typer) -> None:
    add_command(app, "render", render_command)
    add_command(app, "diff", diff_command)
    add_command(app, "apply", apply_command)
    add_command(app, "rollback", rollback_command)


def build_settings(
    plan_path: Path,
    launcher: str | None,
    bind_host: str | None,
    restart: str,
    restart_script: str | None,
    host_dir: str,
    image: str | None,
    gateway_key_env: str,
    engine_key_env: str | None,
    free_tolerance_bytes: int,
    verify_gateway: str | None,
    rollout: dict[str, str | None] | None = None,
    health_timeout_s: int = 900,
) -> RenderSettings:
    """``rollout``: the gateway and alert settings (RenderSettings' gateway_* and prometheus_* fields) as given."""
    from pydantic import ValidationError

    from seatplan.errors import SeatplanError
    from seatplan.render.settings import RenderSettings, settings_error
    from seatplan.secrets import check_environment_name

    check_environment_name(gateway_key_env, "--gateway-key-env")
    if engine_key_env is not None:
        check_environment_name(engine_key_env, "--engine-key-env")
    if restart == "script" and not restart_script:
        raise SeatplanError("--restart script needs --restart-script PATH", where="--restart-script", fix="name the script each host runs as SCRIPT SEAT ENV_FILE")
    try:
        words = shlex.split(launcher) if launcher is not None else None
    except ValueError as problem:
        raise SeatplanError(f"--launcher {launcher!r} is not a shell line: {problem}", where="--launcher", fix="balance the quotes in --launcher") from None
    try:
        return RenderSettings(
            launcher=words,
            bind_host=bind_host,
            plan_path=str(plan_path.resolve()),
            restart=restart,
            restart_script=restart_script,
            host_dir=host_dir,
            image=image,
            gateway_key_env=gateway_key_env,
            engine_key_env=engine_key_env,
            free_tolerance_bytes=free_tolerance_bytes,
            seatplan_command=shlex.join([sys.executable, "-m", "seatplan.cli"]),
            verify_gateway=verify_gateway,
            health_timeout_s=health_timeout_s,
            **{key: value for key, value in (rollout or {}).items() if value is not None},
        )
    except ValidationError as error:
        raise settings_error(error) from None


def render_command(
    plan_file: Path = PLAN_ARGUMENT,
    target: list[str] = typer.Option(["all"], "--target", "-t", metavar="<target>", help="env, compose, ansible, litellm, prometheus or all; kubernetes apart; repeatable"),
    output: Path = typer.Option(..., "-o", "--output", help="the directory to render into (replaced whole, atomically)"),
    launcher: str | None = LAUNCHER,
    bind_host: str | None = BIND_HOST,
    restart: str | None = RESTART,
    restart_script: str | None = RESTART_SCRIPT,
    host_dir: str = HOST_DIR,
    image: str | None = IMAGE,
    gateway_key_env: str = GATEWAY_KEY_ENV,
    engine_key_env: str | None = ENGINE_KEY_ENV,
    free_tolerance: int = FREE_TOLERANCE,
    verify_gateway: str | None = VERIFY_GATEWAY,
    gateway_config: str | None = GATEWAY_CONFIG,
    gateway_host: str = GATEWAY_HOST,
    gateway_restart: str = GATEWAY_RESTART,
    prometheus_rules: str | None = PROMETHEUS_RULES,
    prometheus_host: str = PROMETHEUS_HOST,
    prometheus_url: str | None = PROMETHEUS_URL,
    prometheus_reload: str | None = PROMETHEUS_RELOAD,
    promtool: str = PROMTOOL,
    health_timeout: int = typer.Option(900, "--health-timeout", parser=HEALTH_TIMEOUT_PARSER, metavar="SECONDS", help=HEALTH_TIMEOUT_HELP),
    namespace: str = typer.Option("seatplan", "--namespace", metavar="NAME", help="--target kubernetes: the namespace of every object (you create it)"),
    json_output: bool = JSON_OUTPUT,
) -> None:
    """Write env files, compose.yaml, the Ansible playbook, the LiteLLM config and Prometheus rules for a plan."""
    from seatplan.output import error_console
    from seatplan.render.api import live_gateway_config, load_plan, render_to, targets_from
    from seatplan.render.bundle import render_warnings
    from seatplan.render.settings import default_restart

    loaded = load_plan(plan_file)
    rollout = {"gateway_config": gateway_config, "gateway_host": gateway_host, "gateway_restart": gateway_restart, "prometheus_rules": prometheus_rules,
               "prometheus_host": prometheus_host, "prometheus_url": prometheus_url, "prometheus_reload": prometheus_reload, "promtool": promtool,
               "namespace": namespace}
    restart = restart or default_restart(loaded.plan)  # the fleet's hosts[].restart, where every engine host names one
    settings = build_settings(plan_file, launcher, bind_host, restart, restart_script, host_dir, image, gateway_key_env, engine_key_env, free_tolerance,
                              verify_gateway, rollout, health_timeout)
    targets = targets_from(target)
    result = render_to(loaded, settings, targets, output)
    warnings = render_warnings(loaded.plan, settings, targets, live_gateway_config(settings, loaded.plan))
    for warning in warnings:
        error_console().print(f"[bold yellow]warning:[/] {warning}", markup=True, soft_wrap=True, highlight=False)
    if json_output:
        from seatplan.output import emit_json

        emit_json({"directory": str(result.directory), "changed": result.changed, "removed": result.removed, "backup": str(result.backup) if result.backup else None,
                   "warnings": warnings})
        return
    from seatplan.output import console

    out = console()
    if not result.changed and not result.removed:
        out.print(f"{output}: already up to date")
        return
    for path in result.changed:
        out.print(f"wrote {output / path}")
    for path in result.removed:
        out.print(f"removed {output / path}")
    if result.backup:
        out.print(f"the previous render is kept in {result.backup}")


def diff_command(
    plan_file: Path = PLAN_ARGUMENT,
    against: Path = typer.Option(..., "--against", help="a directory `seatplan render` wrote, or an older plan.json"),
    json_output: bool = JSON_OUTPUT,
) -> None:
    """Seat by seat, what rendering PLAN would change and which engines apply restarts, before anything is written.

    Exits 1 when anything would change and 0 when nothing would (as `git diff --exit-code`)."""
    from seatplan.output import error_console
    from seatplan.render.api import diff_against, load_plan

    report = diff_against(load_plan(plan_file), against)
    for warning in report.warnings:
        error_console().print(f"[bold yellow]warning:[/] {warning}", markup=True, soft_wrap=True, highlight=False)
    if json_output:
        from seatplan.output import emit_json

        emit_json(report)
    else:
        from seatplan.output import console
        from seatplan.render.show import print_diff

        print_diff(console(), report)
    if report.changed:
        raise typer.Exit(EXIT_DIFF_CHANGES)


def apply_command(
    plan_file: Path = PLAN_ARGUMENT,
    inventory: Path | None = typer.Option(None, "--inventory", "-i", help="the Ansible inventory (host names as in the fleet file); needed but with --target kubernetes"),
    check: bool = typer.Option(False, "--check", help="ansible-playbook --check --diff (kubectl diff per step with --target kubernetes): show what would change, restart nothing"),
    tag: str | None = typer.Option(None, "--tag", help="names the backups (<file>.bak-YYYYMMDD-TAG); default: the time, HHMMSS"),
    output: Path | None = typer.Option(None, "-o", "--output", help="the rendered directory (default: PLAN's directory/rendered), rendered again with its own settings"),
    extra: list[str] = typer.Option([], "-e", "--extra-vars", metavar="<KEY=VALUE>", help="KEY=VALUE passed to ansible-playbook; repeatable"),
    fleet: Path | None = typer.Option(None, "--fleet", help="the fleet file the plan's inputs are checked against (default: the one it was made from)"),
    force: bool = typer.Option(False, "--force", help="apply even a plan whose inputs changed, that no longer fits, or that names other hosts (says what it overrode)"),
    no_gateway: bool = typer.Option(False, "--no-gateway", help="leave the gateway's config, restart and smoke test out of this rollout"),
    no_alerts: bool = typer.Option(False, "--no-alerts", help="leave the Prometheus alert rules out of this rollout"),
    health_timeout: int | None = typer.Option(None, "--health-timeout", parser=HEALTH_TIMEOUT_PARSER, metavar="SECONDS", help=HEALTH_TIMEOUT_DIR_HELP),
    restart_seats: list[str] = typer.Option([], "--restart", metavar="SEAT", help="restart this seat's engine even if nothing about it changed; repeatable"),
    target: str = TARGET_OPTION,
    context: str | None = CONTEXT_OPTION,
    json_output: bool = JSON_OUTPUT,
) -> None:
    """Render PLAN again into DIR, then roll it out with ansible-playbook: changed seats only, one engine at a time, then verify."""
    from seatplan.encode import check_name
    from seatplan.output import error_console
    from seatplan.render.api import apply, blind_to_rollout, default_tag, load_plan, plan_sha256, settings_of, stage_to
    from seatplan.render.runner import extra_vars
    from seatplan.render.settings import TARGETS, RenderSettings, default_restart

    extra_vars(extra)  # a bad -e or --tag is refused before anything is rendered
    tag = check_name("tag", default_tag() if tag is None else tag, "--tag")
    inventory = hosts_or_cluster(target, context, inventory)
    loaded = load_plan(plan_file)
    overridden = guard_apply(loaded.plan, plan_file, fleet, inventory, force=force)
    if inventory is None:
        assert context is not None
        apply_kubernetes(loaded, output or plan_file.resolve().parent / "rendered", context, tag, check=check, no_alerts=no_alerts,
                         health_timeout=health_timeout, json_output=json_output, overridden=overridden)
        return
    directory = output or plan_file.resolve().parent / "rendered"
    for warning in blind_to_rollout(loaded, directory):
        error_console().print(f"[bold yellow]warning:[/] {warning}", markup=True, soft_wrap=True, highlight=False)
    # `seatplan render` chose the launcher, restart command and the rest; apply keeps them
    settings = (settings_of(directory) or RenderSettings(restart=default_restart(loaded.plan))).model_copy(update={"plan_path": str(plan_file.resolve())})
    if health_timeout is not None:
        settings = settings.model_copy(update={"health_timeout_s": health_timeout})
    extra = [*extra, *left_out(no_gateway, no_alerts), *forced_restarts(loaded.plan, settings, restart_seats)]
    # the render runs from a staging directory beside DIR; DIR takes it only once the release landed, so after a failed
    # apply `diff --against DIR` and `plan --current DIR` still describe what runs
    staged = stage_to(loaded, settings, list(TARGETS), directory)
    promoted = False
    try:
        # --check: the playbook's own output stays out of the way of the table (its --diff is in --json's output)
        run = apply(staged.staging, inventory, tag=tag, check=check, extra=[*extra, f"seatplan_plan_sha256={plan_sha256(loaded)}"],
                    echo=None if json_output or check else sys.stdout)
        if run.returncode == 0 and not check:
            staged.promote()
            promoted = True
    finally:
        if not promoted:
            staged.discard()
    if check:
        finish_check(run, loaded.plan, json_output, overridden)
        return
    if run.returncode != 0:
        error_console().print(f"{directory} is left as it was: it holds the last release that landed", highlight=False, soft_wrap=True)
    finish(run, json_output, overridden)


def finish_check(run: PlaybookRun, plan: Plan, json_output: bool, overridden: list[str]) -> None:
    """``apply --check``: the table of what runs (render/show.py ``print_observed``); exit 0 when the check ran and
    no seat's port or GPU is held by a stranger, 1 when one is (apply would refuse, or fail that step) or the playbook failed."""
    from seatplan.render.runner import observed, refused_before

    rows = observed(run)
    strangers = [row for row in rows if row.get("state") == "port held by a stranger" or row.get("gpu_strangers")]
    if json_output:
        from seatplan.output import emit_json

        emit_json({"ok": run.returncode == 0 and not strangers, "returncode": run.returncode, "command": run.command, "output": run.output,
                   "observed": rows, "overridden": overridden})
    else:
        from seatplan.output import console
        from seatplan.render.show import print_observed

        print_observed(console(), rows, {seat.name: ", ".join(seat.gpus) for seat in plan.seats})
    refused = refused_before(run) if run.returncode != 0 else None
    if refused is not None:
        raise refused
    if run.returncode != 0:
        if json_output:
            raise typer.Exit(EXIT_PLAYBOOK_FAILED)
        sys.stdout.write(run.output)  # held back for the table; the failure is in it
        finish(run, False, overridden)
    if strangers:
        raise typer.Exit(EXIT_PLAYBOOK_FAILED)


def forced_restarts(plan: Plan, settings: RenderSettings, seats: list[str]) -> list[str]:
    """``apply --restart SEAT``: the playbook's list of seats restarted on purpose (each an engine of the plan)."""
    from seatplan.errors import SeatplanError
    from seatplan.render.engines import plan_engines

    if not seats:
        return []
    engines = [engine.name for engine in plan_engines(plan, settings)]
    unknown = [seat for seat in seats if seat not in engines]
    if unknown:
        raise SeatplanError(f"--restart {', '.join(unknown)}: not an engine of the plan (its engines: {', '.join(engines) or 'none'})", where="--restart",
                            fix="name a vLLM seat the plan places")
    return [f"seatplan_force_restart={','.join(seats)}"]


def left_out(no_gateway: bool, no_alerts: bool) -> list[str]:
    """The playbook's switches for --no-gateway and --no-alerts (the rendered plays check them)."""
    return ([*(["seatplan_gateway_rollout=false"] if no_gateway else []), *(["seatplan_alerts_rollout=false"] if no_alerts else [])])


def guard_apply(plan: Plan, plan_file: Path, fleet: Path | None, inventory: Path | None, *, force: bool) -> list[str]:
    """Refuse a stale plan, a plan that no longer fits or one for other hosts (exit 2, nothing written);
    with ``--force``, say on stderr what is overridden and return it."""
    from seatplan.errors import SeatplanError
    from seatplan.output import error_console
    from seatplan.render.guard import apply_problems

    problems = apply_problems(plan, plan_file, fleet, inventory)
    if problems and not force:
        raise SeatplanError("the plan is not safe to apply: " + "; ".join(problems), where=str(plan_file),
                            fix="plan again from the current fleet (seatplan plan FLEET -o PLAN) and apply that, or pass --force to apply this plan anyway")
    for problem in problems:
        error_console().print(f"[bold yellow]warning:[/] --force overrides: {problem}", markup=True, soft_wrap=True, highlight=False)
    return problems


def rollback_command(
    directory: Path = typer.Argument(..., metavar="DIR", help="the directory `seatplan render` or `apply` wrote"),
    to: str | None = typer.Option(None, "--to", metavar="TAG", help="undo every release recorded on the hosts after the newest one tagged TAG"),
    before: str | None = typer.Option(None, "--before", metavar="TAG", help="undo the release tagged TAG too (back to what ran before it)"),
    inventory: Path | None = typer.Option(None, "--inventory", "-i", help="the Ansible inventory (default: DIR/ansible/inventory.yaml)"),
    check: bool = typer.Option(False, "--check", help="show what would be put back, restart nothing"),
    extra: list[str] = typer.Option([], "-e", "--extra-vars", metavar="<KEY=VALUE>", help="KEY=VALUE passed to ansible-playbook; repeatable"),
    no_gateway: bool = typer.Option(False, "--no-gateway", help="leave the gateway's config as it is"),
    no_alerts: bool = typer.Option(False, "--no-alerts", help="leave the Prometheus alert rules as they are"),
    health_timeout: int | None = typer.Option(None, "--health-timeout", parser=HEALTH_TIMEOUT_PARSER, metavar="SECONDS", help=HEALTH_TIMEOUT_DIR_HELP),
    target: str = TARGET_OPTION,
    context: str | None = CONTEXT_OPTION,
    json_output: bool = JSON_OUTPUT,
) -> None:
    """Undo the releases recorded on each host after TAG, newest first: their files put back, their engines restarted one at a time."""
    from seatplan.encode import check_name
    from seatplan.errors import SeatplanError
    from seatplan.render.api import rollback
    from seatplan.render.runner import missing_backups, rollback_failed

    if (to is None) == (before is None):
        raise SeatplanError("give one of --to TAG and --before TAG", where="--to", fix="--to TAG keeps the release tagged TAG; --before TAG undoes it too")
    tag = check_name("tag", to or before or "", "--to" if to else "--before")
    if not directory.is_dir():
        raise SeatplanError("is a file, not a directory" if directory.exists() else "no such directory", where=str(directory),
                            fix="pass the directory `seatplan render -o DIR` or `seatplan apply -o DIR` wrote")
    if hosts_or_cluster(target, context, inventory or directory / "ansible" / "inventory.yaml") is None:
        assert context is not None
        if before is not None:
            raise SeatplanError("--before is for the releases recorded on hosts; a cluster's rollback takes --to TAG", where="--before",
                                fix="pass --to with the tag of the release to go back to")
        rollback_kubernetes(directory, context, tag, check=check, health_timeout=health_timeout, json_output=json_output)
        return
    extra = [*extra, *left_out(no_gateway, no_alerts), *([f"seatplan_health_timeout_s={health_timeout}"] if health_timeout is not None else []),
             *(["seatplan_rollback_before=true"] if before else [])]
    run = rollback(directory, inventory or directory / "ansible" / "inventory.yaml", tag=tag, check=check, extra=extra, echo=None if json_output else sys.stdout)
    refused = (missing_backups(run, tag) or rollback_failed(run)) if run.returncode != 0 else None
    if refused is not None:
        raise refused
    finish(run, json_output)


def finish(run: PlaybookRun, json_output: bool, overridden: list[str] | None = None) -> None:
    """``overridden``: what apply's --force overrode (None for rollback, which checks nothing)."""
    from seatplan.render.runner import failed_step, refused_before

    refused = refused_before(run) if run.returncode != 0 else None
    if refused is not None:
        raise refused
    step = failed_step(run) if run.returncode != 0 else None
    if json_output:
        from seatplan.output import emit_json

        document = {"ok": run.returncode == 0, "returncode": run.returncode, "command": run.command, "output": run.output,
                    "failed_step": step[0] if step else None}
        emit_json(document | ({"overridden": overridden} if overridden is not None else {}))
    if run.returncode != 0:
        if not json_output:
            from rich.markup import escape

            from seatplan.output import error_console

            if step is not None:
                error_console().print(f"[bold red]error:[/] {escape(step[0])} failed at {escape(step[1])}", markup=True, highlight=False, soft_wrap=True)
            else:
                error_console().print(f"[bold red]error:[/] ansible-playbook failed (exit {run.returncode}); the output above says where", markup=True)
        raise typer.Exit(EXIT_PLAYBOOK_FAILED)


def hosts_or_cluster(target: str, context: str | None, inventory: Path | None) -> Path | None:
    """The inventory for a rollout to hosts; None for one to a cluster (which needs --context)."""
    from seatplan.errors import SeatplanError

    if target == "kubernetes":
        if not context:
            raise SeatplanError("--target kubernetes needs --context NAME", where="--context", fix="name the kubeconfig context of the cluster (kubectl config get-contexts)")
        return None
    if target != "hosts":
        raise SeatplanError(f"unknown target {target!r}", where="--target", fix="use hosts (ansible-playbook) or kubernetes (kubectl)")
    if inventory is None:
        raise SeatplanError("apply to hosts needs --inventory INVENTORY", where="--inventory", fix="pass your Ansible inventory, or --target kubernetes --context NAME")
    return inventory


def cluster_settings(directory: Path, health_timeout: int | None) -> RenderSettings:
    from seatplan.render.api import settings_of
    from seatplan.render.settings import RenderSettings

    settings = settings_of(directory) or RenderSettings()
    return settings.model_copy(update={"health_timeout_s": health_timeout}) if health_timeout is not None else settings


def apply_kubernetes(loaded: LoadedPlan, directory: Path, context: str, tag: str, *, check: bool, no_alerts: bool, health_timeout: int | None,
                     json_output: bool, overridden: list[str]) -> None:
    """``apply --target kubernetes``: DIR rendered again for the cluster with its own settings, then the plan's steps with kubectl."""
    import hashlib
    import time

    from seatplan.render.api import render_to
    from seatplan.render.kubectl import apply_to_cluster
    from seatplan.render.settings import KUBERNETES

    settings = cluster_settings(directory, health_timeout).model_copy(update={"plan_path": str(loaded.path.resolve())})
    render_to(loaded, settings, [KUBERNETES], directory)
    outcome = apply_to_cluster(loaded.plan, hashlib.sha256(loaded.text.encode("utf-8")).hexdigest(), directory, settings, context=context, tag=tag,
                               check=check, alerts=not no_alerts, say=say_unless(json_output), pause=time.sleep)
    finish_cluster(outcome, json_output, overridden)


def rollback_kubernetes(directory: Path, context: str, tag: str, *, check: bool, health_timeout: int | None, json_output: bool) -> None:
    import time

    from seatplan.render.kubectl import rollback_cluster

    outcome = rollback_cluster(directory, cluster_settings(directory, health_timeout), context=context, tag=tag, check=check,
                               say=say_unless(json_output), pause=time.sleep)
    finish_cluster(outcome, json_output, None)


def say_unless(json_output: bool) -> Callable[[str], None]:
    """Where the rollout's steps and kubectl's output are printed: stdout, or nowhere with --json (one document)."""
    from seatplan.output import console

    out = console()

    def say(line: str) -> None:
        if not json_output:
            out.print(line, markup=False, highlight=False, soft_wrap=True)

    return say


def finish_cluster(outcome: Outcome, json_output: bool, overridden: list[str] | None) -> None:
    if json_output:
        from seatplan.output import emit_json

        document = {"ok": outcome.ok, "tag": outcome.tag, "steps": outcome.steps, "failed": outcome.failed, "restored": outcome.restored}
        emit_json(document | ({"overridden": overridden} if overridden is not None else {}))
    if not outcome.ok:
        if not json_output:
            from rich.markup import escape

            from seatplan.output import error_console

            restored = f"; {outcome.restored}" if outcome.restored else ""
            error_console().print(f"[bold red]error:[/] {escape(outcome.failed or 'kubectl failed')}{escape(restored)}", markup=True, highlight=False, soft_wrap=True)
        raise typer.Exit(EXIT_PLAYBOOK_FAILED)
