"""What each compiled loop mirrors, and whether the running Python cores are still what it was
verified against.

Each loop stands in for named Python code (:data:`MIRRORS`: whole modules, or ``module:Name``
for one class or function). Its fingerprint is a SHA-256 of the code's syntax tree with
docstrings dropped (comments and formatting never count). ``make native-verify`` runs
tests/unit/test_native.py against the tree as it is and, if every run is byte-identical, writes
the fingerprints to ``node/sim/native/verified.json``, which the extension embeds when it is
built. At run time a loop whose embedded fingerprints differ from the running code's does not
run: ``auto`` runs Python and says which code changed, ``native`` refuses with the same words.
"""

from __future__ import annotations

import ast
import functools
import hashlib
import importlib.util
import json
from pathlib import Path

_KIT = ("node.kit.views", "node.kit.links:LinkRule", "node.kit.links:FixedDelay", "node.kit.links:LinkModel",
        "node.kit.stack:Layer", "node.kit.stack:ExchangeLayer")
MIRRORS: dict[str, tuple[str, ...]] = {
    "cyclon": ("node.protocols.cyclon.layer", *_KIT),
    "poldercast": ("node.protocols.cyclon.layer", *_KIT, "node.kit.stack:Dissemination", "node.kit.stack:Stack",
                   "node.protocols.poldercast.protocol", "node.protocols.poldercast.vicinity",
                   "node.protocols.poldercast.rings", "node.protocols.poldercast.ringcast"),
}
"""Loop -> the Python code it stands in for."""
VERIFIED = Path(__file__).parent / "native" / "verified.json"
UNVERIFIED_ENV = "OVERLAYLAB_NATIVE_UNVERIFIED"
"""Set (to 1) by ``make native-verify`` alone: the loops run whatever their fingerprints, so
that the tests can verify them against changed code."""


def source(module: str) -> str:
    """A module's source text, as the interpreter would load it."""
    spec = importlib.util.find_spec(module)
    if spec is None or spec.origin is None:
        raise ImportError(f"no module {module}")
    return Path(spec.origin).read_text()


def _without_docstrings(tree: ast.AST) -> ast.AST:
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if (isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and body
                and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant)
                and isinstance(body[0].value.value, str)):
            node.body = body[1:] or [ast.Pass()]
    return tree


def fingerprint(item: str) -> str:
    """The fingerprint of ``module`` or ``module:Name`` (a top-level class or function)."""
    module, _, name = item.partition(":")
    return _fingerprint(source(module), module, name)


@functools.lru_cache(maxsize=256)
def _fingerprint(text: str, module: str, name: str) -> str:
    tree = _without_docstrings(ast.parse(text))
    if name:
        found = [n for n in tree.body if isinstance(n, (ast.ClassDef, ast.FunctionDef)) and n.name == name]  # type: ignore[attr-defined]
        if not found:
            raise LookupError(f"{module} has no top-level {name}")
        tree = found[0]
    return hashlib.sha256(ast.dump(tree).encode()).hexdigest()[:16]


def fingerprints() -> dict[str, dict[str, str]]:
    """Every loop's fingerprints of the running code."""
    return {loop: {item: fingerprint(item) for item in items} for loop, items in MIRRORS.items()}


def changed(loop: str, verified: str) -> list[str]:
    """The code ``loop`` mirrors that differs from what it was verified against (``verified``:
    the JSON the extension embeds), in :data:`MIRRORS` order."""
    against = json.loads(verified).get(loop, {})
    return [item for item in MIRRORS[loop] if against.get(item) != fingerprint(item)]


def write_verified() -> None:
    VERIFIED.write_text(json.dumps(fingerprints(), indent=2, sort_keys=True) + "\n")


if __name__ == "__main__":
    write_verified()
    print(f"wrote {VERIFIED}")
