"""Strict YAML loading for parameters: ``yaml.safe_load`` that refuses a key given twice in one mapping.

PyYAML keeps the last of two equal keys without a word, so a params.yaml that sets ``seed`` twice silently runs
with the second value. ``UniqueKeyLoader`` (a ``yaml.SafeLoader``) checks every mapping of the document before
constructing it and raises ``DuplicateKeyError`` naming the dotted key and both lines. Merge keys (``<<: *base``)
are not duplicates: a key written next to a merge overrides the merged one, as YAML specifies. An alias inside its
own anchor (``a: &x {b: *x}``, a structure that contains itself) raises ``RecursiveAliasError`` naming the key and
the line, instead of a value no setting can hold (validation and hashing would recurse without end). Aliases that
expand to more than a bounded number of nodes (nested anchors that each repeat the last: "billion laughs") raise
``AliasExpansionError`` naming the key, before anything is expanded: a loader keeps aliases as shared objects, but
every later copy, merge, validation or hash walks the expanded tree.
"""

from __future__ import annotations

import yaml

__all__ = ["AliasExpansionError", "DuplicateKeyError", "NestingTooDeepError", "RecursiveAliasError", "UniqueKeyLoader",
           "load_yaml", "yaml_error_line"]


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


# Parameters are a few hundred nodes; an alias (``<<: *base``, ``*defaults``) repeats a section or a list of them.
MAX_ALIAS_NODES = 1_000  # nodes one alias may expand to
MAX_EXPANDED_NODES = 100_000  # nodes of the whole document with every alias expanded


class AliasExpansionError(yaml.YAMLError):
    """Aliases expand the document beyond the bounds above; ``key`` is the dotted path of the offending alias."""

    def __init__(self, key: str, line: int, nodes: int, what: str):
        self.key, self.line, self.nodes = key, line, nodes
        super().__init__(f"key `{key}` (line {line}): {what} expands to {nodes:,} nodes; aliases may expand to at "
                         f"most {MAX_ALIAS_NODES:,} nodes each and {MAX_EXPANDED_NODES:,} in all (write the values "
                         "out, or use fewer nested aliases)")


class UniqueKeyLoader(yaml.SafeLoader):
    """``yaml.SafeLoader`` that raises ``DuplicateKeyError`` on a key repeated in any mapping and
    ``RecursiveAliasError`` on an alias inside its own anchor and ``AliasExpansionError`` on aliases that expand
    beyond ``MAX_ALIAS_NODES`` / ``MAX_EXPANDED_NODES``."""

    def construct_document(self, node):
        self._check_acyclic(node, "", 1, [], set())
        self._check_expansion(node)
        self._check_unique(node, "", set())
        return super().construct_document(node)

    @staticmethod
    def _sizes(root) -> dict[int, int]:
        """Expanded node count of every node of an acyclic graph (iterative: no recursion limit on deep input)."""
        size: dict[int, int] = {}
        stack = [(root, False)]
        while stack:
            node, expanded = stack.pop()
            if id(node) in size:
                continue
            children = ([v for kv in node.value for v in kv] if isinstance(node, yaml.MappingNode)
                        else list(node.value) if isinstance(node, yaml.SequenceNode) else [])
            if expanded or not children:
                size[id(node)] = 1 + sum(size[id(c)] for c in children)
            else:
                stack.append((node, True))
                stack.extend((c, False) for c in children if id(c) not in size)
        return size

    def _check_expansion(self, root) -> None:
        size = self._sizes(root)
        seen: set[int] = set()
        total = 0
        stack = [(root, "", 1)]
        while stack:
            node, path, line = stack.pop()
            n = size[id(node)]
            if id(node) in seen:  # a second reference: an alias, expanded wherever it is used
                if n > MAX_ALIAS_NODES:
                    raise AliasExpansionError(path or "(document)", line, n, "an alias")
                total += n
                if total > MAX_EXPANDED_NODES:
                    raise AliasExpansionError(path or "(document)", line, total, "the document with its aliases")
                continue
            seen.add(id(node))
            total += 1
            children = []  # in document order (an anchor comes before its aliases), pushed reversed
            if isinstance(node, yaml.MappingNode):
                for key_node, value_node in node.value:
                    label = key_node.value if isinstance(key_node, yaml.ScalarNode) else "?"
                    at = key_node.start_mark.line + 1
                    children += [(key_node, path, at), (value_node, f"{path}.{label}" if path else str(label), at)]
            elif isinstance(node, yaml.SequenceNode):
                children = [(item, f"{path}[{i}]", line) for i, item in enumerate(node.value)]
            stack.extend(reversed(children))


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


class NestingTooDeepError(yaml.YAMLError):
    """The document nests collections deeper than the parser can follow."""

    def __init__(self):
        super().__init__("the document nests lists or mappings too deeply to be read (parameters nest a few levels)")


def load_yaml(text: str):
    """Parse one YAML document like ``yaml.safe_load``, refusing duplicate keys (``DuplicateKeyError``), aliases
    that expand too far (``AliasExpansionError``) and nesting deeper than the parser's recursion allows
    (``NestingTooDeepError``)."""
    try:
        return yaml.load(text, Loader=UniqueKeyLoader)  # noqa: S506  (a SafeLoader subclass)
    except RecursionError:
        raise NestingTooDeepError() from None


def yaml_error_line(err: yaml.YAMLError) -> str:
    """A YAML error on one line: what went wrong and where (``line L, column C``), without the source excerpt."""
    if isinstance(err, (DuplicateKeyError, RecursiveAliasError, AliasExpansionError, NestingTooDeepError)):
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
