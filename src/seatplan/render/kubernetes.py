"""Pure builders of the Kubernetes target: the plan's seats as Deployments whose GPUs come from DRA claims of the plan's bytes.

Per vLLM seat ``kubernetes/seats/NAME.yaml`` holds a ResourceClaimTemplate (``resource.k8s.io/v1``) asking the NVIDIA
DRA driver's device class for the seat's footprint at plateau in bytes (``capacity.requests.memory``, consumable
capacity, KEP-5075) on the GPUs the plan chose, a Deployment (one replica, ``Recreate``: the old pod and its claim go
before the new one asks) and a Service; a fixed seat on a GPU becomes ``kubernetes/fixed/NAME.yaml``, a ResourceClaim of
its bytes held by a pause pod (a claim no pod references is never allocated, so the scheduler would not count it).
The gateway's config (a ConfigMap), the alert rules (a PrometheusRule) and ``kustomization.yaml`` come last.
docs/kubernetes.md says what the cluster needs and cites the driver's attributes.
"""

from __future__ import annotations

import dataclasses
import re

import yaml

from seatplan.documents.plan import Plan, PlannedGpu, PlannedSeat
from seatplan.encode import BlockText, dump_yaml, kubernetes_literal, kubernetes_name
from seatplan.engine.endpoint import service_address
from seatplan.errors import SeatplanError
from seatplan.render.engines import Engine, FixedSeat
from seatplan.render.gateway_config import LiveConfig
from seatplan.render.settings import RenderSettings, container_launcher
from seatplan.render.targets import HEADER, Files, litellm_config, prometheus_rules

ROOT = "kubernetes"
# The NVIDIA DRA driver's DeviceClass for full GPUs and the attribute domain of its devices (kubernetes-sigs/
# dra-driver-nvidia-gpu, docs/kubernetes.md): `uuid` on every release, `index` on the releases that still publish it.
DEVICE_CLASS = "gpu.nvidia.com"
DEVICE_DOMAIN = "gpu.nvidia.com"
CLAIM = "gpu"  # the one request of a seat's claim and the pod's name for it
SECRET = "seatplan-secrets"  # the Secret the operator creates: one key per variable the fleet file names by reference
GATEWAY_CONFIGMAP = "seatplan-litellm"
ALERTS = "seatplan-alerts"
# A fixed seat's claim is held by a container that does nothing: the claim is allocated when a pod needing it is scheduled.
PAUSE_IMAGE = "registry.k8s.io/pause:3.10"
HF_CACHE = "/root/.cache/huggingface"  # where vLLM's image keeps the Hub's files (compose mounts the host's HF_HOME there too)
HF_CACHE_ON_NODE = "/var/lib/seatplan/huggingface"
PROBE_PERIOD_S = 10
SEAT_ANNOTATION = "seatplan.dev/seat"
FOOTPRINT_ANNOTATION = "seatplan.dev/footprint-bytes"
NODE_NAME = re.compile(r"(?=.{1,253}$)[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")


def object_name(seat: str) -> str:
    """The name of every object of the seat (encode.kubernetes_name, which verify's Service addresses use too)."""
    return kubernetes_name(seat)


def seat_path(seat: str) -> str:
    return f"{ROOT}/seats/{object_name(seat)}.yaml"


def fixed_path(seat: str) -> str:
    return f"{ROOT}/fixed/{object_name(seat)}.yaml"


GATEWAY_PATH = f"{ROOT}/gateway.yaml"
ALERTS_PATH = f"{ROOT}/alerts.yaml"
KUSTOMIZATION_PATH = f"{ROOT}/kustomization.yaml"


def service_host(engine: Engine, settings: RenderSettings) -> str:
    """The Service's DNS name inside the cluster: what the gateway and Prometheus reach the engine at."""
    return service_address(engine.name, settings.namespace)


def labels(name: str, component: str) -> dict[str, str]:
    return {"app.kubernetes.io/name": component, "app.kubernetes.io/instance": name, "app.kubernetes.io/managed-by": "seatplan"}


def metadata(name: str, component: str, seat: PlannedSeat, settings: RenderSettings) -> dict:
    # the seat's own name (any the fleet file allows) as an annotation: label values are narrower than seat names
    return {"name": name, "namespace": settings.namespace, "labels": labels(name, component),
            "annotations": {SEAT_ANNOTATION: seat.name, FOOTPRINT_ANNOTATION: str(seat.footprint_bytes)}}


