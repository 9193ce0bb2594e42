"""`seatplan render --target kubernetes`: every manifest passes the Kubernetes 1.36 and 1.37 OpenAPI schemas in strict mode
(kubernetes-validate), the claims ask for the plan's bytes on the plan's GPUs, and hostile names, secrets and values
reach the YAML as data. No API server runs on this machine, so the schemas are the check; `kubectl kustomize` (local)
builds the directory where kubectl is installed."""

from __future__ import annotations

import json
import random
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from kits.kubernetes import VERSIONS, cluster_fleet, kustomize_builds, manifests, validate_all, validate_strictly
from kits.paths import REPO_ROOT
from kits.render import DEMO_FLEET, FIXTURES
from kits.rollout import build_plan_file
from seatplan.documents.io import read_plan
from seatplan.documents.plan import Plan, PlannedVllmSeat
from seatplan.engine.command import engine_command
from seatplan.errors import SeatplanError
from seatplan.render.api import diff_against, load_plan, render_to
from seatplan.render.bundle import render_files, render_warnings
from seatplan.render.gateway_config import LiveConfig
from seatplan.render.kubernetes import SECRET, object_name, seat_path
from seatplan.render.settings import RenderSettings, container_launcher
from seatplan.verify.expect import seat_expectations
from seatplan.verify.loading import load_context

SERVICE_NAME = re.compile(r"[a-z]([-a-z0-9]{0,61}[a-z0-9])?")


def claims_by_seat(files: dict[str, str]) -> dict[str, dict]:
    """Each seat's one device request, by the seat's own name (its annotation)."""
    found = {}
    for _, document in manifests(files):
        if document["kind"] == "ResourceClaimTemplate":
            found[document["metadata"]["annotations"]["seatplan.dev/seat"]] = document["spec"]["spec"]["devices"]["requests"][0]["exactly"]
        elif document["kind"] == "ResourceClaim":
            found[document["metadata"]["annotations"]["seatplan.dev/seat"]] = document["spec"]["devices"]["requests"][0]["exactly"]
    return found


def check_claims(plan, files: dict[str, str]) -> None:
    """Every placed seat on a GPU has a claim of its footprint on exactly its GPUs (by UUID where the fleet gives them all)."""
    claims = claims_by_seat(files)
    gpus = {f"{gpu.host}:{gpu.index}": gpu for gpu in plan.gpus}
    placed = [seat for seat in plan.seats if seat.gpus and seat.device == "cuda"]
    assert sorted(claims) == sorted(seat.name for seat in placed)
    for seat in placed:
        claim = claims[seat.name]
        assert claim["deviceClassName"] == "gpu.nvidia.com"
        assert int(claim["capacity"]["requests"]["memory"]) == seat.footprint_bytes
        assert claim["count"] == len(seat.gpus) == seat.tensor_parallel_size
        expression = claim["selectors"][0]["cel"]["expression"]
        chosen = [gpus[label] for label in seat.gpus]
        if all(gpu.uuid for gpu in chosen):
            assert sorted(re.findall(r'"(GPU-[0-9a-f-]+)"', expression)) == sorted(gpu.uuid for gpu in chosen)
        else:
            assert sorted(int(index) for index in re.findall(r"\d+", expression.split(" in ")[1])) == sorted(gpu.index for gpu in chosen)


def test_demo_manifests_pass_strict_validation_and_claim_the_plan_bytes(demo_plan_path, tmp_path):
    plan = read_plan(demo_plan_path)
    settings = RenderSettings(plan_path=str(demo_plan_path))
    files = render_files(plan, settings, ["kubernetes"])
    # 1 fixed seat (claim + holder), 7 engines (claim template, Deployment, Service), the ConfigMap
    assert validate_all(files, tmp_path) == 2 + 3 * 7 + 1
    check_claims(plan, files)
    for path, text in files.items():
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text(text)
    built = kustomize_builds(tmp_path / "kubernetes")
    if built is not None:
        assert len(built) == 2 + 3 * 7 + 2 and {item["metadata"]["namespace"] for item in built} == {"seatplan"}


