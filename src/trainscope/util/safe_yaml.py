"""YAML from users, parsed at a bounded cost (torch-free).

Config files, ``--set`` values and the ``config.yaml`` of a run record someone shared are
all YAML written by someone else. PyYAML's ``safe_load`` constructs no objects, but it
still accepts aliases ("billion laughs": a few hundred bytes that deep copies expand to
gigabytes), nesting deep enough to end in a RecursionError, integers Python refuses to
parse, and files of any size. Everything here refuses those with one line.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from trainscope.errors import ConfigError

MAX_YAML_BYTES = 1 << 20  # a config (or a --set value) is a few hundred bytes
MAX_YAML_DEPTH = 32  # nesting levels; a real config has three


class _Refused(Exception):
    """YAML that parses but that a config never needs and that could exhaust memory."""


class _ConfigLoader(yaml.SafeLoader):
    """PyYAML's SafeLoader, refusing aliases and deep nesting.

    Aliases are how a few hundred bytes of YAML ("billion laughs") become gigabytes: each
    alias is a reference to an anchored node, which the deep copies of a config (merge,
    to_dict) then expand. Nesting is bounded because composing is recursive: a few
    thousand levels end in a RecursionError instead of a message.
    """

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._depth = 0

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()
            raise _Refused(
                f"uses the YAML alias *{event.anchor} (line {event.start_mark.line + 1}): "
                f"anchors and aliases are not needed in a trainscope config, write the "
                f"values out"
            )
        self._depth += 1
        if self._depth > MAX_YAML_DEPTH:
            line = self.peek_event().start_mark.line + 1
            raise _Refused(
                f"nests deeper than {MAX_YAML_DEPTH} levels (line {line}); a trainscope "
                f"config has three"
            )
        try:
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def construct_yaml_int(self, node: Any) -> int:
        try:
            return super().construct_yaml_int(node)
        except ValueError:  # Python refuses to parse integers of more than 4300 digits
            raise _Refused(
                f"holds an integer of {len(node.value)} characters (line "
                f"{node.start_mark.line + 1}); no setting takes one that large"
            ) from None


_ConfigLoader.add_constructor("tag:yaml.org,2002:int", _ConfigLoader.construct_yaml_int)


def _too_big(source: str) -> ConfigError:
    return ConfigError(f"{source} is larger than 1 MiB; a trainscope config is a few hundred bytes")


def safe_load_yaml(text: str, source: str) -> Any:
    """Parse YAML text from a user (a config file, a ``--set`` value) with bounded cost.

    Like ``yaml.safe_load``, but refuses aliases, nesting deeper than
    :data:`MAX_YAML_DEPTH`, integers Python cannot parse, and text longer than
    :data:`MAX_YAML_BYTES`, each with a one-line ConfigError that starts with ``source``
    (e.g. "config file c.yaml", "--set train.lr"). Text that is not YAML raises
    ``yaml.YAMLError``, for the caller to word.
    """
    if len(text) > MAX_YAML_BYTES:
        raise _too_big(source)
    loader = _ConfigLoader(text)
    try:
        return loader.get_single_data()
    except _Refused as e:
        raise ConfigError(f"{source} {e}") from None
    finally:
        loader.dispose()


def load_yaml(path: str | Path) -> dict[str, Any]:
    """Read a YAML config file into plain data, with one-line errors.

    Bounded: files over :data:`MAX_YAML_BYTES`, binary files and YAML that
    :func:`safe_load_yaml` refuses are one clear ConfigError each.
    """
    p = Path(path)
    if p.is_dir():
        raise ConfigError(f"config file {p} is a directory, not a YAML file")
    if not p.exists():
        raise ConfigError(f"config file {p} does not exist")
    if not p.is_file():
        raise ConfigError(f"config file {p} is not a regular file")
    source = f"config file {p}"
    try:
        with p.open("rb") as f:
            raw = f.read(MAX_YAML_BYTES + 1)  # never more, whatever the file claims
    except OSError as e:
        raise ConfigError(f"cannot read {source}: {e.strerror or e}") from None
    if len(raw) > MAX_YAML_BYTES:
        raise _too_big(source)
    try:
        text = raw.decode("utf-8-sig")  # -sig: a byte-order mark some editors write
    except UnicodeDecodeError:
        text = "\x00"  # reported as binary just below
    if "\x00" in text:
        raise ConfigError(f"{source} is not a text file (binary, or not UTF-8); it must be YAML")
    try:
        data = safe_load_yaml(text, source)
    except yaml.YAMLError as e:
        raise ConfigError(f"{source} is not valid YAML: {str(e).splitlines()[0]}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"config file {p} must hold a mapping at the top level")
    return data
