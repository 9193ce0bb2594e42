"""``seatplan report`` end to end: the page is self-contained and keeps secrets out, and headless Chromium
(Debian's, driven over the DevTools pipe) draws every chart with the expected traces and no console error.
The screenshot is kept as a test artefact (``$SEATPLAN_TEST_ARTIFACTS``, default ``test-artifacts/``)."""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path

import pytest

from kits.browser import open_page
from kits.cli import run_process
from kits.night import NightDocuments
from kits.parts import require
from kits.paths import REPO_ROOT

pytestmark = pytest.mark.slow

ARTIFACTS = Path(os.environ.get("SEATPLAN_TEST_ARTIFACTS", REPO_ROOT / "test-artifacts"))
EXPECTED_FIGURES = ["memory", "frontier", "kv", "history", "lengths", "inflight", "runaways"]

# What every chart div reports once plotly has drawn it: its traces, the ones drawn, and the SVG's size.
CHART_STATE = """
new Promise(resolve => {
  const settle = () => {
    const charts = [...document.querySelectorAll('div.chart')];
    const plots = charts.map(chart => chart.querySelector('.js-plotly-plot'));
    if (!plots.every(plot => plot && plot._fullLayout && plot.querySelector('svg.main-svg'))) { setTimeout(settle, 100); return; }
    resolve(charts.map((chart, i) => {
      const plot = plots[i];
      const svg = plot.querySelector('svg.main-svg').getBoundingClientRect();
      const drawn = plot.querySelectorAll('.barlayer .trace, .scatterlayer .trace, .heatmaplayer .hm').length;
      return {section: chart.closest('section').id, declared: Number(chart.dataset.traces), traces: plot.data.length,
              visible: plot._fullData.filter(trace => trace.visible === true).length, drawn,
              width: svg.width, height: svg.height,
              names: plot._fullData.map(trace => trace.name)};
    }));
  };
  settle();
})
"""


# Every pair of drawn texts of a chart (tick labels, bar labels, legend entries, titles, annotations) whose boxes
# overlap by more than a pixel each way; the hover layer is left out (it shows one thing at a time).
TEXT_OVERLAPS = """
[...document.querySelectorAll('div.chart')].flatMap(chart => {
  const boxes = [...chart.querySelectorAll('svg text')]
    .filter(text => text.textContent.trim() && !text.closest('.hoverlayer') && getComputedStyle(text).display !== 'none'
                    && Number(getComputedStyle(text).opacity || 1) > 0 && !text.closest('[style*="display: none"]'))
    .map(text => ({text: text.textContent.trim(), box: text.getBoundingClientRect()}))
    .filter(item => item.box.width > 0 && item.box.height > 0);
  const hits = [];
  for (let i = 0; i < boxes.length; i++) for (let j = i + 1; j < boxes.length; j++) {
    const a = boxes[i].box, b = boxes[j].box;
    const across = Math.min(a.right, b.right) - Math.max(a.left, b.left), down = Math.min(a.bottom, b.bottom) - Math.max(a.top, b.top);
    if (across > 1 && down > 1) hits.push([chart.closest('section').id, boxes[i].text, boxes[j].text]);
  }
  return hits;
})
"""


# What the memory chart shows, read back from the drawn page (issue 32): its annotations (the seats' names or keys,
# each GPU's spare), the y ticks (the GPUs) and every drawn bar rectangle by trace, each with its box on screen.
MEMORY_LABELS = """
(() => {
  const chart = document.querySelector('#memory div.chart');
  const box = element => { const b = element.getBoundingClientRect(); return {left: b.left, right: b.right, top: b.top, bottom: b.bottom}; };
  const notes = [...chart.querySelectorAll('g.annotation')].map(note => {
    const text = note.querySelector('text.annotation-text');
    return {text: [...text.querySelectorAll('tspan.line')].map(line => line.textContent).join(' ') || text.textContent,
            bold: [text, ...text.querySelectorAll('tspan')].some(part => Number(getComputedStyle(part).fontWeight) >= 600), ...box(text)};
  });
  const ticks = [...chart.querySelectorAll('.yaxislayer-above .ytick text')].map(tick => ({text: tick.textContent, ...box(tick)}));
  const bars = [...chart.querySelectorAll('.barlayer .trace')].map(trace => {
    const data = trace.__data__[0].trace;
    return {name: data.name, xaxis: data.xaxis, seats: (data.customdata || []).map(row => row[0]),
            rects: [...trace.querySelectorAll('.point path')].map(path => ({...box(path), stroke: parseFloat(getComputedStyle(path).strokeWidth)}))};
  });
  return {notes, ticks, bars, caption: document.querySelector('#memory p.caption').textContent};
})()
"""