def test_validation_fails_on_a_missing_schema_and_an_unknown_field():
    """The check can fail: a kind of no schema and a field the schema lacks are failures, in both versions."""
    for version in VERSIONS:
        with pytest.raises(AssertionError, match="no schema"):
            validate_strictly({"apiVersion": "resource.k8s.io/v9", "kind": "ResourceClaim", "metadata": {"name": "x"}, "spec": {}}, version)
        with pytest.raises(AssertionError, match="invalid"):
            validate_strictly({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "x"}, "spec": {"ports": [{"port": 1, "bytes": 2}]}}, version)


def fitting_cluster_fleet(draw: random.Random, directory: Path) -> tuple[Plan, dict[str, str]]:
    """A drawn fleet that the planner places (draws that do not fit are drawn again: the planner's refusal is tested elsewhere)."""
    for _ in range(20):
        fleet, renamed = cluster_fleet(draw, directory)
        try:
            return read_plan(build_plan_file(fleet, directory / "plan.json")), renamed
        except AssertionError:
            continue
    raise AssertionError("20 drawn fleets in a row did not fit")


@pytest.mark.parametrize("draw_number", range(5))
def test_random_fleets_render_valid_manifests(draw_number, rng, tmp_path):
    """Random fleets (TP 2 seats, fixed seats, 1-2 hosts, some GPU UUIDs) with hostile seat names, secrets by reference and
    `$(VAR)`-laden values: every manifest valid for both versions, the claims the plan's bytes, names DNS labels, no secret value."""
    draw = rng
    plan, renamed = fitting_cluster_fleet(draw, tmp_path)
    settings = RenderSettings(plan_path=str(tmp_path / "plan.json"), namespace=draw.choice(["seatplan", "llm-prod", "a"]))
    files = render_files(plan, settings, ["kubernetes"])
    validate_all(files, tmp_path)
    check_claims(plan, files)
    seats = {seat.name: seat for seat in plan.seats}
    for _, document in manifests(files):
        meta = document.get("metadata", {})
        if document["kind"] in ("Deployment", "Service", "ResourceClaimTemplate", "ResourceClaim"):
            assert SERVICE_NAME.fullmatch(meta["name"]), meta["name"]
            seat = seats[meta["annotations"]["seatplan.dev/seat"]]
            assert meta["name"] == object_name(seat.name)
        if document["kind"] == "Deployment" and document["metadata"]["labels"]["app.kubernetes.io/name"] == "vllm":
            container = document["spec"]["template"]["spec"]["containers"][0]
            seat = seats[meta["annotations"]["seatplan.dev/seat"]]
            env = {item["name"]: item for item in container.get("env", [])}
            for key, source in seat.env_from_host.items():
                assert env[key] == {"name": key, "valueFrom": {"secretKeyRef": {"name": SECRET, "key": source}}}
            for key, value in seat.env.items():
                if key != "CUDA_VISIBLE_DEVICES":
                    assert env[key]["value"].replace("$$", "$") == value  # Kubernetes reads `$$` as `$`, `$(X)` never expands
            assert "CUDA_VISIBLE_DEVICES" not in env
            # the command is the plan's launch, built as every target builds it (listening on every interface, as in compose)
            assert isinstance(seat, PlannedVllmSeat) and seat.launch is not None
            assert [word.replace("$$", "$") for word in container["command"] + container["args"]] == engine_command(seat.launch, container_launcher(settings))
    gateway = yaml.safe_load(yaml.safe_load(files["kubernetes/gateway.yaml"])["data"]["config.yaml"])
    bases = {entry["litellm_params"]["api_base"] for entry in gateway["model_list"]}
    engines = [seat for seat in plan.vllm_seats() if seat.gpus]
    assert bases == {f"http://{object_name(seat.name)}.{settings.namespace}.svc:{seat.port}/v1" for seat in engines}
    # the gateway reaches a keyed engine with the key's reference, the same variable the engine's Secret key names
    for entry in gateway["model_list"]:
        seat = next(seat for seat in engines if entry["litellm_params"]["api_base"].startswith(f"http://{object_name(seat.name)}."))
        assert entry["litellm_params"].get("api_key") == (f"os.environ/{seat.env_from_host['VLLM_API_KEY']}" if "VLLM_API_KEY" in seat.env_from_host else None)
    assert {seat.name for seat in plan.seats} == set(renamed.values())  # the drawn names are the ones rendered


