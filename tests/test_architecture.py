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


# The benchmarks that play a class against a running server speak Streamlit's own protocol (its
# protobufs) and time its script runner: they stand outside the lab, as a browser does.
STREAMLIT_CLIENTS = ("bench/stream_client.py", "bench/probe/sitecustomize.py")


def test_only_ui_and_app_import_streamlit():
    drawing = [_relative(p) for p in _modules() if "streamlit" in _imports(p)]
    assert drawing, "the UI must import streamlit somewhere"
    assert all(path.startswith("ui/") or path in ("app.py", *STREAMLIT_CLIENTS) for path in drawing), drawing


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


# ---- one job a module, and no circles ---------------------------------------------------------------

MAX_LINES = 400  # a module longer than this is doing several jobs (tests and the training script aside)


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _internal_imports(path: Path, known: set[str]) -> set[str]:
    """The project modules a module imports, type-checking-only imports included: `from a import b`
    names the module a.b where b is a module, else a."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names if alias.name in known}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0 and node.module in known:
            subs = {f"{node.module}.{alias.name}" for alias in node.names} & known
            found |= subs or {node.module}
            if len(subs) < len(node.names):
                found.add(node.module)
    return found


def test_no_module_is_over_the_line_limit():
    long = {_relative(p): n for p in _modules() if not _relative(p).startswith("tools/")
            and (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_LINES}
    assert not long, long


def test_no_modules_import_each_other_round_a_circle():
    paths = {_module_name(p): p for p in _modules()}
    graph = {name: _internal_imports(path, set(paths)) - {name} for name, path in paths.items()}
    # A package's __init__ re-exports its modules; a module importing its own package's names is no circle.
    graph = {name: {d for d in deps if not name.startswith(d + ".")} for name, deps in graph.items()}
    seen, on_path, circles = set(), [], []

    def visit(name: str) -> None:
        if name in on_path:
            circles.append(on_path[on_path.index(name):] + [name])
            return
        if name in seen:
            return
        seen.add(name)
        on_path.append(name)
        for dep in sorted(graph[name]):
            visit(dep)
        on_path.pop()

    for name in sorted(graph):
        visit(name)
    assert not circles, circles
