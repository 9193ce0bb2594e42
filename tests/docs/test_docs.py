"""The docs that are generated stay generated: docs/fleet.md is what scripts/make_fleet_doc.py writes from the
fleet file's schema, and it names every key the schema has."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys

import yaml

from kits.paths import REPO_ROOT
from seatplan.documents.fleet import Fleet, Gateway, GatewayService, GpuSpec, Policy, SeatSpec, StartedBy
from seatplan.render.ansible import cutover


def test_fleet_reference_is_up_to_date():
    done = subprocess.run([sys.executable, str(REPO_ROOT / "scripts" / "make_fleet_doc.py"), "--check"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr


def test_fleet_reference_names_every_key():
    text = (REPO_ROOT / "docs" / "fleet.md").read_text()
    for model, prefix in ((SeatSpec, ""), (Policy, ""), (GpuSpec, "gpus[]."), (Fleet, ""), (GatewayService, "gateway_reaches."), (Gateway, ""),
                          (StartedBy, "started_by.")):
        for name in model.model_fields:
            assert f"`{prefix}{name}`" in text, name


def test_started_by_shows_its_three_forms_each_as_the_loader_reads_it_and_the_playbook_runs_it():
    """issue 50: started_by's syntax was only in `seatplan schema`. Each example of docs/fleet.md loads as a seat's
    started_by, the three are the three kinds, and the commands its comment names are the cut-over's."""
    text = (REPO_ROOT / "docs" / "fleet.md").read_text()
    part = text.split("## `seats[].started_by`", 1)[1].split("\n## ", 1)[0]
    examples = re.findall(r"```yaml\n(.*?)```", part, re.S)
    kinds = []
    for example in examples:
        comment = re.fullmatch(r"# first apply stops it: `([^`]+)`; rollback starts it: `([^`]+)`", example.splitlines()[0])
        assert comment, example
        seat = SeatSpec.model_validate({"name": "example", **yaml.safe_load(example)})
        assert seat.started_by is not None
        kinds.append(seat.started_by.kind)
        runs = cutover(seat.started_by)
        assert runs is not None
        assert (runs["kind"], runs["stop"], runs["start"]) == (seat.started_by.kind, shlex.split(comment[1]), shlex.split(comment[2]))
    assert sorted(kinds) == ["command", "compose", "systemd"]
