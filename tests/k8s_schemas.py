"""Schemas to validate Kubernetes objects offline: kubernetes-validate for built-in kinds, Chaos
Mesh's CRDs (tests/chart/chaos-mesh-crds) for its kinds."""

from __future__ import annotations

import functools
from pathlib import Path

import jsonschema
import kubernetes_validate
import yaml

K8S_VERSION = "1.34"
CRDS = Path(__file__).parent / "chart" / "chaos-mesh-crds"


def strict(schema):
    """Chaos Mesh's CRD schemas leave additionalProperties open; close every object that
    lists its properties, as the API server's pruning would drop unknown fields."""
    if isinstance(schema, dict):
        schema = {k: strict(v) for k, v in schema.items()}
        if "properties" in schema and "additionalProperties" not in schema \
                and not schema.get("x-kubernetes-preserve-unknown-fields"):
            schema["additionalProperties"] = False
        return schema
    if isinstance(schema, list):
        return [strict(v) for v in schema]
    return schema


@functools.cache
def crd_schemas() -> dict[str, dict]:
    out = {}
    for path in CRDS.glob("*.yaml"):
        crd = yaml.safe_load(path.read_text())
        for v in crd["spec"]["versions"]:
            out[f"{crd['spec']['group']}/{v['name']}/{crd['spec']['names']['kind']}"] = strict(v["schema"]["openAPIV3Schema"])
    return out



def validate(obj: dict) -> None:
    """Raise if ``obj`` is not a valid object of its kind (unknown fields included)."""
    if obj.get("apiVersion", "").startswith("chaos-mesh.org/"):
        # A CRD's openAPIV3Schema is OpenAPI 3.0, whose keywords are JSON Schema draft 4's
        # (exclusiveMinimum: true, not a number).
        jsonschema.Draft4Validator(crd_schemas()[f"{obj['apiVersion']}/{obj['kind']}"]).validate(obj)
    else:
        kubernetes_validate.validate(obj, K8S_VERSION, strict=True)
