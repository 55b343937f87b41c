"""Reading a matrix or preset file: YAML's safe loader, refusing a key given twice and aliases that expand beyond a
bound (a "billion laughs" file), with one error naming the file. Merge keys (`<<: *anchor`) are YAML's own."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from benchmarks.config.matrix_checks import ConfigError

# Nodes that aliases may add when the file is expanded (as a JSON dump of the matrix expands it). A matrix's aliases
# repeat a few mappings of options; a file beyond this is a "billion laughs" bomb whose dump would not end. A file
# without aliases adds none, whatever its size.
MAX_ALIAS_NODES = 100_000
MERGE_TAG = "tag:yaml.org,2002:merge"


class _AliasBomb(yaml.YAMLError):
    """Aliases that expand beyond MAX_ALIAS_NODES, or one that holds itself."""


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    if isinstance(node, yaml.MappingNode):
        return [n for pair in node.value for n in pair]
    return []


def alias_expansion(root: yaml.Node) -> int:
    """How many nodes the aliases of a composed document add once expanded (its expanded size minus its distinct
    nodes), counted without expanding anything; raises _AliasBomb for an alias inside the node it names."""
    sizes: dict[int, int] = {}
    on_path: set[int] = set()
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, finished = stack.pop()
        key = id(node)
        if finished:
            on_path.discard(key)
            sizes[key] = 1 + sum(sizes[id(c)] for c in _children(node))
        elif key not in sizes:
            if key in on_path:
                raise _AliasBomb(f"an alias at line {node.start_mark.line + 1} refers to a node that contains it; "
                                 f"write the values out")
            on_path.add(key)
            stack.append((node, True))
            stack += [(c, False) for c in _children(node) if id(c) not in sizes]
    return sizes[id(root)] - len(sizes)


class _CheckedLoader(yaml.SafeLoader):
    """YAML's safe loader, refusing a mapping that gives one key twice (YAML itself would keep the last) and a
    document whose aliases expand beyond MAX_ALIAS_NODES (checked on the composed graph, before construction)."""

    def get_single_node(self) -> yaml.Node | None:
        node = super().get_single_node()
        if node is not None:
            added = alias_expansion(node)
            if added > MAX_ALIAS_NODES:
                raise _AliasBomb(f"its anchors and aliases expand to {added:,} more nodes (at most "
                                 f"{MAX_ALIAS_NODES:,}); write the values out or use fewer aliases")
        return node

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: dict[Any, int] = {}
        for key_node, _ in node.value:
            if key_node.tag == MERGE_TAG:
                continue  # merged keys may be overridden; only the mapping's own keys must be distinct
            key = self.construct_object(key_node, deep=deep)
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"key {key!r} given twice (lines {seen[key]} and {key_node.start_mark.line + 1}); "
                                f"give it once", key_node.start_mark)
            seen[key] = key_node.start_mark.line + 1
        return super().construct_mapping(node, deep)


def read_yaml(path: Path) -> Any:
    """A YAML file's content, or ConfigError naming the file: unreadable, not UTF-8, not YAML, a key twice, aliases
    that expand beyond a bound."""
    try:
        text = path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: not UTF-8 text (byte {exc.object[exc.start]:#04x} at offset {exc.start})") from None
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read it ({exc.strerror})") from None
    try:
        return yaml.load(text, Loader=_CheckedLoader)  # noqa: S506 - a SafeLoader subclass
    except _AliasBomb as exc:
        raise ConfigError(f"{path}: {exc}") from None
    except RecursionError:
        raise ConfigError(f"{path}: nested too deeply to read; a matrix needs a few levels") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML: " + " ".join(str(exc).split())) from None