def check_memory_labels(drawn: dict, plan: dict) -> None:
    """The worst-case spare written in bold right of the worst GPU's bar; every seat of the chosen layout outlined
    (2 px) and named or keyed above its own part of its GPU's bar, the key explained in the caption; every overhead
    segment wide enough to see."""
    rows = {tick["text"]: tick for tick in drawn["ticks"]}
    centre = lambda box: (box["top"] + box["bottom"]) / 2  # noqa: E731
    row_of = lambda box: min(rows, key=lambda name: abs(centre(rows[name]) - centre(box)))  # noqa: E731
    worst = [note for note in drawn["notes"] if note["text"].startswith("worst-case spare")]
    spare = f"{plan['worst_case_spare_bytes'] / 2**30:.2f} GiB"
    chosen = [note for note in worst if row_of(note) == plan["worst_case_gpu"]]
    assert chosen and chosen[0]["text"] == f"worst-case spare {spare}" and chosen[0]["bold"], worst
    outlines = next(bar for bar in drawn["bars"] if bar["name"].startswith("seat (") and bar["xaxis"] == "x")
    placed = sorted((gpu["host"] + ":" + str(gpu["index"]), seat) for gpu in plan["gpus"] for seat in gpu["seats"])
    keys = {seat["name"]: str(number) for number, seat in enumerate(sorted(plan["seats"], key=lambda s: s["boot_order"]), start=1)}
    found = []
    for seat, rect in zip(outlines["seats"], outlines["rects"], strict=True):
        assert rect["stroke"] >= 2 and rect["right"] - rect["left"] >= 3, (seat, rect)
        above = [note for note in drawn["notes"] if note["bottom"] <= rect["top"] + 2 and rect["top"] - note["top"] < 30
                 and rect["left"] <= (note["left"] + note["right"]) / 2 <= rect["right"]]
        assert [note["text"] for note in above] in ([seat], [keys[seat]]), (seat, above)
        if above[0]["text"] != seat:
            assert f"{keys[seat]} = {seat}" in drawn["caption"]
        assert above[0]["right"] - above[0]["left"] > 0
        found.append((row_of(rect), seat))
    assert sorted(found) == placed
    overhead = [rect for bar in drawn["bars"] if bar["name"].startswith("overhead") for rect in bar["rects"]]
    assert overhead and min(rect["right"] - rect["left"] for rect in overhead) >= 4


def shoot(page, name: str) -> Path:
    """A screenshot at the width the demo is read at, kept with the test run's artefacts."""
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    path = ARTIFACTS / name
    page.screenshot(path, width=1400)
    return path


@pytest.fixture(scope="module")
def report_page(night: NightDocuments) -> Path:
    page = night.folder / "report.html"
    done = run_process("report", str(night.plan), "--usage", str(night.usage), "--diagnose", str(night.diagnose),
                    "--observed", str(night.observed), "-o", str(page), "--json")
    assert done.exit_code == 0, done.stderr
    written = json.loads(done.stdout)
    assert [figure["key"] for figure in written["figures"]] == EXPECTED_FIGURES
    return page


def test_report_is_self_contained_and_names_no_secrets(report_page: Path, night: NightDocuments):
    text = report_page.read_text()
    assert not re.search(r"<script[^>]+src=|<link[^>]+href=|@import|url\(http", text)
    assert "cdn.plot.ly" not in text.split("</script>", 1)[1]  # plotly.js is inline; nothing after it loads a CDN
    usage = json.loads(night.usage.read_text())
    spend = (REPO_ROOT / "examples" / "night" / "spend-logs.csv").read_text()
    key_hashes = set(re.findall(r"\b[0-9a-f]{64}\b", spend))
    addresses = {address for key in usage["keys"] for address in key["client_ips"]}
    assert key_hashes and addresses
    for secret in key_hashes | addresses | {"http://gpu-box:", "postgresql://", str(night.folder)}:
        assert secret not in text


def test_report_draws_every_chart_in_headless_chromium(report_page: Path, night: NightDocuments):
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    require(chromium is not None, "Debian's chromium (headless)")
    page = open_page(chromium, report_page.as_uri())
    try:
        charts = page.evaluate(CHART_STATE)
        overlaps = page.evaluate(TEXT_OVERLAPS)
        memory = page.evaluate(MEMORY_LABELS)
        errors = page.console_errors()
        requested = page.requested_urls()
        shoot(page, "report.png")
    finally:
        page.close()
    assert errors == []
    assert overlaps == [], f"texts drawn over each other at the demo size: {overlaps[:10]}"
    # Works offline: the page asks for nothing but itself (inline data: URLs are not fetches).
    assert [url for url in requested if not url.startswith(("data:", "blob:"))] == [report_page.as_uri()]
    assert [chart["section"] for chart in charts] == EXPECTED_FIGURES
    plan = json.loads(night.plan.read_text())
    check_memory_labels(memory, plan)
    for chart in charts:
        assert chart["traces"] == chart["declared"] > 0, chart
        assert chart["drawn"] == chart["visible"], chart
        assert chart["width"] > 300 and chart["height"] > 200, chart
    by_key = {chart["section"]: chart for chart in charts}
    # Memory: per panel one trace per segment kind in use, the seat outlines, the spare and the headroom line; the chosen panel
    # also marks the observed plateaus.
    # The small parts of a seat are one overhead segment (issue 32), and each seat is outlined (one trace).
    own = {"weights", "kv_cache", "observed_non_kv", "declared_cap"}
    parts = {part["name"] if part["name"] in own else "overhead" for seat in plan["seats"] if seat["gpus"] for part in seat["footprint_parts"]}
    # A keep-clear GPU without seats adds the "kept clear" bar to each panel (issue 21: it is not spare).
    clear = any(gpu["keep_clear"] and not gpu["seats"] for gpu in plan["gpus"])
    assert by_key["memory"]["traces"] == 2 * (len(parts) + 3 + clear) + 1
    # History: one panel per GPU of the nvidia-smi log (4), each with at least its band, line, total and plan level.
    assert by_key["history"]["traces"] >= 4 * 5
    assert {"step (restart)", "creep to plateau", "engine boot (vLLM log)"} <= set(by_key["history"]["names"])
    assert (ARTIFACTS / "report.png").stat().st_size > 50_000


