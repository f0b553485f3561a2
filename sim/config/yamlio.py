"""Reading clustersim's YAML files: the only module that imports ``yaml``.

``yaml.SafeLoader`` with duplicate keys and deep nesting refused, UTF-8 decoding that says where a
bad byte is, and single command-line values read as YAML scalars. Every error is a ConfigError
that names the file (and line, where yaml gives one).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from ..errors import ConfigError
from .fields import show

__all__ = ["MAX_YAML_DEPTH", "MAX_YAML_VALUES", "decode_utf8", "read_text", "parse_yaml", "read_yaml", "load_value"]


def read_yaml(path: Path, what: str) -> Mapping[str, Any]:
    """The mapping in the *what* file at *path* (``scenario``, ``topology``)."""
    return parse_yaml(read_text(path, what), path, what)


def read_text(path: Path, what: str) -> str:
    """The UTF-8 text of the *what* file at *path*."""
    try:
        data = path.read_bytes()
    except IsADirectoryError:
        raise ConfigError(f"{path}: is a folder, not a {what} file") from None
    except OSError as e:
        raise ConfigError(f"{path}: cannot read {what}: {e.strerror}") from None
    return decode_utf8(data, str(path), what)


def decode_utf8(data: bytes, where: str, what: str) -> str:
    """*data* as UTF-8 text, or a ConfigError saying where the first bad byte is."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ConfigError(f"{where}: a {what} file must be UTF-8 text; byte 0x{data[e.start]:02x} at "
                          f"offset {e.start} is not (binary, UTF-16 or Latin-1?); save it as UTF-8") from None


# Deepest nesting a scenario or topology file may have: the schemas need 4 levels; 50 leaves room
# and keeps yaml's recursive composer far from Python's recursion limit.
MAX_YAML_DEPTH = 50


# Most values a file may hold once its aliases (``*name``) are expanded: a scenario has a few
# hundred; an alias repeated inside aliases ("billion laughs") expands exponentially, and every
# walk of the value (checks, messages, hashes) would with it.
MAX_YAML_VALUES = 100_000


# Longest integer a file may write (a seed is 19 digits; Python refuses to read over 4,300).
MAX_INT_DIGITS = 30


class _StrictLoader(yaml.SafeLoader):
    """yaml.SafeLoader that rejects duplicate keys, nesting deeper than MAX_YAML_DEPTH, and
    aliases that refer to their own value or expand past MAX_YAML_VALUES values; integers over
    MAX_INT_DIGITS digits and YAML 1.1's base-60 numbers (``1:30`` = 90) are refused, and
    ``1e-3`` and ``1.5e3`` are numbers (YAML 1.2; YAML 1.1 reads them as text)."""

    def construct_yaml_int(self, node: Any) -> Any:
        text = str(node.value).replace("_", "")
        if ":" in text:
            raise ConfigError(f"line {node.start_mark.line + 1}: {text[:40]!r} is a base-60 number "
                              "in YAML 1.1; write the number itself, or quote it for text")
        if len(text.lstrip("+-")) > MAX_INT_DIGITS:
            raise ConfigError(f"line {node.start_mark.line + 1}: an integer of {len(text)} digits; "
                              f"no clustersim value needs more than {MAX_INT_DIGITS}")
        return super().construct_yaml_int(node)

    def construct_yaml_float(self, node: Any) -> Any:
        if ":" in str(node.value):
            raise ConfigError(f"line {node.start_mark.line + 1}: {str(node.value)[:40]!r} is a base-60 "
                              "number in YAML 1.1; write the number itself, or quote it for text")
        return super().construct_yaml_float(node)

    _depth = 0

    def compose_document(self) -> Any:
        node = super().compose_document()
        if self.anchors_seen:
            _expanded_size(node, {}, set())
        return node

    anchors_seen = False

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(yaml.AliasEvent):
            self.anchors_seen = True
        self._depth += 1
        if self._depth > MAX_YAML_DEPTH:
            mark = self.peek_event().start_mark
            raise ConfigError(f"line {mark.line + 1}: nested deeper than {MAX_YAML_DEPTH} levels; "
                              "no clustersim file needs more than 4")
        try:
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def construct_mapping(self, node: Any, deep: bool = False) -> Any:
        seen: dict[Any, int] = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":     # ``<<: *base``: SafeLoader merges it
                continue
            key = self.construct_object(key_node, deep=True)
            try:
                hash(key)
            except TypeError:
                raise ConfigError(f"line {key_node.start_mark.line + 1}: a mapping key must be a "
                                  f"plain value, got {type(key).__name__}") from None
            if key in seen:
                raise ConfigError(f"line {key_node.start_mark.line + 1}: duplicate key {key!r} "
                                  f"(first on line {seen[key]}); each key may appear once")
            seen[key] = key_node.start_mark.line + 1
        return super().construct_mapping(node, deep)


_StrictLoader.add_constructor("tag:yaml.org,2002:int", _StrictLoader.construct_yaml_int)
_StrictLoader.add_constructor("tag:yaml.org,2002:float", _StrictLoader.construct_yaml_float)
_StrictLoader.add_implicit_resolver("tag:yaml.org,2002:float",
                                    re.compile(r"^[-+]?[0-9][0-9_]*(\.[0-9_]*)?[eE][-+]?[0-9]+$"),
                                    list("-+0123456789"))


def _expanded_size(node: Any, sizes: dict[int, int], open_: set[int]) -> int:
    """How many values *node* holds with its aliases expanded (a ConfigError past
    MAX_YAML_VALUES or on an alias inside its own value); *sizes* memoises shared nodes."""
    key = id(node)
    if key in sizes:
        return sizes[key]
    if key in open_:
        raise ConfigError(f"line {node.start_mark.line + 1}: a YAML alias refers to the value that "
                          "contains it; write the value out")
    n = 1
    if isinstance(node, (yaml.SequenceNode, yaml.MappingNode)):
        open_.add(key)
        items = node.value if isinstance(node, yaml.SequenceNode) else [x for kv in node.value for x in kv]
        for child in items:
            n += _expanded_size(child, sizes, open_)
            if n > MAX_YAML_VALUES:
                raise ConfigError(f"line {node.start_mark.line + 1}: its YAML aliases expand to more "
                                  f"than {MAX_YAML_VALUES:,} values (a clustersim file holds a few "
                                  "hundred); write the values out")
        open_.discard(key)
    sizes[key] = n
    return n


def parse_yaml(text: str, path: Path, what: str) -> Mapping[str, Any]:
    """*text* (of the file *path*) as a YAML mapping."""
    try:
        raw = yaml.load(text, Loader=_StrictLoader)      # noqa: S506 - a SafeLoader subclass
    except ConfigError as e:
        raise ConfigError(f"{path}: {e}") from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        at = f" line {mark.line + 1}" if mark is not None else ""
        raise ConfigError(f"{path}:{at}: not valid YAML ({getattr(e, 'problem', e)})") from None
    if not isinstance(raw, Mapping):
        raise ConfigError(f"{path}: a {what} file must be a YAML mapping, got {show(raw)}")
    return raw


def load_value(text: str, where: str) -> Any:
    """One command-line value read as YAML (a scalar, or the list/mapping the caller refuses)."""
    try:
        return yaml.load(text, Loader=_StrictLoader)      # noqa: S506 - a SafeLoader subclass
    except (yaml.YAMLError, ConfigError) as e:
        shown = text if len(text) <= 60 else text[:60] + "..."
        raise ConfigError(f"{where}: cannot read value {shown!r} ({e})") from None
