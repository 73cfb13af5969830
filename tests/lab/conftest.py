"""Fixtures of the lab's tests: the default model the lessons are written for."""

from __future__ import annotations

from pathlib import Path

import pytest

from engine import DEFAULT_MODEL, load_model


@pytest.fixture(scope="module")
def loaded():
    if not (Path(DEFAULT_MODEL) / "model.safetensors").exists():
        pytest.fail(f"the default model is missing from {DEFAULT_MODEL}; lessons are written for it")
    return load_model(DEFAULT_MODEL)
