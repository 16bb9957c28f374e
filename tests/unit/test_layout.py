"""The house's layout: no import cycle between the project's modules (``TYPE_CHECKING`` imports
included), and the folders the architecture names."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import networkx as nx
import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("node", "controller", "analysis", "loadgen")


def _modules(root: Path) -> dict[str, Path]:
    found = {}
    for package in PACKAGES:
        for path in (root / package).rglob("*.py"):
            if "_gen" in path.parts:
                continue
            name = ".".join(path.relative_to(root).with_suffix("").parts).removesuffix(".__init__")
            found[name] = path
    return found


def import_graph(root: Path = ROOT) -> nx.DiGraph:
    """Module -> every project module it imports (a package's ``__init__`` counts as a module)."""
    modules = _modules(root)
    graph = nx.DiGraph()
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        graph.add_node(name)
        for stmt in ast.walk(ast.parse(path.read_text())):
            if isinstance(stmt, ast.Import):
                targets = [a.name for a in stmt.names]
            elif isinstance(stmt, ast.ImportFrom):
                base = package.split(".")[: len(package.split(".")) - stmt.level + 1] if stmt.level else []
                module = ".".join([*base, *([stmt.module] if stmt.module else [])])
                targets = [module, *(f"{module}.{a.name}" for a in stmt.names)]
            else:
                continue
            graph.add_edges_from((name, t) for t in targets if t in modules and t != name)
    return graph


def test_no_import_cycle_between_modules():
    cycles = [sorted(c) for c in nx.strongly_connected_components(import_graph()) if len(c) > 1]
    assert cycles == []


def test_the_graph_sees_a_cycle_where_there_is_one(tmp_path):
    """The check above can fail: two modules importing each other (one under TYPE_CHECKING) form one."""
    for package in PACKAGES:
        (tmp_path / package).mkdir()
    (tmp_path / "node" / "a.py").write_text("from node.b import x\n")
    (tmp_path / "node" / "b.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .a import y\n")
    assert [sorted(c) for c in nx.strongly_connected_components(import_graph(tmp_path)) if len(c) > 1] == [["node.a", "node.b"]]


@pytest.mark.parametrize(("parent", "folders"), [
    ("node", {"kit", "protocols", "sim", "wire", "transport"}),
    ("controller", {"experiment", "backends", "cli"}),
])
def test_the_architecture_s_folders(parent, folders):
    assert folders <= {p.name for p in (ROOT / parent).iterdir() if (p / "__init__.py").exists()}
    assert not [p.name for p in (ROOT / parent).glob("*.py") if p.name not in ("__init__.py", "__main__.py")]


def test_each_protocol_has_a_folder_of_its_own_with_its_registration():
    from node.kit import builtin_protocols, protocol_spec

    for name in builtin_protocols():
        module = protocol_spec(name).build.__module__
        assert module.startswith("node.protocols.") and module.count(".") == 3, (name, module)


def test_a_protocol_registered_from_tests_needs_nothing_else():
    """tests/toy_protocol.py (registered by tests/conftest.py, as a plugin) with a message kind of
    its own: the experiment schema takes it, its kind is declared, and nothing generated from the
    built-in protocols (the chart's values.schema.json, docs/reference/) depends on it, so no file
    outside its own module has to change. The conformance suite runs it (test_conformance*.py)."""
    from controller.backends.helm import values_schema
    from controller.cli.reference import pages
    from controller.experiment.schema import parse_experiment
    from node.kit import builtin_protocols, protocol_names
    from node.kit.messages import declared_kinds
    from tests import toy_protocol

    assert toy_protocol.NAME in protocol_names() and toy_protocol.NAME not in builtin_protocols()
    assert parse_experiment({"protocol": {"name": toy_protocol.NAME, "params": {"cycle_ms": 500}}}).protocol.params.cycle_ms == 500
    assert ("toy-heartbeat", "beat") in {(k.layer, k.name) for k in declared_kinds()}
    assert toy_protocol.NAME not in json.dumps(values_schema())
    assert all(toy_protocol.NAME not in text for text in pages(builtin_protocols()).values())


def test_the_slow_end_to_end_checks_run_each_folder_s_own_protocol():
    """tests/helpers.one_per_module picks, per protocol module, the protocol named after its folder."""
    from node.kit import builtin_protocols
    from tests.helpers import one_per_module

    folders = {p.name for p in (ROOT / "node" / "protocols").iterdir() if (p / "protocol.py").exists()}
    assert one_per_module(builtin_protocols()) == sorted(folders)