def test_the_gateway_configmap_keeps_the_operator_settings(demo_plan_path):
    """A live LiteLLM config given to render: the ConfigMap keeps its other sections and entries, only the seats' routes change."""
    live_text = (FIXTURES / "formats" / "litellm_config.yaml").read_text()
    plan = read_plan(demo_plan_path)
    files = render_files(plan, RenderSettings(plan_path=str(demo_plan_path)), ["kubernetes"], LiveConfig(display="live.yaml", text=live_text))
    config = yaml.safe_load(yaml.safe_load(files["kubernetes/gateway.yaml"])["data"]["config.yaml"])
    live = yaml.safe_load(live_text)
    assert config["litellm_settings"] == live["litellm_settings"]
    assert config["general_settings"] == live["general_settings"]
    kept = [entry for entry in config["model_list"] if entry["model_name"] == "qwen3-embed-8b"]
    assert kept == [entry for entry in live["model_list"] if entry["model_name"] == "qwen3-embed-8b"]
    assert "http://qwen3-30b-a3b.seatplan.svc:8000/v1" in {entry["litellm_params"]["api_base"] for entry in config["model_list"]}


def test_secrets_are_named_in_a_warning_and_never_written(tmp_path):
    fleet = DEMO_FLEET.read_text().replace("    port: 8004\n", "    port: 8004\n    env:\n      HF_TOKEN: {from_host_env: HF_TOKEN}\n")
    (tmp_path / "fleet.yaml").write_text(fleet)
    for model in (DEMO_FLEET.parent / "models").iterdir():
        (tmp_path / "models").mkdir(exist_ok=True)
        (tmp_path / "models" / model.name).symlink_to(model)
    plan = read_plan(build_plan_file(tmp_path / "fleet.yaml", tmp_path / "plan.json"))
    settings = RenderSettings(plan_path=str(tmp_path / "plan.json"), engine_key_env="ENGINE_KEY")
    warnings = render_warnings(plan, settings, ["kubernetes"])
    assert any(f"Secret {SECRET}" in warning and "ENGINE_KEY, HF_TOKEN" in warning for warning in warnings), warnings
    files = render_files(plan, settings, ["kubernetes"])
    validate_all(files, tmp_path)
    assert "secretKeyRef" in files["kubernetes/seats/qwen3-4b.yaml"]


def test_names_kubernetes_cannot_tell_apart_are_refused(demo_plan_path):
    """Two seats whose Kubernetes names would collide: render names both and writes nothing."""
    plan = read_plan(demo_plan_path)
    first, second = plan.vllm_seats()[:2]
    # object_name keeps a DNS label as it is and hashes any other; a seat named as another's hashed form collides
    clash = object_name("Qwen.A")
    renamed = plan.model_copy(update={"seats": [seat.model_copy(update={"name": {first.name: "Qwen.A", second.name: clash}.get(seat.name, seat.name)})
                                                for seat in plan.seats]})
    with pytest.raises(SeatplanError, match="both become the Kubernetes name"):
        render_files(renamed, RenderSettings(), ["kubernetes"])


