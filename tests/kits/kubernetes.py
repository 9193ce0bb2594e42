"""The Kubernetes target's checks, shared by its tests: strict schema validation of every manifest (kubernetes-validate, the
Kubernetes OpenAPI schemas), promtool on the PrometheusRule's rules, and fleets drawn with the names, secrets and GPU
UUIDs the target must carry."""

from __future__ import annotations

import json
import random
import re
import shutil
import subprocess
from pathlib import Path

import kubernetes_validate
import yaml

from kits.plan import random_fleet

# Both releases the issue names: 1.36 (consumable capacity beta, on by default) and 1.37.
VERSIONS = ("1.36", "1.37")
# Custom resources and kustomize's file: no Kubernetes OpenAPI schema holds them; each has its own check below.
NOT_IN_OPENAPI = {("monitoring.coreos.com/v1", "PrometheusRule"), ("kustomize.config.k8s.io/v1beta1", "Kustomization")}
SEAT_CHARS = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._-"


def validate_strictly(document: dict, version: str) -> None:
    """kubernetes-validate in strict mode (an unknown field fails); a missing schema fails too, never a warning."""
    try:
        kubernetes_validate.validate(document, version, strict=True)
    except kubernetes_validate.SchemaNotFoundError as missing:
        raise AssertionError(f"no schema for {document.get('apiVersion')} {document.get('kind')} in Kubernetes {version}: {missing}") from None
    except kubernetes_validate.ValidationError as invalid:
        raise AssertionError(f"{document.get('kind')} {document.get('metadata', {}).get('name')} is invalid for {version} at "
                             f"{'.'.join(map(str, invalid.path))}: {invalid.message}") from None


def manifests(files: dict[str, str]) -> list[tuple[str, dict]]:
    return [(path, document) for path, text in sorted(files.items()) if path.startswith("kubernetes/")
            for document in yaml.safe_load_all(text) if document is not None]


def check_rules_with_promtool(rules: dict, directory: Path) -> None:
    path = directory / "rules.yaml"
    path.write_text(yaml.safe_dump(rules), encoding="utf-8")
    done = subprocess.run(["promtool", "check", "rules", str(path)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr


def validate_all(files: dict[str, str], directory: Path) -> int:
    """Every manifest under kubernetes/ for both versions; the PrometheusRule's spec through promtool, the
    kustomization's resources against the files. Returns how many objects were validated against a schema."""
    count = 0
    for path, document in manifests(files):
        kind = (document["apiVersion"], document["kind"])
        if kind == ("monitoring.coreos.com/v1", "PrometheusRule"):
            check_rules_with_promtool(document["spec"], directory)
        elif kind == ("kustomize.config.k8s.io/v1beta1", "Kustomization"):
            listed = sorted(f"kubernetes/{resource}" for resource in document["resources"])
            assert listed == sorted(name for name in files if name.startswith("kubernetes/") and name != path), listed
        else:
            for version in VERSIONS:
                validate_strictly(document, version)
            count += 1
    return count


def kustomize_builds(directory: Path) -> list[dict] | None:
    """``kubectl kustomize`` (local, no API server) where kubectl is installed; None where it is not."""
    if shutil.which("kubectl") is None:
        return None
    done = subprocess.run(["kubectl", "kustomize", str(directory)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return [document for document in yaml.safe_load_all(done.stdout) if document]


def hostile_seat_name(draw: random.Random) -> str:
    """A seat name over the whole range the fleet file allows (1 to 63 of `A-Za-z0-9._-`, a letter or digit first)."""
    length = draw.choice([1, 2, draw.randint(3, 20), draw.randint(40, 63), 63])
    return draw.choice(SEAT_CHARS[:62]) + "".join(draw.choice(SEAT_CHARS) for _ in range(length - 1))


def random_uuid(draw: random.Random) -> str:
    hex_digits = "".join(draw.choice("0123456789abcdef") for _ in range(32))
    return f"GPU-{hex_digits[:8]}-{hex_digits[8:12]}-{hex_digits[12:16]}-{hex_digits[16:20]}-{hex_digits[20:]}"


def cluster_fleet(draw: random.Random, directory: Path) -> tuple[Path, dict[str, str]]:
    """A random fleet (kits.plan.random_fleet: TP seats, fixed seats, 1-2 hosts) with hostile seat names, secrets by
    reference and `$`-laden values on some seats, and GPU UUIDs on some GPUs. Returns the fleet and old → new names."""
    path = random_fleet(draw, directory, current=False)
    text = path.read_text(encoding="utf-8")
    renamed: dict[str, str] = {}
    for old in re.findall(r"- \{?name: ([a-z0-9.-]*-\d+)\b", text):
        if old in renamed:
            continue
        new = hostile_seat_name(draw) if draw.random() < 0.7 else old
        while new in renamed.values() or new.lower() in {name.lower() for name in renamed.values()}:
            new = hostile_seat_name(draw)
        renamed[old] = new
    lines = []
    for line in text.splitlines():
        match = re.match(r"(\s+- \{?name: )([a-z0-9.-]*-\d+)\b(.*)", line)
        if match:
            line = match.group(1) + json.dumps(renamed[match.group(2)]) + match.group(3)  # quoted: `1e5`, `null` stay names
        if line.lstrip().startswith("- {index:") and draw.random() < 0.6:
            line = line.rstrip("}") + f", uuid: {random_uuid(draw)}}}"
        lines.append(line)
        if re.match(r"\s+port: \d+$", line) and draw.random() < 0.6:
            lines += ["    env:", "      HF_TOKEN: {from_host_env: HF_TOKEN}", "      VLLM_API_KEY: {from_host_env: ENGINE_KEY}",
                      '      NOTE: "costs $(HOME) and $$5; {{ not a template }}"']
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path, renamed