# ----------------------------------------------------------------------------- DRA claims


def planned_gpus(plan: Plan, seat: PlannedSeat) -> list[PlannedGpu]:
    by_label = {f"{gpu.host}:{gpu.index}": gpu for gpu in plan.gpus}
    missing = [label for label in seat.gpus if label not in by_label]
    if missing:
        raise SeatplanError(f"seat {seat.name} is placed on {', '.join(missing)}, which the plan's GPU list does not hold", where=f"seat {seat.name}, gpus",
                            fix="re-plan (seatplan plan FLEET -o plan.json) instead of editing the plan")
    return [by_label[label] for label in seat.gpus]


def device_selector(gpus: list[PlannedGpu]) -> str:
    """CEL choosing exactly the plan's GPUs on the seat's node: by UUID where the fleet file gives every one (unique in
    the cluster), else by CUDA index (unique on the node the Deployment is pinned to)."""
    attribute = f'device.attributes["{DEVICE_DOMAIN}"]'
    if all(gpu.uuid for gpu in gpus):
        return f"{attribute}.uuid in [{', '.join(f'{chr(34)}{gpu.uuid}{chr(34)}' for gpu in gpus)}]"
    return f"{attribute}.index in [{', '.join(str(gpu.index) for gpu in gpus)}]"


def device_request(plan: Plan, seat: PlannedSeat) -> dict:
    """One request for the seat's N GPUs, each consuming the seat's footprint per GPU (the bytes the plan placed)."""
    gpus = planned_gpus(plan, seat)
    return {"name": CLAIM, "exactly": {
        "deviceClassName": DEVICE_CLASS,
        "allocationMode": "ExactCount",
        "count": len(gpus),
        "selectors": [{"cel": {"expression": device_selector(gpus)}}],
        # a Quantity of plain bytes: the driver's request policy (step 1Mi) rounds it up to the next MiB, never down
        "capacity": {"requests": {"memory": str(seat.footprint_bytes)}},
    }}


def claim_template(plan: Plan, engine: Engine, settings: RenderSettings) -> dict:
    name = object_name(engine.name)
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate", "metadata": metadata(name, "vllm", engine.seat, settings),
            "spec": {"spec": {"devices": {"requests": [device_request(plan, engine.seat)]}}}}


def node_affinity(host: str) -> dict:
    """The pod on the plan's host (a node of that name): GPU indices are a node's, and the plan's bytes are per GPU."""
    term = {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [host]}]}
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}}}


# ----------------------------------------------------------------------------- the engine's Deployment and Service


def container_env(engine: Engine) -> list[dict]:
    """The seat's values (`$` escaped as Kubernetes expands `$(VAR)`); a secret by reference, as a key of SECRET.
    CUDA_VISIBLE_DEVICES stays out: the driver exposes the claimed GPUs, renumbered from 0."""
    seat = engine.seat
    env: list[dict] = [{"name": key, "value": kubernetes_literal(value)} for key, value in sorted(seat.env.items()) if key != "CUDA_VISIBLE_DEVICES"]
    env += [{"name": key, "valueFrom": {"secretKeyRef": {"name": SECRET, "key": source}}} for key, source in sorted(seat.env_from_host.items())]
    return env


