"""Every explanation names the plan's vLLM version (issue 50: `explain --rollout` of a plan on vLLM 0.11 said "vLLM
0.32's request_memory"): a release other than the plan's appears only where a source line is cited from the release
whose source was read (versions.CITATIONS), and each cited line is where the cited function is in that source."""

from __future__ import annotations

import random
import re
from pathlib import Path

import pytest
import yaml

from kits.cli import run_cli
from kits.parts import require
from kits.render import DEMO_FLEET
from kits.vllm_engine import vllm_installed, vllm_venv
from seatplan.versions import CITATIONS, NEWEST_MODELLED, cite, show

MENTION = re.compile(r"(read in )?vLLM (\d+\.\d+(?:\.\d+)?)")


def test_explain_names_the_plans_version_everywhere(tmp_path: Path, capsys, monkeypatch, rng: random.Random):
    # from 0.10.2, the release that has --kv-cache-memory-bytes (the demo fleet pins KV bytes)
    version = rng.choice(["0.10.2", *(f"0.{minor}" for minor in range(11, NEWEST_MODELLED[1] + 1))])
    document = yaml.safe_load(DEMO_FLEET.read_text())
    document["policy"]["vllm_version"] = version
    for seat in document["seats"]:
        if "model" in seat:
            seat["model"] = str(DEMO_FLEET.parent / seat["model"])
    fleet = tmp_path / "fleet.yaml"
    fleet.write_text(yaml.safe_dump(document, sort_keys=False))
    planned = run_cli(capsys, monkeypatch, "plan", str(fleet), "-o", str(tmp_path / "plan.json"))
    assert planned.exit_code == 0, planned.stderr
    said = [run_cli(capsys, monkeypatch, "explain", str(tmp_path / "plan.json"), "--rollout", env={"COLUMNS": "300"}).stdout]
    said += [run_cli(capsys, monkeypatch, "explain", str(tmp_path / "plan.json"), seat["name"], env={"COLUMNS": "300"}).stdout
             for seat in document["seats"]]
    text = " ".join(" ".join(said).split())
    assert f"vLLM {version}'s start-up check" in text
    read = {show(release) for citation in CITATIONS for release in citation.lines}
    for found in MENTION.finditer(text):
        if found[1]:
            assert found[2] in read, found[0]
        else:
            assert found[2] == version, text[max(0, found.start() - 120): found.end() + 120]
    # the line cited as the plan's own release only where that release's source was read
    assert ("read in vLLM" in cite("request_memory", version)) == (version not in {"0.32", "0.32.0"})


@pytest.mark.vllm
def test_each_cited_line_is_where_that_release_has_it():
    require(vllm_installed(), "the vLLM 0.32 test virtualenv (its source is what the citations were read in)")
    (site,) = vllm_venv().glob("lib/python3*/site-packages")
    for citation in CITATIONS:
        for release, place in citation.lines.items():
            assert show(release) == "0.32", "only vLLM 0.32's source is installed here; a citation of another release needs its source read"
            file, lines = place.split(":")
            first, last = (int(part) for part in lines.split("-"))
            source = (site / file).read_text().splitlines()
            assert source[first - 1].startswith(f"def {citation.name}("), (place, source[first - 1])
            # the function ends at `last`: the next line starts another top-level statement (or the file ends)
            after = source[last:]
            assert not after or after[0] == "" or not after[0].startswith((" ", "\t")), (place, after[:1])
            assert all(not line.startswith(("def ", "class ")) for line in source[first:last]), place
