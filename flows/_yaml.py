"""The text layer of :mod:`flows.config`: strict YAML of ``mlflow.yml`` and ``--set`` values.

Refused: YAML aliases ("billion laughs" bombs), duplicate keys (instead of "last one wins"),
non-UTF-8 text, files over :data:`MAX_CONFIG_BYTES`, anything but a regular file, nesting deeper
than :data:`MAX_DEPTH` and integers of more than :data:`MAX_INT_DIGITS` digits — each in one line
naming the place.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

__all__ = [
    "MAX_CONFIG_BYTES",
    "MAX_DEPTH",
    "MAX_INT_DIGITS",
    "MAX_INPUT_CHARS",
    "ConfigError",
    "YamlError",
    "check_config_file",
    "file_kind",
    "apply_overrides",
    "parse_overrides",
    "parse_yaml",
    "read_yaml_file",
    "shorten",
]

MAX_CONFIG_BYTES = 1 << 20  # 1 MiB: a config is a few kB
MAX_DEPTH = 50  # nested mappings/lists; the config is 4 deep (training.params.grid...)
MAX_INT_DIGITS = 4300  # Python's own limit for int(str) (sys.get_int_max_str_digits)


class ConfigError(ValueError):
    """``mlflow.yml`` is missing, unreadable or invalid; the message names the key."""


class YamlError(ValueError):
    """The text is not a YAML document this project accepts; the message says where."""


def _where(mark: Any) -> str:
    return f"line {mark.line + 1}, column {mark.column + 1}" if mark is not None else "?"


class _StrictLoader(yaml.SafeLoader):
    """``SafeLoader`` without aliases; duplicate keys, deep nesting and huge integers are errors."""

    _depth = 0

    def compose_node(self, parent: Any, index: Any) -> Any:  # noqa: D102
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()
            raise YamlError(
                f"YAML alias *{event.anchor} at {_where(event.start_mark)}: aliases and anchors "
                "are not allowed in the config; write the value out"
            )
        if self._depth >= MAX_DEPTH:  # before Python's recursion limit (a RecursionError)
            raise YamlError(
                f"nested more than {MAX_DEPTH} levels deep at "
                f"{_where(self.peek_event().start_mark)}; a config is a few levels deep"
            )
        self._depth += 1
        try:
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def construct_yaml_int(self, node: Any) -> Any:  # noqa: D102
        digits = sum(c.isalnum() for c in str(node.value))  # any base: 0x…, 0o…
        if digits > MAX_INT_DIGITS:
            raise YamlError(
                f"an integer of {digits:,} digits at {_where(node.start_mark)}; at most "
                f"{MAX_INT_DIGITS:,} digits are read"
            )
        return super().construct_yaml_int(node)

    def construct_mapping(self, node: Any, deep: bool = False) -> Any:  # noqa: D102
        seen: set[Any] = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True)
            try:
                duplicate = key in seen
                seen.add(key)
            except TypeError:  # unhashable key: SafeLoader reports it below
                continue
            if duplicate:
                raise YamlError(
                    f"duplicate key {str(key)[:60]!r} at {_where(key_node.start_mark)}; "
                    "each key may appear once"
                )
        return super().construct_mapping(node, deep=deep)


_StrictLoader.add_constructor("tag:yaml.org,2002:int", _StrictLoader.construct_yaml_int)


def parse_yaml(text: str, what: str) -> Any:
    """Parse one YAML document with the strict loader.

    Parameters
    ----------
    text : str
        The YAML text.
    what : str
        What the text is, for messages (e.g. ``"config file mlflow.yml"``).

    Returns
    -------
    object
        The parsed document (None for an empty one).

    Raises
    ------
    YamlError
        For invalid YAML, an alias or a duplicate key.
    """
    try:
        return yaml.load(text, Loader=_StrictLoader)  # noqa: S506 - a SafeLoader subclass
    except YamlError as exc:
        raise YamlError(f"{what}: {exc}") from None
    except yaml.YAMLError as exc:
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        mark = getattr(exc, "problem_mark", None)
        raise YamlError(f"{what} is not valid YAML: {problem} at {_where(mark)}") from None
    except (ValueError, OverflowError, RecursionError) as exc:  # a value SafeLoader cannot build
        first = (str(exc).splitlines() or [type(exc).__name__])[0][:200]
        raise YamlError(f"{what} holds a value that cannot be read: {first}") from None


def read_yaml_file(path: Path) -> Any:
    """Read and parse a YAML file: at most :data:`MAX_CONFIG_BYTES`, UTF-8, strict loader.

    Raises
    ------
    YamlError
        If the file is not a regular file (a device such as ``/dev/zero``, a named pipe, a
        folder), too large, not UTF-8 or not acceptable YAML.
    OSError
        If the file cannot be read.
    """
    check_config_file(path)
    with open(path, "rb") as f:
        data = f.read(MAX_CONFIG_BYTES + 1)
    if len(data) > MAX_CONFIG_BYTES:
        raise YamlError(f"config file {path} is larger than {MAX_CONFIG_BYTES:,} bytes")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise YamlError(
            f"config file {path} is not UTF-8 text (byte 0x{data[exc.start]:02x} at offset "
            f"{exc.start}); save it as UTF-8"
        ) from None
    return parse_yaml(text, f"config file {path}")


_KINDS = (
    (stat.S_ISDIR, "a folder"),
    (stat.S_ISFIFO, "a named pipe"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


def file_kind(path: str | os.PathLike[str]) -> str:
    """What ``path`` is (symlinks followed), e.g. ``"a regular file"`` or ``"a named pipe"``.

    Raises
    ------
    OSError
        When it cannot be examined (e.g. it does not exist).
    """
    mode = os.stat(path).st_mode
    if stat.S_ISREG(mode):
        return "a regular file"
    return next((kind for test, kind in _KINDS if test(mode)), "not a regular file")


def check_config_file(path: Path) -> None:
    """Refuse a config path that is not a regular file (symlinks followed), naming what it is.

    Raises
    ------
    YamlError
        ``config file /dev/zero is a character device, not a regular file``.
    FileNotFoundError
        When nothing is there.
    """
    kind = file_kind(path)
    if kind != "a regular file":
        raise YamlError(f"config file {path} is {kind}, not a regular file; give a YAML file")


MAX_INPUT_CHARS = 60


def shorten(value: Any) -> str:
    """``repr(value)`` cut to :data:`MAX_INPUT_CHARS` (error messages stay bounded)."""
    text = repr(value)
    return text if len(text) <= MAX_INPUT_CHARS else text[: MAX_INPUT_CHARS - 5] + "…" + text[-4:]


def parse_overrides(items: Sequence[str]) -> dict[str, Any]:
    """Parse ``--set KEY=VALUE`` options: dotted key paths → YAML values.

    Parameters
    ----------
    items : sequence of str
        E.g. ``["search.scoring=snips", "training.params.max_iter=20", "gate.clip=null"]``.

    Returns
    -------
    dict
        Key path → parsed value, in order.

    Raises
    ------
    ConfigError
        If an item is not ``SECTION.KEY=VALUE`` or its value is not acceptable YAML.
    """
    out: dict[str, Any] = {}
    for item in items:
        key, sep, value = item.partition("=")
        parts = key.strip().split(".")
        if not sep or len(parts) < 2 or not all(parts):
            raise ConfigError(f"--set expects SECTION.KEY=VALUE, got {shorten(item)}")
        try:
            out[key.strip()] = parse_yaml(value, f"--set {key.strip()}")
        except YamlError as exc:
            raise ConfigError(str(exc)) from None
    return out


def apply_overrides(raw: Mapping[str, Any], overrides: Mapping[str, Any]) -> dict[str, Any]:
    """Return a copy of the raw config with each dotted key path set (nested dicts merged).

    Raises
    ------
    ConfigError
        If a key path runs through a value that is not a mapping.
    """
    out: dict[str, Any] = _copy_tree(raw)
    for dotted, value in overrides.items():
        node = out
        parts = dotted.split(".")
        for i, part in enumerate(parts[:-1]):
            child = node.setdefault(part, {})
            if child is None:
                child = node[part] = {}
            if not isinstance(child, dict):
                where = ".".join(parts[: i + 1])
                raise ConfigError(f"--set {dotted}: {where} is {shorten(child)}, not a section")
            node = child
        node[parts[-1]] = value
    return out


def _copy_tree(raw: Mapping[str, Any]) -> dict[str, Any]:
    return {k: _copy_tree(v) if isinstance(v, Mapping) else v for k, v in raw.items()}
