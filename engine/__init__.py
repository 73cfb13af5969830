"""A small, real LLM serving engine advanced one scheduler step at a time."""

from engine.config import DEFAULT_MODEL, EngineConfig, SamplingParams
from engine.engine import Engine
from engine.model_runner import LoadedModel, ModelLoadError, load_model
from engine.records import StepRecord

__all__ = ["DEFAULT_MODEL", "Engine", "EngineConfig", "LoadedModel", "ModelLoadError", "SamplingParams",
           "StepRecord", "load_model"]
