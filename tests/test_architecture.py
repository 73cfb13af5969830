"""The folder lines the code keeps: engine/ and lab/ never draw, and one object owns a session's state.

Read from the source itself (import statements, attribute names), so a new module is
checked the day it is added.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("engine", "lab", "ui", "bench", "tools")


def _modules() -> list[Path]:
    return [p for package in PACKAGES for p in sorted((ROOT / package).rglob("*.py"))] + [ROOT / "app.py"]


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module.split(".")[0])
    return names


def _relative(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


def test_the_walk_covers_every_package():
    found = {_relative(p).split("/")[0] for p in _modules()}
    assert found == {*PACKAGES, "app.py"}
    assert len(_modules()) > 40


def test_only_ui_and_app_import_streamlit():
    drawing = [_relative(p) for p in _modules() if "streamlit" in _imports(p)]
    assert drawing, "the UI must import streamlit somewhere"
    assert all(path.startswith("ui/") or path == "app.py" for path in drawing), drawing


def test_engine_and_lab_never_import_the_ui():
    for path in _modules():
        if _relative(path).startswith(("engine/", "lab/")):
            assert not _imports(path) & {"ui", "app"}, _relative(path)


def test_the_engine_never_imports_the_lab():
    for path in _modules():
        if _relative(path).startswith("engine/"):
            assert "lab" not in _imports(path), _relative(path)


def test_only_the_session_touches_session_state():
    touching = [_relative(p) for p in _modules()
                if any(isinstance(node, ast.Attribute) and node.attr == "session_state"
                       for node in ast.walk(ast.parse(p.read_text(encoding="utf-8"))))]
    assert touching == ["ui/session.py"]
