"""Writing a render (atomic, whole directory), re-rendering, and `seatplan diff` against a directory or an older plan."""

from __future__ import annotations

import difflib
import json
from pathlib import Path

from kits.documents import edited_seat
from kits.rollout import run_seatplan
from seatplan.documents.plan import Plan
from seatplan.render.diff import unified


def saved_variant(demo_plan_path, tmp_path, name="new.json", **changes) -> str:
    """The demo plan with one seat changed behind the planner's back (as an operator's edit would)."""
    plan = Plan.model_validate_json(demo_plan_path.read_text())
    seat_name, fields = next(iter(changes.items()))
    plan.seats = [edited_seat(seat, **fields) if seat.name == seat_name else seat for seat in plan.seats]
    path = tmp_path / name
    path.write_text(plan.model_dump_json(indent=2))
    return str(path)


def tree(directory):
    return {path.relative_to(directory).as_posix(): path.read_bytes() for path in directory.rglob("*") if path.is_file()}


def test_render_writes_every_target_and_an_unchanged_plan_writes_nothing(demo_plan_path, tmp_path, capsys, monkeypatch):
    out = tmp_path / "out"
    code, stdout, stderr = run_seatplan(capsys, monkeypatch, "render", str(demo_plan_path), "-o", str(out), "--json")
    assert code == 0, stderr
    written = json.loads(stdout)
    assert written["backup"] is None and "compose.yaml" in written["changed"] and "prometheus/seatplan.rules.yaml" in written["changed"]
    assert {"ansible/playbook.yaml", "ansible/rollback.yaml", "ansible/inventory.yaml", "litellm/config.yaml", "env/qwen3-8b.env", "seatplan-render.json"} <= set(tree(out))
    code, stdout, _ = run_seatplan(capsys, monkeypatch, "render", str(demo_plan_path), "-o", str(out), "--json")
    assert json.loads(stdout) | {"warnings": []} == {"directory": str(out), "changed": [], "removed": [], "backup": None, "warnings": []}
    assert not list(tmp_path.glob("out.bak-*"))


def test_a_failed_render_leaves_the_directory_as_it_was(demo_plan_path, tmp_path, capsys, monkeypatch):
    out = tmp_path / "out"
    assert run_seatplan(capsys, monkeypatch, "render", str(demo_plan_path), "-o", str(out))[0] == 0
    before = tree(out)
    broken = saved_variant(demo_plan_path, tmp_path, **{"qwen3-8b": {"port": None}})
    code, _, stderr = run_seatplan(capsys, monkeypatch, "render", broken, "-o", str(out))
    assert code == 2 and f"{broken} (seat qwen3-8b, port)" in stderr and "fix:" in stderr
    assert tree(out) == before
    assert sorted(path.name for path in tmp_path.iterdir()) == ["new.json", "out"]  # no staging directory left behind


def test_one_target_is_replaced_and_the_others_kept(demo_plan_path, tmp_path, capsys, monkeypatch):
    out = tmp_path / "out"
    run_seatplan(capsys, monkeypatch, "render", str(demo_plan_path), "-o", str(out), "--target", "env", "--target", "litellm")
    (out / "notes.txt").write_text("the operator's own file")
    changed = saved_variant(demo_plan_path, tmp_path, **{"qwen3-8b": {"max_new_tokens": 512}})
    code, stdout, _ = run_seatplan(capsys, monkeypatch, "render", changed, "-o", str(out), "--target", "litellm", "--json")
    assert code == 0
    result = json.loads(stdout)
    assert result["changed"] == ["litellm/config.yaml"] and result["backup"]
    assert (out / "notes.txt").exists() and (out / "env" / "qwen3-8b.env").exists()
    assert "max_tokens: 512" in (out / "litellm" / "config.yaml").read_text()


