"""A stand-in ``kubectl`` for the Kubernetes rollout's tests: no API server can run on this machine (it needs etcd, a
kubelet, a container runtime), so this script, put on PATH as ``kubectl``, records each call's argv (one JSON line in
$STANDIN_KUBECTL_LOG) and answers as kubectl does: ``apply`` and ``delete`` succeed, ``rollout status`` succeeds but
for the Deployments named in $STANDIN_KUBECTL_FAIL (each fails its first wait only, as a pod that never became ready),
``get --raw .../proxy/health`` answers vLLM's empty 200, ``diff`` exits 1 with a diff. ``write_kubectl`` puts it on PATH."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path


def main(argv: list[str]) -> int:
    log = Path(os.environ["STANDIN_KUBECTL_LOG"])
    with log.open("a", encoding="utf-8") as record:
        record.write(json.dumps(argv) + "\n")
    words = [word for word in argv if not word.startswith("--")]
    context = argv[argv.index("--context") + 1] if "--context" in argv else None
    namespace = argv[argv.index("--namespace") + 1] if "--namespace" in argv else None
    words = [word for word in words if word not in (context, namespace)]
    verb = words[0] if words else ""
    if verb == "apply":
        path = Path(argv[argv.index("-f") + 1])
        print(f"{path.name} serverside-applied")
        return 0
    if verb == "rollout" and words[1:2] == ["status"]:
        deployment = words[2].split("/", 1)[1]
        failing = set(filter(None, os.environ.get("STANDIN_KUBECTL_FAIL", "").split(",")))
        failed_once = log.with_suffix(".failed")
        done = set(failed_once.read_text().split()) if failed_once.exists() else set()
        if deployment in failing and deployment not in done:
            failed_once.write_text(" ".join(sorted(done | {deployment})))
            print(f'error: deployment "{deployment}" exceeded its progress deadline', file=sys.stderr)
            return 1
        print(f'deployment "{deployment}" successfully rolled out')
        return 0
    if verb == "get" and "--raw" in argv:
        return 0
    if verb == "diff":
        print("diff -u -N /tmp/LIVE/apps.v1.Deployment /tmp/MERGED/apps.v1.Deployment\n+  replicas: 1")
        return 1
    if verb == "delete":
        return 0
    print(f"error: the stand-in does not answer {argv}", file=sys.stderr)
    return 2


def write_kubectl(bin_dir: Path) -> Path:
    """``kubectl`` in ``bin_dir``: this script under this Python."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    script = bin_dir / "kubectl"
    script.write_text(f'#!/bin/sh\nexec {sys.executable} {Path(__file__).resolve()} "$@"\n')
    script.chmod(0o755)
    return script


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
