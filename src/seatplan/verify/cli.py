"""``seatplan verify`` and ``seatplan upgrade-check``.

Only Typer is imported at load time; the stage's logic is imported inside the commands.
"""

from __future__ import annotations

import re
from pathlib import Path

import typer

from seatplan.clihelp import WIDE, add_command
from seatplan.numeric_options import number_option

DEFAULT_KEY_ENV = "LITELLM_MASTER_KEY"
EXACT_VERSION = re.compile(r"v?[0-9]{1,4}\.[0-9]{1,4}(?:\.[0-9]{1,4}){0,2}")
EXIT_FAILED = 1


def register(app: typer.Typer) -> None:
    add_command(app, "verify", verify_command)
    add_command(app, "upgrade-check", upgrade_check_command)


def verify_command(
    plan: Path = typer.Argument(..., metavar="PLAN", help="a plan saved with `seatplan plan FLEET -o plan.json`"),
    gateway: str | None = typer.Option(None, "--gateway", help="LiteLLM gateway URL: every seat's served name must be listed and answer"),
    key_env: str = typer.Option(DEFAULT_KEY_ENV, "--key-env", help="environment variable holding the gateway key (never printed); '' for none"),
    key_file: Path | None = typer.Option(None, "--key-file", help="a file (chmod 600) whose first line is the gateway key, read when the variable is unset"),
    fleet: Path | None = typer.Option(None, "--fleet", help="the fleet file (default: the one the plan was made from)"),
    timeout_s: float = typer.Option(30.0, "--timeout", parser=number_option("--timeout", minimum=0.1, maximum=3600, example="30"),
                                   help="seconds each request may take, from connecting to the answer's last byte"),
    namespace: str | None = typer.Option(None, "--namespace", metavar="NS", help="ask each engine at its Kubernetes Service, SEAT.NS.svc "
                                         "(render --target kubernetes); run it where the cluster's DNS resolves (docs/kubernetes.md)"),
    json_output: bool = typer.Option(False, "--json", help="print {ok, checks: [{seat, check, expected, seen, ok}]}"),
    wide: bool = WIDE,
) -> None:
    """Check every engine of a plan (and the gateway) against the plan, to the KV block; exit 1 if any check fails."""
    from seatplan.verify.expect import seat_expectations
    from seatplan.verify.loading import gateway_key, gateway_url, load_context
    from seatplan.verify.probe import ProbeSettings
    from seatplan.verify.run import verify_fleet

    if gateway is not None:
        gateway = gateway_url(gateway)
    context = load_context(plan, fleet)
    key = gateway_key(key_env, key_file) if gateway else None
    if namespace is not None:
        from seatplan.encode import check_name

        check_name("host name", namespace, "--namespace")  # a DNS label: it goes in every engine's URL
    expectations = seat_expectations(context.plan, context.hosts, context.fleet_dir, context.facts_loader, namespace=namespace)
    report = verify_fleet(expectations, context.plan.inputs.vllm_version, gateway_url=gateway, gateway_key=key,
                          settings=ProbeSettings(timeout_s=timeout_s))
    if json_output:
        from seatplan.output import emit_json

        emit_json(report)
    else:
        from seatplan.output import console
        from seatplan.verify.show import print_verify

        print_verify(console(wide), report)
    if not report.ok:
        raise typer.Exit(EXIT_FAILED)


def upgrade_check_command(
    plan: Path = typer.Argument(..., metavar="PLAN", help="a plan saved with `seatplan plan FLEET -o plan.json`"),
    to: str = typer.Option(..., "--to", help="the vLLM version the engines would move to (0.8 to 0.32)"),
    fleet: Path | None = typer.Option(None, "--fleet", help="the fleet file (default: the one the plan was made from)"),
    json_output: bool = typer.Option(False, "--json", help="print the changes as one JSON document"),
    wide: bool = WIDE,
) -> None:
    """Seat by seat, what changes for this plan if its engines move to vLLM VERSION."""
    from seatplan.errors import SeatplanError
    from seatplan.verify.loading import load_context
    from seatplan.verify.upgrade import upgrade_report
    from seatplan.versions import modelled

    fix = "give a vLLM version from 0.8 to 0.32, e.g. 0.32 or 0.10.2"
    if not EXACT_VERSION.fullmatch(to):
        # versions.release reads a leading version out of a running engine's text (0.32.0+cpu); a flag must be
        # nothing but a version, or "0.32; rm -rf" would be taken as 0.32.
        raise SeatplanError("--to takes a version alone (digits and dots, e.g. 0.32 or 0.10.2)", where="--to", fix=fix)
    try:
        modelled(to)
    except ValueError as problem:
        raise SeatplanError(str(problem), where="--to", fix=fix) from None
    context = load_context(plan, fleet)
    report = upgrade_report(context.plan, context.fleet_dir, context.facts_loader, to)
    if json_output:
        from seatplan.output import emit_json

        emit_json(report)
    else:
        from seatplan.output import console
        from seatplan.verify.show import print_upgrade

        print_upgrade(console(wide), report)