def test_diff_names_each_changed_flag_seat_by_seat(demo_plan_path, tmp_path, capsys, monkeypatch):
    plan = Plan.model_validate_json(demo_plan_path.read_text())
    old_kv = plan.seat("qwen3-8b").kv_cache_memory_bytes
    changed = saved_variant(demo_plan_path, tmp_path, **{"qwen3-8b": {"kv_cache_memory_bytes": old_kv + (1 << 30)}})
    code, stdout, _ = run_seatplan(capsys, monkeypatch, "diff", changed, "--against", str(demo_plan_path), "--json")
    assert code == 1  # issue 18: something would change (as `git diff --exit-code`); this test said 0 before
    report = json.loads(stdout)
    seats = {seat["seat"]: seat for seat in report["seats"]}
    assert report["changed"] is True
    assert seats["qwen3-8b"]["status"] == "changed"
    assert seats["qwen3-8b"]["changes"] == [{"what": "--kv-cache-memory-bytes", "old": str(old_kv), "new": str(old_kv + (1 << 30))}]
    assert {name for name, seat in seats.items() if seat["status"] != "unchanged"} == {"qwen3-8b"}
    assert {name for name, seat in seats.items() if seat["restarts"]} == {"qwen3-8b"}
    assert {item["path"] for item in report["files"] if item["status"] == "changed"} >= {"compose.yaml", "ansible/vars.yaml"}

    # against a rendered directory: the same answer, and nothing is written
    out = tmp_path / "out"
    run_seatplan(capsys, monkeypatch, "render", str(demo_plan_path), "-o", str(out))
    before = tree(out)
    code, stdout, _ = run_seatplan(capsys, monkeypatch, "diff", changed, "--against", str(out), "--json")
    seats = {seat["seat"]: seat for seat in json.loads(stdout)["seats"]}
    assert seats["qwen3-8b"]["changes"][0]["what"] == "--kv-cache-memory-bytes"
    assert tree(out) == before
    code, stdout, stderr = run_seatplan(capsys, monkeypatch, "diff", str(demo_plan_path), "--against", str(out), "--json")
    assert code == 0 and json.loads(stdout)["changed"] is False
    assert "warning" not in stderr  # out/ is this very plan's rollout
    code, table, stderr = run_seatplan(capsys, monkeypatch, "diff", changed, "--against", str(out))
    assert code == 1 and f"--kv-cache-memory-bytes: {old_kv} → {old_kv + (1 << 30)}" in table
    assert "warning" not in stderr  # the demo fleet gives its current_layout
    # the same change planned without any current layout, against another plan's rollout: diff says so
    blind = Plan.model_validate_json(Path(changed).read_text())
    blind.inputs.current_from = None
    (tmp_path / "blind.json").write_text(blind.model_dump_json())
    code, _, stderr = run_seatplan(capsys, monkeypatch, "diff", str(tmp_path / "blind.json"), "--against", str(out))
    assert code == 1 and "made without the current layout" in stderr
    # people see only the seat that changes, and that apply restarts it
    assert "qwen3-8b: changed (apply restarts the engine)" in table and "(re)starts 1 of" in table
    assert not [name for name in seats if name != "qwen3-8b" and f"{name}:" in table]


def test_diff_shows_a_new_and_a_removed_seat(demo_plan_path, tmp_path, capsys, monkeypatch):
    plan = Plan.model_validate_json(demo_plan_path.read_text())
    renamed = plan.model_copy(update={"seats": [seat.model_copy(update={"name": "qwen3-8b-new"}) if seat.name == "qwen3-8b" else seat for seat in plan.seats]})
    path = tmp_path / "renamed.json"
    path.write_text(renamed.model_dump_json())
    report = json.loads(run_seatplan(capsys, monkeypatch, "diff", str(path), "--against", str(demo_plan_path), "--json")[1])
    status = {seat["seat"]: seat["status"] for seat in report["seats"]}
    assert status["qwen3-8b"] == "removed" and status["qwen3-8b-new"] == "new"
    restarts = {seat["seat"]: seat["restarts"] for seat in report["seats"]}
    assert restarts["qwen3-8b-new"] and not restarts["qwen3-8b"]


def test_bad_input_is_a_clear_error(demo_plan_path, tmp_path, capsys, monkeypatch):
    code, _, stderr = run_seatplan(capsys, monkeypatch, "render", str(demo_plan_path), "-o", str(tmp_path / "o"), "--target", "helm")
    assert code == 2 and "unknown target 'helm'" in stderr
    code, _, stderr = run_seatplan(capsys, monkeypatch, "render", str(demo_plan_path), "-o", str(tmp_path / "o"), "--restart", "script")
    assert code == 2 and "--restart-script" in stderr
    code, _, stderr = run_seatplan(capsys, monkeypatch, "diff", str(demo_plan_path), "--against", str(tmp_path / "missing"))
    assert code == 2 and "nothing to compare with" in stderr
    (tmp_path / "bad.json").write_text("{")
    code, _, stderr = run_seatplan(capsys, monkeypatch, "render", str(tmp_path / "bad.json"), "-o", str(tmp_path / "o"))
    assert code == 2 and "not JSON" in stderr
    assert not (tmp_path / "o").exists()