def probes(settings: RenderSettings) -> dict:
    check = {"httpGet": {"path": "/health", "port": "http"}, "periodSeconds": PROBE_PERIOD_S, "timeoutSeconds": 5}
    # the startup probe allows the render's health timeout (weights and compilation take minutes); the others take over after
    return {"startupProbe": check | {"failureThreshold": max(1, -(-settings.health_timeout_s // PROBE_PERIOD_S))},
            "readinessProbe": check | {"failureThreshold": 3},
            "livenessProbe": check | {"failureThreshold": 6}}


def model_volume(model: str) -> tuple[dict, dict]:
    """The model's directory on the node at the same path, read-only; a Hub name reads the node's Hub cache."""
    if model.startswith("/"):
        return ({"name": "model", "hostPath": {"path": model, "type": "Directory"}},
                {"name": "model", "mountPath": model, "readOnly": True})
    return ({"name": "model", "hostPath": {"path": HF_CACHE_ON_NODE, "type": "DirectoryOrCreate"}},
            {"name": "model", "mountPath": HF_CACHE})


def deployment(engine: Engine, settings: RenderSettings) -> dict:
    name = object_name(engine.name)
    launcher_words = len(container_launcher(settings))  # boot_args start with it (a host's launcher is not in the image)
    volume, mount = model_volume(engine.launch.model)
    # vLLM's workers share tensors through /dev/shm (compose: ipc: host); a pod's default is 64 MiB
    volumes = [volume, {"name": "shm", "emptyDir": {"medium": "Memory"}}]
    container: dict = {
        "name": "vllm",
        "image": engine.image or "",  # bundle.render_files renders kubernetes only where each engine has one
        "command": [kubernetes_literal(word) for word in engine.boot_args[:launcher_words]],
        "args": [kubernetes_literal(arg) for arg in engine.boot_args[launcher_words:]],
        "ports": [{"name": "http", "containerPort": engine.port}],
        **probes(settings),
        "volumeMounts": [mount, {"name": "shm", "mountPath": "/dev/shm"}],
    }
    env = container_env(engine)
    if env:
        container["env"] = env
    pod: dict = {"affinity": node_affinity(engine.host), "containers": [container], "volumes": volumes}
    if engine.seat.device == "cuda":
        container["resources"] = {"claims": [{"name": CLAIM}]}
        pod["resourceClaims"] = [{"name": CLAIM, "resourceClaimTemplateName": name}]
    meta = metadata(name, "vllm", engine.seat, settings)
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": meta, "spec": {
        "replicas": 1,
        # one engine at a time on its GPUs: the old pod (and the bytes its claim holds) goes before the new one starts
        "strategy": {"type": "Recreate"},
        "selector": {"matchLabels": {"app.kubernetes.io/instance": name}},
        "template": {"metadata": {"labels": meta["labels"], "annotations": meta["annotations"]}, "spec": pod},
    }}


def service(engine: Engine, settings: RenderSettings) -> dict:
    name = object_name(engine.name)
    return {"apiVersion": "v1", "kind": "Service", "metadata": metadata(name, "vllm", engine.seat, settings), "spec": {
        "selector": {"app.kubernetes.io/instance": name},
        "ports": [{"name": "http", "port": engine.port, "targetPort": "http"}],
    }}


def documents_text(documents: list[dict], comment: str = "") -> str:
    return HEADER + comment + "".join(("---\n" if position else "") + dump_yaml(document) for position, document in enumerate(documents))


# ----------------------------------------------------------------------------- fixed seats


def fixed_documents(plan: Plan, fixed: FixedSeat, settings: RenderSettings) -> list[dict]:
    """The fixed seat's bytes as a ResourceClaim the scheduler counts, held by a pause pod; the seat itself runs
    where the operator runs it (seatplan starts no process for it here)."""
    name = object_name(fixed.name)
    claim = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": metadata(name, "seatplan-hold", fixed.seat, settings),
             "spec": {"devices": {"requests": [device_request(plan, fixed.seat)]}}}
    meta = metadata(name, "seatplan-hold", fixed.seat, settings)
    holder = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": meta, "spec": {
        "replicas": 1, "strategy": {"type": "Recreate"}, "selector": {"matchLabels": {"app.kubernetes.io/instance": name}},
        "template": {"metadata": {"labels": meta["labels"], "annotations": meta["annotations"]}, "spec": {
            "affinity": node_affinity(fixed.host),
            "containers": [{"name": "hold", "image": PAUSE_IMAGE, "resources": {"claims": [{"name": CLAIM}]}}],
            "resourceClaims": [{"name": CLAIM, "resourceClaimName": name}],
        }},
    }}
    return [claim, holder]


# ----------------------------------------------------------------------------- the whole target


def cluster_engines(engines: list[Engine], settings: RenderSettings) -> list[Engine]:
    """The engines as the cluster reaches them: at their Service (the gateway's api_base, Prometheus' instance)."""
    return [dataclasses.replace(engine, address=service_host(engine, settings), gateway_address=None, gateway_port=None, bind_host=None)
            for engine in engines]


def check_object_names(plan: Plan) -> None:
    taken: dict[str, str] = {}
    for seat in plan.seats:
        name = object_name(seat.name)
        other = taken.setdefault(name, seat.name)
        if other != seat.name:
            raise SeatplanError(f"seats {other} and {seat.name} both become the Kubernetes name {name}", where=f"seat {seat.name}",
                                fix="rename one of them in the fleet file (lower-case letters, digits and `-` keep a name as it is) and re-plan")


