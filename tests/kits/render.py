"""Paths the render-stage tests share (the rollout helpers are in kits.rollout)."""

from __future__ import annotations

import yaml

from kits.paths import REPO_ROOT

REPO = REPO_ROOT
DEMO_FLEET = REPO / "examples" / "demo" / "fleet.yaml"
FIXTURES = REPO / "tests" / "fixtures"
COMPOSE_SCHEMA = FIXTURES / "compose-spec" / "compose-spec.json"
QWEN3_8B = FIXTURES / "models" / "Qwen--Qwen3-8B"
MiB = 1 << 20
GiB = 1 << 30


class AnsibleYamlLoader(yaml.SafeLoader):
    """YAML as Ansible reads it, for the tests: ``!unsafe 'text'`` is the string ``text`` (Ansible's own
    loader marks it as never to be templated; tests/harden/test_hostile_ops.py runs the real one)."""


AnsibleYamlLoader.add_constructor("!unsafe", lambda loader, node: loader.construct_scalar(node))


def load_ansible_yaml(text: str) -> object:
    return yaml.load(text, Loader=AnsibleYamlLoader)  # noqa: S506 - a SafeLoader with one more tag
