"""A TOML table read field by field: each value checked for its type, and every complaint naming
the file and the dotted field, so a lesson author sees exactly what to fix."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lab.lessons.model import LessonError

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    try:
        import tomli as tomllib
    except ModuleNotFoundError:
        tomllib = None

_REQUIRED = object()
_TYPE_NAMES = {str: "a string", int: "an integer", float: "a number", bool: "true or false", dict: "a table",
               list: "an array"}


@dataclass
class Table:
    """One TOML table being read; every complaint names the file and the dotted field."""

    file: str
    data: dict
    path: str = ""
    seen: set[str] = field(default_factory=set)

    def name(self, key: str) -> str:
        return f"{self.path}.{key}" if self.path else key

    def error(self, key: str, problem: str) -> LessonError:
        return LessonError(f"{self.file}: field '{self.name(key)}': {problem}")

    def get(self, key: str, kind: type | tuple[type, ...], default: Any = _REQUIRED) -> Any:
        self.seen.add(key)
        if key not in self.data:
            if default is _REQUIRED:
                raise self.error(key, "is required")
            return default
        value = self.data[key]
        kinds = kind if isinstance(kind, tuple) else (kind,)
        # TOML true is a Python int too; only accept it where a bool is asked for.
        if not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds):
            wanted = " or ".join(_TYPE_NAMES[k] for k in kinds)
            raise self.error(key, f"must be {wanted}; got {value!r}")
        return value

    def table(self, key: str, default: Any = _REQUIRED) -> Table | None:
        value = self.get(key, dict, default)
        return None if value is None else Table(self.file, value, self.name(key))

    def tables(self, key: str) -> list[Table]:
        items = self.get(key, list, [])
        for i, item in enumerate(items):
            if not isinstance(item, dict):
                raise self.error(f"{key}[{i}]", f"must be a table; got {item!r}")
        return [Table(self.file, item, self.name(f"{key}[{i}]")) for i, item in enumerate(items)]

    def done(self) -> None:
        unknown = sorted(set(self.data) - self.seen)
        if unknown:
            raise self.error(unknown[0], "is not a known field" + (f" (known: {', '.join(sorted(self.seen))})"
                                                                   if self.seen else ""))


def read_toml(toml_path: Path) -> dict:
    """A lessons/ TOML file's contents; LessonError naming the file if it cannot be read."""
    file = f"{toml_path.parent.name}/{toml_path.name}"
    if tomllib is None:
        raise LessonError(f"{file}: reading lessons needs Python 3.11+ (tomllib) or the 'tomli' package")
    try:
        return tomllib.loads(toml_path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise LessonError(f"{file}: cannot be read: {exc}") from None
