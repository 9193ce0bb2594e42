"""The docs that are generated stay generated: docs/fleet.md is what scripts/make_fleet_doc.py writes from the
fleet file's schema, and it names every key the schema has."""

from __future__ import annotations

import subprocess
import sys

from kits.paths import REPO_ROOT
from seatplan.documents.fleet import Fleet, Gateway, GatewayService, GpuSpec, Policy, SeatSpec


def test_fleet_reference_is_up_to_date():
    done = subprocess.run([sys.executable, str(REPO_ROOT / "scripts" / "make_fleet_doc.py"), "--check"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr


def test_fleet_reference_names_every_key():
    text = (REPO_ROOT / "docs" / "fleet.md").read_text()
    for model, prefix in ((SeatSpec, ""), (Policy, ""), (GpuSpec, "gpus[]."), (Fleet, ""), (GatewayService, "gateway_reaches."), (Gateway, "")):
        for name in model.model_fields:
            assert f"`{prefix}{name}`" in text, name
