"""Strict YAML loading for parameters: ``yaml.safe_load`` that refuses a key given twice in one mapping.

PyYAML keeps the last of two equal keys without a word, so a params.yaml that sets ``seed`` twice silently runs
with the second value. ``UniqueKeyLoader`` (a ``yaml.SafeLoader``) checks every mapping of the document before
constructing it and raises ``DuplicateKeyError`` naming the dotted key and both lines. Merge keys (``<<: *base``)
are not duplicates: a key written next to a merge overrides the merged one, as YAML specifies. An alias inside its
own anchor (``a: &x {b: *x}``, a structure that contains itself) raises ``RecursiveAliasError`` naming the key and
the line, instead of a value no setting can hold (validation and hashing would recurse without end).
"""

from __future__ import annotations

import yaml

__all__ = ["DuplicateKeyError", "RecursiveAliasError", "UniqueKeyLoader", "load_yaml", "yaml_error_line"]


class DuplicateKeyError(yaml.YAMLError):
    """A mapping holds the same key twice; ``key`` is the dotted path, ``lines`` the two 1-based line numbers."""

    def __init__(self, key: str, first_line: int, second_line: int):
        self.key, self.lines = key, (first_line, second_line)
        super().__init__(f"key `{key}` is defined twice (lines {first_line} and {second_line})")


class RecursiveAliasError(yaml.YAMLError):
    """An alias refers to an anchor it is inside of; ``key`` is the dotted path of the alias."""

    def __init__(self, key: str, line: int):
        self.key, self.line = key, line
        super().__init__(f"key `{key}` (line {line}) refers to an anchor that contains it (a self-referencing "
                         "alias); write the value out")


class UniqueKeyLoader(yaml.SafeLoader):
    """``yaml.SafeLoader`` that raises ``DuplicateKeyError`` on a key repeated in any mapping and
    ``RecursiveAliasError`` on an alias inside its own anchor."""

    def construct_document(self, node):
        self._check_acyclic(node, "", 1, [], set())
        self._check_unique(node, "", set())
        return super().construct_document(node)

    def _check_acyclic(self, node, path: str, line: int, stack: list[int], done: set[int]) -> None:
        """``line``: where this reference to ``node`` is written (the key's line for a mapping value)."""
        if id(node) in stack:
            raise RecursiveAliasError(path or "(document)", line)
        if id(node) in done:
            return
        stack.append(id(node))
        if isinstance(node, yaml.MappingNode):
            for key_node, value_node in node.value:
                label = key_node.value if isinstance(key_node, yaml.ScalarNode) else "?"
                self._check_acyclic(value_node, f"{path}.{label}" if path else str(label),
                                    key_node.start_mark.line + 1, stack, done)
        elif isinstance(node, yaml.SequenceNode):
            for i, item in enumerate(node.value):
                self._check_acyclic(item, f"{path}[{i}]", line, stack, done)
        stack.pop()
        done.add(id(node))

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
    if isinstance(err, (DuplicateKeyError, RecursiveAliasError)):
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
