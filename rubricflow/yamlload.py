"""Strict YAML loading for parameters: ``yaml.safe_load`` that refuses a key given twice in one mapping.

PyYAML keeps the last of two equal keys without a word, so a params.yaml that sets ``seed`` twice silently runs
with the second value. ``UniqueKeyLoader`` (a ``yaml.SafeLoader``) checks every mapping of the document before
constructing it and raises ``DuplicateKeyError`` naming the dotted key and both lines. Merge keys (``<<: *base``)
are not duplicates: a key written next to a merge overrides the merged one, as YAML specifies.
"""

from __future__ import annotations

import yaml

__all__ = ["DuplicateKeyError", "UniqueKeyLoader", "load_yaml", "yaml_error_line"]


class DuplicateKeyError(yaml.YAMLError):
    """A mapping holds the same key twice; ``key`` is the dotted path, ``lines`` the two 1-based line numbers."""

    def __init__(self, key: str, first_line: int, second_line: int):
        self.key, self.lines = key, (first_line, second_line)
        super().__init__(f"key `{key}` is defined twice (lines {first_line} and {second_line})")


class UniqueKeyLoader(yaml.SafeLoader):
    """``yaml.SafeLoader`` that raises ``DuplicateKeyError`` on a key repeated in any mapping."""

    def construct_document(self, node):
        self._check_unique(node, "", set())
        return super().construct_document(node)

    def _check_unique(self, node, path: str, seen: set[int]) -> None:
        if id(node) in seen:  # an alias: checked where its anchor was
            return
        seen.add(id(node))
        if isinstance(node, yaml.MappingNode):
            first: dict = {}
            for key_node, value_node in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":
                    self._check_unique(value_node, path, seen)
                    continue
                key = self.construct_object(key_node, deep=True)
                try:
                    hash(key)
                except TypeError:  # an unhashable (complex) key: SafeLoader reports it itself
                    continue
                dotted = f"{path}.{key}" if path else str(key)
                line = key_node.start_mark.line + 1
                if key in first:
                    raise DuplicateKeyError(dotted, first[key], line)
                first[key] = line
                self._check_unique(value_node, dotted, seen)
        elif isinstance(node, yaml.SequenceNode):
            for i, item in enumerate(node.value):
                self._check_unique(item, f"{path}[{i}]", seen)


def load_yaml(text: str):
    """Parse one YAML document like ``yaml.safe_load``, refusing duplicate keys (``DuplicateKeyError``)."""
    return yaml.load(text, Loader=UniqueKeyLoader)  # noqa: S506  (a SafeLoader subclass)


def yaml_error_line(err: yaml.YAMLError) -> str:
    """A YAML error on one line: what went wrong and where (``line L, column C``), without the source excerpt."""
    if isinstance(err, DuplicateKeyError):
        return str(err)
    parts = []
    context = getattr(err, "context", None)
    problem = getattr(err, "problem", None)
    mark = getattr(err, "problem_mark", None) or getattr(err, "context_mark", None)
    if context:
        parts.append(context)
    if problem:
        parts.append(problem)
    text = ", ".join(parts) if parts else " ".join(str(err).split())
    if mark is not None:
        text += f" (line {mark.line + 1}, column {mark.column + 1})"
    return text
