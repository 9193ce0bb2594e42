"""The figures docs/walkthrough.md and README.md state in their prose (outside the console blocks, which
test_walkthrough.py and test_doc_examples.py run) checked against the documents the commands write on the shipped
week (kits.night): a change in a command cannot leave the story's numbers behind."""

from __future__ import annotations

import json

from kits.night import NightDocuments
from kits.paths import REPO_ROOT
from seatplan.units import GiB, MiB

WALKTHROUGH = REPO_ROOT / "docs" / "walkthrough.md"
README = REPO_ROOT / "README.md"
COUNT_WORDS = {1: "one", 2: "two", 3: "three", 4: "four", 5: "five", 6: "six", 7: "seven", 8: "eight", 9: "nine", 10: "ten"}


def prose(page) -> str:
    """The page with its line breaks read as spaces, as a reader reads a wrapped sentence."""
    return " ".join(page.read_text().split())


def test_the_usage_figures(night: NightDocuments):
    usage = json.loads(night.usage.read_text())
    [key] = usage["runaways_by_key"]
    seat = max(usage["models"].values(), key=lambda model: model["runaway_count"])
    replay = seat["kv_replay"]
    text = prose(WALKTHROUGH)
    assert (f"{COUNT_WORDS[key['count']].capitalize()} replies of up to {key['max_completion_tokens']:,} tokens, all from "
            f"`{key['key_alias']}`, all on `{seat['seat']}`") in text
    assert f"drew {COUNT_WORDS[key['count']]} ~{key['max_completion_tokens'] // 1000}k-token runaway replies" in text
    assert (f"its peak in flight is {seat['peak_inflight_tokens']:,} tokens with them and "
            f"{seat['peak_inflight_tokens_without_runaways']:,} without") in text
    assert (f"Replayed against KV blocks of {replay['block_size_tokens']} tokens, the week never held more than "
            f"{replay['peak_blocks']:,} blocks on that seat") in text


def test_the_diagnose_figures(night: NightDocuments):
    diagnose = json.loads(night.diagnose.read_text())
    gpus = {gpu["index"]: gpu for gpu in diagnose["gpus"]}
    third_boot_step = gpus[0]["steps"][2]["delta_mib"]
    creep = gpus[2]["creep"]
    text = prose(WALKTHROUGH)
    assert (f"GPU 0's third boot took {third_boot_step:,.0f} MiB ({third_boot_step * MiB / 1e9:.1f} GB) more in one step; "
            f"GPU 2 crept {creep['rise_mib']:,.0f} MiB in {creep['hours_to_plateau']:.0f} hours to {gpus[2]['plateau_free_mib']:.0f} MiB free") in text
    assert f"GPU 0 lost {third_boot_step * MiB / 1e9:.1f} GB in one step at a restart" in text
    assert f"GPU 2 crept down to {gpus[2]['plateau_free_mib']:.0f} MiB free about two days after each boot" in text
    assert 24 <= creep["hours_to_plateau"] <= 60  # "about two days"
    kv = [f"{boot['available_kv_bytes'] / GiB:.1f}" for seat in diagnose["seats"] if seat["name"] == "qwen3-32b" for boot in seat["boots"]]
    assert f"Three boots, three KV caches: {', '.join(kv[:-1])} and {kv[-1]} GiB" in text and len(kv) == 3
    assert f"so every boot gave a different KV cache ({', '.join(kv)} GiB)" in prose(README)
    assert f"A GPU lost {third_boot_step * MiB / 1e9:.1f} GB in one step at a restart" in prose(README)
    assert f"Another GPU crept to {gpus[2]['plateau_free_mib']:.0f} MiB free two days after each boot" in prose(README)


def test_the_plan_figures(night: NightDocuments):
    plan = json.loads(night.plan.read_text())
    seat = next(seat for seat in plan["seats"] if seat["name"] == "qwen3-30b-a3b")
    [replay] = [line["inputs"] for line in seat["explanation"] if line["rule"] == "kv_replay"]
    text = prose(WALKTHROUGH)
    assert (f"the layout keeps the current one ({plan['moves']} moves) because nothing better exists: the worst-case spare, "
            f"{plan['worst_case_spare_bytes'] / GiB:.2f} GiB on GPU {plan['worst_case_gpu'].split(':')[1]}, is proven optimal") in text
    assert plan["optimal"]
    assert (f"`qwen3-30b-a3b`'s {replay['kv_cache_memory_bytes'] / GiB:g} GiB ({replay['usable_blocks']:,} usable blocks) never had "
            f"more than {replay['peak_blocks']:,} blocks in flight, so {replay['smallest_kv_bytes_rounded'] / GiB:g} GiB") in text