def test_the_shipped_demo_manifests_are_regenerated_byte_for_byte(demo_plan_path, tmp_path):
    """examples/kubernetes/ (the golden files docs/kubernetes.md shows) is what scripts/make_kubernetes_example.py writes,
    and each claim in it asks for the demo plan's footprint of its seat, in bytes, on the plan's GPUs."""
    done = subprocess.run([sys.executable, str(REPO_ROOT / "scripts" / "make_kubernetes_example.py"), str(tmp_path / "k")],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    shipped_root = REPO_ROOT / "examples" / "kubernetes"
    written = {path.relative_to(tmp_path / "k").as_posix(): path.read_text() for path in (tmp_path / "k").rglob("*") if path.is_file()}
    shipped = {path.relative_to(shipped_root).as_posix(): path.read_text() for path in shipped_root.rglob("*") if path.is_file()}
    assert written == shipped
    check_claims(read_plan(demo_plan_path), {f"kubernetes/{path}": text for path, text in shipped.items()})


def test_diff_against_a_cluster_render_compares_the_cluster_files_only(demo_plan_path, tmp_path):
    """`seatplan diff` against a directory rendered with --target kubernetes: nothing changes for the same plan, and a seat's
    new KV bytes show as its manifest changed (the host targets, never rendered there, are not reported as added)."""
    loaded = load_plan(demo_plan_path)
    settings = RenderSettings(plan_path=str(demo_plan_path))
    render_to(loaded, settings, ["kubernetes"], tmp_path / "rendered")
    same = diff_against(loaded, tmp_path / "rendered")
    assert not same.changed
    document = json.loads(demo_plan_path.read_text())
    seat = next(seat for seat in document["seats"] if seat["name"] == "qwen3-8b")
    seat["launch"]["kv"]["kv_cache_memory_bytes"] += 1 << 30
    seat["kv_cache_memory_bytes"] += 1 << 30
    (tmp_path / "plan2.json").write_text(json.dumps(document))
    changed = diff_against(load_plan(tmp_path / "plan2.json"), tmp_path / "rendered")
    assert changed.changed
    assert {item.path for item in changed.files if item.status != "unchanged"} == {"kubernetes/seats/qwen3-8b.yaml"}


def test_a_gpu_uuid_reaches_the_plan_and_a_fleet_without_one_plans_as_before(demo_plan_path, tmp_path):
    """`gpus[].uuid` is carried to the plan (the claims select by it); a fleet without UUIDs writes no `uuid` key, so its
    plan.json is what it was; a UUID that is not nvidia-smi's is refused at its line."""
    assert '"uuid"' not in demo_plan_path.read_text()
    (tmp_path / "models").symlink_to(DEMO_FLEET.parent / "models")
    uuid = "GPU-0a1b2c3d-4e5f-6789-abcd-ef0123456789"
    text = DEMO_FLEET.read_text().replace("- {index: 2, name: RTX PRO 6000 Blackwell, total_bytes: 95.59GiB}",
                                          f"- {{index: 2, name: RTX PRO 6000 Blackwell, total_bytes: 95.59GiB, uuid: {uuid}}}")
    (tmp_path / "fleet.yaml").write_text(text)
    plan = read_plan(build_plan_file(tmp_path / "fleet.yaml", tmp_path / "plan.json"))
    assert [gpu.uuid for gpu in plan.gpus if gpu.index == 2] == [uuid]
    files = render_files(plan, RenderSettings(), ["kubernetes"])
    on_two = [seat for seat in plan.seats if seat.gpus == ["gpu-box:2"]]
    assert on_two and all(f'.uuid in ["{uuid}"]' in files[seat_path(seat.name)] for seat in on_two)
    (tmp_path / "bad.yaml").write_text(text.replace(uuid, "GPU-nope"))
    with pytest.raises(SeatplanError, match=r"bad\.yaml:\d+"):
        build_plan_file(tmp_path / "bad.yaml", tmp_path / "bad-plan.json")


def test_verify_asks_every_engine_at_the_service_render_routes_the_gateway_to(demo_plan_path):
    """`seatplan verify PLAN --namespace NS` checks each engine at `SEAT.NS.svc:PORT`, the very address the rendered gateway
    ConfigMap routes to (hashed names included). Cluster DNS does not resolve on this machine, so the probe itself is the
    host case's (tests/verify); this holds the two addresses to one."""
    context = load_context(demo_plan_path, None)
    expectations = seat_expectations(context.plan, context.hosts, context.fleet_dir, context.facts_loader, namespace="llm-prod")
    files = render_files(context.plan, RenderSettings(namespace="llm-prod"), ["kubernetes"])
    gateway = yaml.safe_load(yaml.safe_load(files["kubernetes/gateway.yaml"])["data"]["config.yaml"])
    routes = {entry["model_name"]: entry["litellm_params"]["api_base"].removesuffix("/v1") for entry in gateway["model_list"]}
    assert {item.served_model_name: item.base_url for item in expectations} == routes
    assert "http://llama-3-2-3b-30c3f6c6.llm-prod.svc:8007" in routes.values()
    on_hosts = seat_expectations(context.plan, context.hosts, context.fleet_dir, context.facts_loader)
    assert all(".svc:" not in item.base_url for item in on_hosts)


def test_verify_refuses_a_namespace_that_is_no_dns_name(cli, demo_plan_path):
    result = cli("verify", str(demo_plan_path), "--namespace", "a b/c")
    assert result.exit_code == 2 and "--namespace" in result.stderr