def gateway_configmap(engines: list[Engine], settings: RenderSettings, live: LiveConfig | None) -> dict:
    text = litellm_config(cluster_engines(engines, settings), settings, live)["litellm/config.yaml"]
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": GATEWAY_CONFIGMAP, "namespace": settings.namespace, "labels": labels(GATEWAY_CONFIGMAP, "litellm")},
            "data": {"config.yaml": BlockText(text)}}


def prometheus_rule(plan: Plan, engines: list[Engine], settings: RenderSettings) -> dict:
    """The rules the prometheus target writes, for the engines at their Services, as the Prometheus Operator's CRD."""
    text = prometheus_rules(plan, cluster_engines(engines, settings), settings)["prometheus/seatplan.rules.yaml"]
    return {"apiVersion": "monitoring.coreos.com/v1", "kind": "PrometheusRule",
            "metadata": {"name": ALERTS, "namespace": settings.namespace, "labels": labels(ALERTS, "prometheus")},
            "spec": yaml.safe_load(text)}


def kubernetes_files(plan: Plan, engines: list[Engine], fixed: list[FixedSeat], settings: RenderSettings,
                     live: LiveConfig | None = None) -> Files:
    """Every file under kubernetes/: the fixed seats' claims first, then the engines in boot order, then the gateway and alerts."""
    check_object_names(plan)
    files: Files = {}
    for item in fixed:
        if item.seat.device == "cuda":
            comment = f"# fixed seat {item.name}: its bytes held on GPU {', '.join(item.seat.gpus)}; the seat itself runs outside this render\n"
            files[fixed_path(item.name)] = documents_text(fixed_documents(plan, item, settings), comment)
    for engine in engines:
        documents = [claim_template(plan, engine, settings)] if engine.seat.device == "cuda" else []
        documents += [deployment(engine, settings), service(engine, settings)]
        comment = f"# seat {engine.name} on {', '.join(engine.seat.gpus)}: {engine.seat.footprint_bytes:,} bytes per GPU at plateau\n"
        files[seat_path(engine.name)] = documents_text(documents, comment)
    files[GATEWAY_PATH] = documents_text([gateway_configmap(engines, settings, live)])
    files[ALERTS_PATH] = documents_text([prometheus_rule(plan, engines, settings)])
    resources = [path.removeprefix(f"{ROOT}/") for path in files]
    files[KUSTOMIZATION_PATH] = HEADER + dump_yaml({"apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization",
                                                    "namespace": settings.namespace, "resources": resources})
    return files


def kubernetes_warnings(plan: Plan, engines: list[Engine], fixed: list[FixedSeat]) -> list[str]:
    """What the operator must do or know before applying: the Secret's keys, files a pod cannot read, GPUs chosen by index."""
    warnings = []
    keys = sorted({source for engine in engines for source in engine.seat.env_from_host.values()})
    if keys:
        warnings.append(f"the engines read {', '.join(keys)} from the Secret {SECRET}, which seatplan does not write: create it in the namespace "
                        f"first (kubectl create secret generic {SECRET} --from-literal=NAME=... for each; docs/kubernetes.md)")
    with_files = [engine.name for engine in engines if engine.seat.env_files]
    if with_files:
        warnings.append(f"seats {', '.join(with_files)} read env_files on their host, which no pod reads: put those variables in the Secret {SECRET} "
                        "and name them with from_host_env in the fleet file")
    on_gpus: list[PlannedSeat] = [engine.seat for engine in engines if engine.seat.device == "cuda"]
    on_gpus += [item.seat for item in fixed if item.seat.device == "cuda"]
    by_index = sorted({label for seat in on_gpus for label, gpu in zip(seat.gpus, planned_gpus(plan, seat), strict=True) if not gpu.uuid})
    if by_index:
        warnings.append(f"GPUs {', '.join(by_index)} have no uuid in the fleet file, so their claims select them by the driver's `index` attribute, "
                        "which only some releases of the NVIDIA DRA driver publish: give each GPU's uuid (nvidia-smi --query-gpu=index,uuid) in the fleet file")
    nodes = sorted(host for host in {engine.host for engine in engines} | {item.host for item in fixed} if not NODE_NAME.fullmatch(host))
    if nodes:
        warnings.append(f"hosts {', '.join(nodes)} are no Kubernetes node names (lower-case DNS names): the pods pinned to them never schedule; "
                        "name each host as its node is named")
    return warnings
