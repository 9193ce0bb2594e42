"""What every command's ``--help`` shares: the ``--wide`` option and the examples printed under the options.

One home, so that each stage's ``cli.py`` states its examples and the help reads the same everywhere (as
``gh`` and ``uv`` do: whole option names, then a few commands to copy). Only Typer is imported here.
"""

from __future__ import annotations

from collections.abc import Callable

import typer

WIDE = typer.Option(False, "--wide", help="keep every table column, however wide the lines get (for `less -S` or a file)")


# The examples under each command's --help, run from a checkout (examples/ is shipped data); tests/docs/test_docs.py
# checks that every command has some and that docs/*.md describes every command.
EXAMPLES: dict[str, tuple[str, ...]] = {
    'adopt': (
        'seatplan adopt --compose gpu-box=examples/adopt/compose.yaml --env-dir gpu-box=examples/adopt/env --nvidia-smi gpu-box=examples/adopt/nvidia-smi.csv -o fleet.yaml',
        'seatplan adopt --litellm-config /etc/litellm/config.yaml --env-dir /etc/vllm --gpus-from-host -o fleet.yaml',
    ),
    'model': (
        'seatplan model examples/demo/models/Qwen--Qwen3-8B --kv-cache-memory-bytes 20GiB',
        'seatplan model examples/demo/models/Qwen--Qwen3-Next-80B-A3B-Thinking --max-model-len 32K --json',
    ),
    'usage': (
        'seatplan usage --from examples/night/spend-logs.csv --fleet examples/demo/fleet.yaml -o usage.json',
        'seatplan usage --from postgresql://litellm@db/litellm --days 7 --fleet fleet.yaml --json',
        'seatplan usage --from https://gateway.example/ --key-file ~/.config/litellm-key --days 7 -o usage.json',
    ),
    'diagnose': (
        'seatplan diagnose --vllm-log qwen3-32b=examples/night/vllm/qwen3-32b.log --nvidia-smi examples/night/nvidia-smi.csv -o diagnose.json',
        'seatplan diagnose --beszel examples/night/beszel_data.db --plan plan.json',
    ),
    'plan': (
        'seatplan plan examples/demo/fleet.yaml -o plan.json',
        'seatplan plan examples/demo/fleet.yaml --usage usage.json --max-moves 1 --wide',
        'seatplan plan examples/demo/fleet.yaml --current rollout -o plan2.json',
    ),
    'explain': (
        'seatplan explain plan.json qwen3-8b',
    ),
    'fit': (
        'seatplan fit examples/demo/models/Qwen--Qwen3-8B --gpu-memory 24GiB',
        'seatplan fit examples/demo/models/Qwen--Qwen3-8B --gpu-memory 24GiB --kv-cache-dtype fp8 --json',
    ),
    'schema': (
        'seatplan schema > fleet.schema.json',
    ),
    'render': (
        'seatplan render plan.json -o rollout',
        'seatplan render plan.json -o rollout --restart systemd',
    ),
    'diff': (
        'seatplan diff plan2.json --against rollout',
    ),
    'apply': (
        'seatplan apply plan2.json --inventory rollout/ansible/inventory.yaml -o rollout --check',
        'seatplan apply plan2.json --inventory rollout/ansible/inventory.yaml -o rollout --tag night2',
    ),
    'rollback': (
        'seatplan rollback rollout --to night2',
    ),
    'verify': (
        'seatplan verify plan.json --gateway http://127.0.0.1:14000 --key-env LITELLM_MASTER_KEY',
    ),
    'upgrade-check': (
        'seatplan upgrade-check plan.json --to 0.20',
    ),
    'report': (
        'seatplan report plan.json --usage usage.json --diagnose diagnose.json -o report.html',
    ),
}


def add_command(app: typer.Typer, name: str, function: Callable[..., None]) -> None:
    """Register ``function`` as ``seatplan NAME`` with its examples under the options."""
    app.command(name, epilog=examples(*EXAMPLES[name]))(function)


def examples(*commands: str) -> str:
    """An epilog for ``app.command(epilog=...)``: the commands as written, one a line (Click's ``\\b`` keeps it
    from rewrapping them)."""
    return "\b\nExamples:\n" + "\n".join(f"  $ {command}" for command in commands)
