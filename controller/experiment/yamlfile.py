"""Experiment files read as YAML that cannot hang, exhaust memory or silently drop a key.

PyYAML's safe loader still expands aliases without limit (a "billion laughs" file of a few
hundred bytes grows to gigabytes), recurses as deep as the file nests, and keeps the last of
two equal keys. Here the document is composed first (aliases stay shared nodes, so composing
is cheap), measured, and refused before anything is built if it is too large, too deep, or has
a key twice.
"""

from __future__ import annotations

from typing import Any

import yaml

MAX_BYTES = 1 << 20
"""Largest experiment file (1 MiB; the largest in experiments/ is a few kB)."""
MAX_NODES = 100_000
"""Most values the document may hold once its aliases are expanded."""
MAX_DEPTH = 32
"""Deepest nesting of sections and lists."""


OPEN = (yaml.BlockMappingStartToken, yaml.BlockSequenceStartToken, yaml.FlowMappingStartToken, yaml.FlowSequenceStartToken)
CLOSE = (yaml.BlockEndToken, yaml.FlowMappingEndToken, yaml.FlowSequenceEndToken)


class YamlError(ValueError):
    """A document refused, with where and why."""


def _measure(node: yaml.Node) -> None:
    """Refuse a composed document whose expansion is too large or too deep (aliases counted each
    time they are used), or with a key twice in one mapping."""
    sizes: dict[int, tuple[int, int]] = {}  # id(node) -> (expanded values, depth), aliases shared

    def walk(n: yaml.Node, depth: int) -> tuple[int, int]:
        if depth > MAX_DEPTH:
            raise YamlError(f"line {n.start_mark.line + 1}: nested more than {MAX_DEPTH} levels deep")
        if id(n) in sizes:
            return sizes[id(n)]
        size, deepest = 1, 0
        children: list[yaml.Node] = []
        if isinstance(n, yaml.MappingNode):
            seen: set[str] = set()
            for k, v in n.value:
                if isinstance(k, yaml.ScalarNode):
                    if k.value in seen:
                        raise YamlError(f"line {k.start_mark.line + 1}: key {k.value!r} given twice")
                    seen.add(k.value)
                children += (k, v)
        elif isinstance(n, yaml.SequenceNode):
            children = n.value
        for c in children:
            s, d = walk(c, depth + 1)
            size, deepest = size + s, max(deepest, d + 1)
            if size > MAX_NODES:
                raise YamlError(f"more than {MAX_NODES:,} values once its aliases are expanded")
        sizes[id(n)] = (size, deepest)
        return size, deepest

    walk(node, 0)


def load(text: str) -> Any:
    """The YAML document in ``text`` (None if empty), or ``YamlError`` / ``yaml.YAMLError``."""
    if len(text.encode()) > MAX_BYTES:
        raise YamlError(f"{len(text.encode()):,} bytes (at most {MAX_BYTES:,})")
    depth = 0
    for token in yaml.scan(text, Loader=yaml.SafeLoader):  # before composing, which recurses as deep as the file
        if isinstance(token, OPEN):
            depth += 1
            if depth > MAX_DEPTH:
                raise YamlError(f"line {token.start_mark.line + 1}: nested more than {MAX_DEPTH} levels deep")
        elif isinstance(token, CLOSE):
            depth -= 1
    loader = yaml.SafeLoader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        _measure(node)
        return loader.construct_document(node)
    finally:
        loader.dispose()
