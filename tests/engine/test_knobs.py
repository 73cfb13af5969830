"""The knob table is the one place a knob's facts live: the config, its checks, the CLI, the link, the
sidebar, the sweep and A/B all read it, and a new knob is one row."""

from __future__ import annotations

import ast
import dataclasses
import typing
from pathlib import Path

import pytest

from engine.__main__ import build_parser
from engine.config import EngineConfig, config_class
from engine.knobs import AB_KNOBS, GROUPS, KNOB, KNOBS, LINK_KNOBS, LIVE_KNOBS, SWEEP_KNOBS, Knob
from engine.presets import PRESET_RULES
from engine.values import parse, spell

ROOT = Path(__file__).resolve().parents[2]


def test_the_config_has_one_field_per_row_typed_and_defaulted_by_it():
    fields = dataclasses.fields(EngineConfig)
    hints = typing.get_type_hints(EngineConfig)
    assert [f.name for f in fields] == [k.name for k in KNOBS]
    for f in fields:
        knob = KNOB[f.name]
        assert f.default == knob.default and hints[f.name] == knob.annotation
        knob.check(knob.default)


@pytest.mark.parametrize("knob", KNOBS, ids=lambda k: k.name)
def test_each_row_is_complete_and_its_values_survive_the_text_they_are_typed_as(knob):
    assert knob.help and knob.group in GROUPS and knob.allowed()
    assert (knob.low is None) == (knob.type not in (int, float))
    if knob.choices:
        assert knob.default in knob.choices
        assert not knob.accepts("no such choice")
    if knob.type in (int, float):
        assert knob.accepts(knob.low) != knob.open_low
        assert not knob.accepts(knob.low - 1) and (knob.high is None or not knob.accepts(knob.high + 1))
        assert not knob.accepts(True), "a bool is not a number of anything"
    if knob.default is not None or knob.optional:
        assert parse(spell(knob.default), knob.annotation) == knob.default
    for text in filter(None, (v.strip() for v in knob.sweep.split(","))):  # a sweep's suggestions run as given
        knob.check(parse(text, knob.annotation))


def test_the_tables_read_from_the_rows_agree():
    assert set(LIVE_KNOBS) == {k.name for k in KNOBS if k.group in ("scheduler", "slo")}
    assert set(LINK_KNOBS) == set(KNOB) - {"model", "device"}
    assert set(SWEEP_KNOBS) <= set(KNOB) and set(AB_KNOBS) <= set(KNOB)
    assert all(set(rules) <= LIVE_KNOBS for rules in PRESET_RULES.values()), "a preset sets live rules only"


def test_every_knob_is_a_flag_and_a_sidebar_widget_exactly_once():
    flags = {a.dest for a in build_parser()._actions}
    assert set(KNOB) <= flags
    from ui.widgets.knobs import PANEL, widget_kind
    shown = [k.name for group in PANEL.values() for k in group]
    assert sorted(shown) == sorted(KNOB)
    assert {widget_kind(k) for k in KNOBS} >= {"int", "float", "target", "bool", "choice", "deployment", "model"}


DICT_METHODS = {"get", "items", "keys", "values", "pop", "update"}  # a lesson's or a model's config read as a dict


def _config_attributes() -> dict[str, set[str]]:
    """Attributes the code reads off an object named config or cfg (not a model's config): each
    must be a knob or one of EngineConfig's own methods."""
    found: dict[str, set[str]] = {}
    for package in ("engine", "lab", "ui"):  # bench/ reads a model's HF config as cfg
        for path in (ROOT / package).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if not isinstance(node, ast.Attribute):
                    continue
                owner = node.value
                named = (isinstance(owner, ast.Name) and owner.id in ("config", "cfg")) or \
                    (isinstance(owner, ast.Attribute) and owner.attr == "config" and not
                     (isinstance(owner.value, ast.Name) and owner.value.id == "model") and not
                     (isinstance(owner.value, ast.Attribute) and owner.value.attr == "model"))
                if named and node.attr not in DICT_METHODS:
                    found.setdefault(node.attr, set()).add(path.relative_to(ROOT).as_posix())
    return found


def test_every_config_attribute_the_code_reads_is_a_row_of_the_table():
    methods = {name for name in dir(EngineConfig) if not name.startswith("__")}
    unknown = {attr: paths for attr, paths in _config_attributes().items()
               if attr not in KNOB and attr not in methods}
    assert not unknown, f"read off a config but not in the knob table: {unknown}"


def test_a_new_knob_is_one_row():
    """What adding a row gives, with no other change: a typed, defaulted and checked field, a
    command-line flag with its help, a sweep's values read and checked."""
    row = Knob("max_num_partial_prefills", int, 1, "prompts that may be prefilled in chunks at once", "scheduler",
               low=1, high=16, sweep="1, 2, 4")
    rows = (*KNOBS, row)
    config_cls = config_class(rows)
    assert config_cls().max_num_partial_prefills == 1
    assert config_cls(max_num_partial_prefills=4).max_num_partial_prefills == 4
    with pytest.raises(ValueError, match=r"max_num_partial_prefills must be an integer in \[1, 16\]; got 17"):
        config_cls(max_num_partial_prefills=17)
    assert config_cls.from_dict({"max_num_partial_prefills": 2}).max_num_partial_prefills == 2
    args = build_parser(rows).parse_args(["w.jsonl", "--max-num-partial-prefills", "3"])
    assert args.max_num_partial_prefills == 3 and "prefilled in chunks at once" in build_parser(rows).format_help()
    assert [parse(v, row.annotation) for v in row.sweep.split(",")] == [1, 2, 4]
