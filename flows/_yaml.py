"""The text layer of :mod:`flows.config`: strict YAML of ``mlflow.yml`` and ``--set`` values.

Refused: YAML aliases ("billion laughs" bombs), duplicate keys (instead of "last one wins"),
non-UTF-8 text and files over :data:`MAX_CONFIG_BYTES`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

__all__ = [
    "MAX_CONFIG_BYTES",
    "MAX_INPUT_CHARS",
    "ConfigError",
    "YamlError",
    "apply_overrides",
    "parse_overrides",
    "parse_yaml",
    "read_yaml_file",
    "shorten",
]

MAX_CONFIG_BYTES = 1 << 20  # 1 MiB: a config is a few kB


class ConfigError(ValueError):
    """``mlflow.yml`` is missing, unreadable or invalid; the message names the key."""


class YamlError(ValueError):
    """The text is not a YAML document this project accepts; the message says where."""


def _where(mark: Any) -> str:
    return f"line {mark.line + 1}, column {mark.column + 1}" if mark is not None else "?"


class _StrictLoader(yaml.SafeLoader):
    """``SafeLoader`` without aliases and with duplicate keys as errors."""

    def compose_node(self, parent: Any, index: Any) -> Any:  # noqa: D102
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()
            raise YamlError(
                f"YAML alias *{event.anchor} at {_where(event.start_mark)}: aliases and anchors "
                "are not allowed in the config; write the value out"
            )
        return super().compose_node(parent, index)

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


def read_yaml_file(path: Path) -> Any:
    """Read and parse a YAML file: at most :data:`MAX_CONFIG_BYTES`, UTF-8, strict loader.

    Raises
    ------
    YamlError
        If the file is too large, not UTF-8 or not acceptable YAML.
    OSError
        If the file cannot be read.
    """
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
