"""Reading the configuration: the file, ``{home}`` expansion, environment overrides, errors naming the key."""

from __future__ import annotations

import os
import re
from functools import lru_cache
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from laketide.config.model import LaketideConfig
from laketide.errors import ConfigError

REPO_ROOT = Path(__file__).resolve().parents[3]
DEFAULT_CONFIG = REPO_ROOT / "conf" / "laketide.yaml"
ENV_PREFIX = "LAKETIDE__"


def _expand(value: Any, home: str) -> Any:
    if isinstance(value, str):
        return value.replace("{home}", home)
    if isinstance(value, dict):
        return {k: _expand(v, home) for k, v in value.items()}
    if isinstance(value, list):
        return [_expand(v, home) for v in value]
    return value


def _env_value(value: str) -> Any:
    """An override's value read as YAML (``30s``, ``5``, ``[a, b]``, ``{url: ...}``); a text that is no YAML at all,
    e.g. a path template beginning with ``{warehouse}``, is taken as it is."""
    if not value:
        return value
    try:
        return yaml.safe_load(value)
    except yaml.YAMLError:
        return value


def _apply_env(raw: dict[str, Any], environ: dict[str, str]) -> None:
    for key, value in sorted(environ.items()):
        if not key.startswith(ENV_PREFIX):
            continue
        path = [p.lower() for p in key[len(ENV_PREFIX):].split("__")]
        node: Any = raw
        for i, part in enumerate(path[:-1]):
            if isinstance(node, list):  # streams are addressed by name
                match = [s for s in node if isinstance(s, dict) and str(s.get("name", "")).lower() == part]
                if not match:
                    raise ConfigError(f"{key}: no stream named {part!r} in the configuration")
                node = match[0]
            else:
                if not isinstance(node, dict):
                    raise ConfigError(f"{key}: {'.'.join(path[:i])} is not a section")
                node = node.setdefault(part, {})
        if not isinstance(node, dict):
            raise ConfigError(f"{key}: {'.'.join(path[:-1])} is not a section")
        node[path[-1]] = _env_value(value)


_FIELD_FIRST = re.compile(r"^([a-z_]+(?:\[[^\]]*\])?(?:\.[a-z_]+)*): ")


def _location(loc: tuple[int | str, ...], raw: dict[str, Any]) -> str:
    """``streams.0.trigger_interval`` as ``streams[clicks].trigger_interval`` (streams by name, as in overrides)."""
    parts: list[str] = []
    for i, part in enumerate(loc):
        if isinstance(part, int) and i == 1 and loc[0] == "streams":
            streams = raw.get("streams")
            item = streams[part] if isinstance(streams, list) and part < len(streams) else None
            name = item.get("name") if isinstance(item, dict) else None
            parts[-1] += f"[{name}]" if isinstance(name, str) and name else f"[{part}]"
        else:
            parts.append(str(part))
    return ".".join(parts)


def _format_errors(exc: ValidationError, source: str, raw: dict[str, Any] | None = None) -> str:
    lines = [f"invalid laketide configuration ({source}):"]
    for err in exc.errors():
        loc = _location(tuple(err["loc"]), raw or {})
        msg = err["msg"].removeprefix("Value error, ")
        # a check across keys of a section (the section's own validator) begins each line with the key it is about
        whole_section = err["type"] == "value_error" and (len(err["loc"]) <= 1 or isinstance(err["loc"][-1], int))
        for line in msg.split("\n"):
            key = loc
            if whole_section and (field := _FIELD_FIRST.match(line)):
                key, line = ".".join(p for p in (loc, field.group(1)) if p), line[field.end():]
            lines.append(f"  - {key or '<root>'}: {line}")
    return "\n".join(lines)


def config_path(environ: dict[str, str] | None = None) -> Path:
    """The configuration file in force: ``$LAKETIDE_CONFIG`` or ``conf/laketide.yaml``."""
    env = os.environ if environ is None else environ
    return Path(env.get("LAKETIDE_CONFIG") or DEFAULT_CONFIG).resolve()


def load_config(path: str | Path | None = None, environ: dict[str, str] | None = None) -> LaketideConfig:
    """Read, expand, override and validate the configuration; raise ConfigError naming the bad key."""
    env = dict(os.environ if environ is None else environ)
    cfg_path = Path(path) if path else config_path(env)
    if not cfg_path.is_file():
        raise ConfigError(f"configuration file not found: {cfg_path} (set LAKETIDE_CONFIG to its path)")
    try:
        raw = yaml.safe_load(cfg_path.read_text()) or {}
    except yaml.YAMLError as exc:
        raise ConfigError(f"{cfg_path} is not valid YAML: {exc}") from exc
    if not isinstance(raw, dict):
        raise ConfigError(f"{cfg_path}: top level must be a mapping")
    _apply_env(raw, env)
    home = Path(env.get("LAKETIDE_HOME") or raw.get("home") or ".laketide")
    if not home.is_absolute():
        home = (REPO_ROOT / home).resolve()
    raw["home"] = str(home)
    raw = _expand(raw, str(home))
    raw.setdefault("spark", {}).setdefault("jars_dir", str(home / "jars"))
    if raw.get("close") is None:
        raw["close"] = {}
    if isinstance(raw["close"], dict):
        raw["close"].setdefault("results_dir", str(home / "gx"))
    try:
        return LaketideConfig.model_validate(raw)
    except ValidationError as exc:
        raise ConfigError(_format_errors(exc, str(cfg_path), raw)) from None


@lru_cache(maxsize=4)
def _cached(path: str | None, env_items: tuple[tuple[str, str], ...]) -> LaketideConfig:
    return load_config(path, dict(env_items))


def get_config(path: str | Path | None = None) -> LaketideConfig:
    """Cached :func:`load_config` keyed on the path and the relevant environment."""
    relevant = tuple(sorted((k, v) for k, v in os.environ.items() if k.startswith("LAKETIDE")))
    return _cached(str(path) if path else None, relevant)