def test_diff_against_a_folder_seatplan_did_not_render_and_rollback_of_a_file(demo_plan_path, tmp_path, capsys, monkeypatch):
    """A newcomer's mix-ups: `diff --against` a folder of other files (every line would be noise) and `rollback`
    given the plan instead of the rendered directory. Each is a located error with its fix, exit 2."""
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("the operator's own file")
    code, stdout, stderr = run_seatplan(capsys, monkeypatch, "diff", str(demo_plan_path), "--against", str(tmp_path / "mine"))
    assert code == 2 and stdout == "" and f"error: {tmp_path / 'mine'}: the directory holds files but no seatplan-render.json" in stderr
    assert "fix: pass the directory `seatplan render -o DIR` wrote" in stderr
    (tmp_path / "new").mkdir()  # an empty folder is a new one: the diff is everything render would write
    assert run_seatplan(capsys, monkeypatch, "diff", str(demo_plan_path), "--against", str(tmp_path / "new"))[0] == 1
    for directory, said in ((demo_plan_path, "is a file, not a directory"), (tmp_path / "absent", "no such directory")):
        code, _, stderr = run_seatplan(capsys, monkeypatch, "rollback", str(directory), "--to", "night2")
        assert code == 2 and f"error: {directory}: {said}" in stderr and "fix: pass the directory `seatplan render -o DIR`" in stderr


def test_a_file_diff_shows_only_the_lines_that_changed(demo_plan_path, tmp_path, capsys, monkeypatch):
    """compose.yaml is over 200 lines, where difflib's autojunk ignored its recurring lines (`- '1024'`,
    `- --max-num-seqs`): one changed flag showed every flag after it as removed and added again."""
    plan = Plan.model_validate_json(demo_plan_path.read_text())
    seat = plan.seat("qwen3-8b")
    old_kv, old_util = seat.kv_cache_memory_bytes, seat.gpu_memory_utilization
    assert old_kv is not None and old_util is not None
    # the README's change: more KV, another utilisation and an output cap (a flag added at the end)
    changed = saved_variant(demo_plan_path, tmp_path, **{"qwen3-8b": {"kv_cache_memory_bytes": old_kv + (1 << 30),
                                                                       "gpu_memory_utilization": old_util + 0.011, "max_new_tokens": 4096}})
    code, stdout, _ = run_seatplan(capsys, monkeypatch, "diff", changed, "--against", str(demo_plan_path), "--json")
    assert code == 1
    [compose] = [item for item in json.loads(stdout)["files"] if item["path"] == "compose.yaml"]
    removed = [line[1:] for line in compose["diff"].splitlines() if line.startswith("-") and not line.startswith("---")]
    added = [line[1:] for line in compose["diff"].splitlines() if line.startswith("+") and not line.startswith("+++")]
    assert removed == [f"    - '{old_kv}'", f"    - '{old_util:.3f}'"]
    assert added[:2] == [f"    - '{old_kv + (1 << 30)}'", f"    - '{old_util + 0.011:.3f}'"] and "    - --override-generation-config" in added
    assert not set(removed) & set(added)  # nothing shown removed and added again


def test_the_file_diff_is_difflibs_on_files_short_of_autojunk(rng):
    """Below 200 lines difflib's autojunk never applies: there the file diff is difflib.unified_diff's, byte for byte."""
    for _ in range(500):
        before = [rng.choice("abcde") + "\n" for _ in range(rng.randint(0, 40))]
        after = list(before)
        for _ in range(rng.randint(0, 6)):
            edit = rng.random()
            if edit < 0.3 and after:
                del after[rng.randrange(len(after))]
            elif edit < 0.6:
                after.insert(rng.randint(0, len(after)), rng.choice("abcdefg") + "\n")
            elif after:
                after[rng.randrange(len(after))] = rng.choice("xyz") + "\n"
        assert unified("".join(before), "".join(after), "f") == "".join(difflib.unified_diff(before, after, "a/f", "b/f"))
