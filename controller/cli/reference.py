"""The experiment file reference, generated from the schema (``make docs``): one table per
section and per union variant, every field with its type, default and description.
docs/reference/ holds the output (:data:`PAGES`); a test keeps it current."""

from __future__ import annotations

import json
from typing import Any

from controller.experiment.schema import experiment_schema

GENERATED = """Generated from the schema by `make docs`; do not edit. Every field has a default;
`overlaylab validate FILE` prints a file with all of them filled in, and `--set PATH=VALUE`
overrides any of them."""
PAGES = {
    "experiment-file.md": "# Experiment file reference\n\n" + GENERATED + """ How the sections work together:
[experiments.md](../experiments.md) and [plans.md](../plans.md); `protocol.params` of each
protocol: [protocol-parameters.md](protocol-parameters.md).
""",
    "protocol-parameters.md": "# Protocol parameters (`protocol.params`)\n\n" + GENERATED + """ What each
parameter does, and which the paper leaves open: the protocol's page in [../protocols/](../protocols/README.md).
""",
}


def pages(protocols: list[str] | None = None) -> dict[str, str]:
    """File name in docs/reference/ -> its text."""
    schema = experiment_schema(protocols)
    defs = schema["$defs"]
    props = schema["properties"]
    return {"experiment-file.md": markdown(PAGES["experiment-file.md"], {k: v for k, v in props.items() if k != "protocol"},
                                           defs, top=True),
            "protocol-parameters.md": markdown(PAGES["protocol-parameters.md"], {"protocol": props["protocol"]}, defs)}


def markdown(header: str, sections: dict, defs: dict, top: bool = False) -> str:
    out = [header]
    if top:
        out += ["## Top level\n", *_table(sections, defs, required=set(experiment_schema().get("required", ())))]
    for name, prop in sections.items():
        for title, target in _objects(prop, defs):
            out += [f"\n## `{name}`{title}\n", *_table(target.get("properties", {}), defs, set(target.get("required", ())))]
            for field, sub in target.get("properties", {}).items():
                for sub_title, sub_target in _objects(sub, defs):
                    out += [f"\n### `{name}.{field}`{sub_title}\n",
                            *_table(sub_target.get("properties", {}), defs, set(sub_target.get("required", ())))]
    return "\n".join(out).rstrip() + "\n"


def _resolve(prop: dict, defs: dict) -> dict:
    return defs[prop["$ref"].split("/")[-1]] if "$ref" in prop else prop


def _objects(prop: dict, defs: dict) -> list[tuple[str, dict]]:
    """The object schemas a property may hold, with a title for each variant of a union."""
    variants = prop.get("oneOf") or prop.get("anyOf") or [prop]
    found = [_resolve(v, defs) for v in variants if "$ref" in v or v.get("type") == "object"]
    found = [f for f in found if f.get("properties")]
    if len(found) <= 1:
        return [("", f) for f in found]
    return [(f" ({_variant(f)})", f) for f in found]


def _variant(obj: dict) -> str:
    for key in ("name", "model", "kind"):
        p = obj.get("properties", {}).get(key, {})
        if "const" in p:
            return f"{key}: {p['const']}"
        if len(p.get("enum", ())) == 1:
            return f"{key}: {p['enum'][0]}"
        if isinstance(p.get("default"), str) and key != "name":
            return f"{key}: {p['default']}"
    return obj.get("title", "")


def _table(props: dict, defs: dict, required: set[str]) -> list[str]:
    rows = ["| field | type | default | description |", "|---|---|---|---|"]
    for name, prop in props.items():
        default = "required" if name in required else _default(prop)
        rows.append(f"| `{name}` | {_type(prop, defs)} | {default} | {_cell(prop.get('description', ''))} |")
    return rows


def _type(prop: dict, defs: dict) -> str:
    if "$ref" in prop:
        return "section"
    if "enum" in prop:
        return " \\| ".join(f"`{v}`" for v in prop["enum"])
    if "const" in prop:
        return f"`{prop['const']}`"
    for key in ("oneOf", "anyOf"):
        if key in prop:
            return " \\| ".join(dict.fromkeys(_type(v, defs) for v in prop[key]))
    kind = prop.get("type", "any")
    if kind == "array":
        return f"list of {_type(prop.get('items', {}), defs)}"
    bounds = [f"{op} {prop[k]}" for k, op in (("minimum", "≥"), ("exclusiveMinimum", ">"), ("maximum", "≤"),
                                                  ("exclusiveMaximum", "<")) if k in prop]
    return kind + (f" ({', '.join(bounds)})" if bounds else "")


def _default(prop: dict) -> str:
    if "default" not in prop:
        return "see the section"  # a union section or a dataclass: its own defaults
    text = json.dumps(prop["default"], ensure_ascii=False)
    return _cell(f"`{text}`" if len(text) <= 40 else "see the section")


def _cell(text: Any) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")