def test_report_from_the_plan_alone_and_bad_documents(night: NightDocuments, tmp_path: Path):
    page = tmp_path / "plan-only.html"
    done = run_process("report", str(night.plan), "-o", str(page), "--json")
    assert done.exit_code == 0, done.stderr
    assert [figure["key"] for figure in json.loads(done.stdout)["figures"]] == ["memory", "frontier", "kv"]
    # A usage report given as the plan: a located error with its fix, exit 2, nothing written.
    wrong = tmp_path / "wrong.html"
    done = run_process("report", str(night.usage), "-o", str(wrong))
    assert done.exit_code == 2 and "this is a usage report" in done.stderr and "not a plan" in done.stderr and "\nfix: " in done.stderr
    assert not wrong.exists()
    broken = tmp_path / "broken.json"
    broken.write_text('{"seats": [')
    done = run_process("report", str(night.plan), "--diagnose", str(broken), "-o", str(wrong))
    assert done.exit_code == 2 and f"{broken}:1" in done.stderr and "\nfix: " in done.stderr
    assert not wrong.exists()


BIG_MODELS = (("Qwen--Qwen3-4B-Instruct-2507", 32768), ("meta-llama--Llama-3.2-3B-Instruct", 16384), ("Qwen--Qwen3-8B", 16384),
              ("mistralai--Mistral-7B-v0.1", 8192), ("openai--gpt-oss-20b", 32768))

# Tick labels each chart shows on its category axis (plotly drops some when they crowd).
CATEGORY_TICKS = """
Object.fromEntries([...document.querySelectorAll('div.chart')].map(chart => [chart.closest('section').id,
  [...chart.querySelectorAll('.yaxislayer-above .ytick text, .yaxislayer-above .y2tick text')].map(t => t.textContent)]))
"""


def big_fleet(folder: Path) -> Path:
    """8 GPUs over 2 hosts and 40 seats: the size the report must stay readable at."""
    lines = ["hosts:"]
    for host in ("node-a", "node-b"):
        lines += [f"  - name: {host}", "    gpus:"] + [f"      - {{index: {index}, name: H200, total_bytes: 139GiB}}" for index in range(4)]
    lines += ["policy:", "  headroom_bytes: 1GiB", "seats:"]
    for number in range(40):
        model, context = BIG_MODELS[number % len(BIG_MODELS)]
        lines += [f"  - name: team{number:02d}-{model.split('--')[1].lower()}", f"    model: {REPO_ROOT / 'examples' / 'demo' / 'models' / model}",
                  f"    max_model_len: {context}", f"    port: {8000 + number}"]
    fleet = folder / "fleet.yaml"
    fleet.write_text("\n".join(lines) + "\n")
    return fleet


def test_report_stays_readable_with_8_gpus_and_40_seats(tmp_path: Path):
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    require(chromium is not None, "Debian's chromium (headless)")
    plan = tmp_path / "plan.json"
    done = run_process("plan", str(big_fleet(tmp_path)), "-o", str(plan), "--time-limit", "10", "--json")
    assert done.exit_code == 0, done.stderr
    seats = [seat["name"] for seat in json.loads(plan.read_text())["seats"]]
    page_path = tmp_path / "big.html"
    assert run_process("report", str(plan), "-o", str(page_path)).exit_code == 0
    page = open_page(chromium, page_path.as_uri())
    try:
        page.evaluate(CHART_STATE)
        ticks = page.evaluate(CATEGORY_TICKS)
        overlaps = page.evaluate(TEXT_OVERLAPS)
        memory = page.evaluate(MEMORY_LABELS)
        errors = page.console_errors()
        shoot(page, "report-8-gpus-40-seats.png")
    finally:
        page.close()
    assert errors == []
    assert overlaps == [], f"texts drawn over each other at 8 GPUs x 40 seats: {overlaps[:10]}"
    # Every GPU and every seat keeps its own labelled row.
    assert sorted(set(ticks["memory"])) == [f"{host}:{index}" for host in ("node-a", "node-b") for index in range(4)]
    assert sorted(ticks["kv"]) == sorted(seats) and len(seats) == 40
    check_memory_labels(memory, json.loads(plan.read_text()))
