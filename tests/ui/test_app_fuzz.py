"""Random links, workload files and run files thrown at the running app (AppTest; issue 32).

Whatever arrives, the app must answer with a message and keep going: no exception, nothing from
the input drawn as HTML or Markdown (a link, an image, an element), and the session's engine within
its pool budget. Every input carries the same two markers, so a test can look for them anywhere
on the page."""

from __future__ import annotations

import json
import re

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from streamlit.testing.v1 import AppTest

from engine.knobs import LINK_KNOBS
from lab.budgets import KV_POOL_BYTES, MAX_REQUESTS
from tests.ui.test_app import APP, run_of
from tests.ui.test_app_share import export, upload_run

TAG = '<img src=x id="fz">'
LINK = "[fz](http://fz.example/p.png)"
HOSTILE = st.sampled_from([TAG, LINK, "!" + LINK, "$x^2$", ":red[fz]", "\ud800", "[" * 5000, "9" * 5000, "1e308",
                           "-1", "nan", "inf", "0", "100000", "1-999999999999999999", "lognormal:1.7e308:3", "",
                           "true", "none", "burst", "<script>fz</script>"])
KEYS = st.sampled_from(["preset", "seed", "step", "lesson", "done", "present", "gen.requests", "gen.rate", "gen.prompt",
                        "gen.output", "trace", "trace.rate", "load.rate", "load.prompt", "req.0", "req.0.max_tokens",
                        "req.0.prompt_tokens", "req.7.at", "at3.max_num_seqs", "srv", "replay", TAG, LINK,
                        *(f"k.{k}" for k in LINK_KNOBS)])

fuzz = settings(max_examples=25, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
CODE_SPAN = re.compile(r"(`+).*?\1", re.S)  # shown as typed, whatever it holds


def drawn(body: str) -> str:
    """What Markdown would read as markup: the body less its code spans."""
    return CODE_SPAN.sub("", body)


def check_page(app: AppTest) -> None:
    """No exception; no input drawn as a link, an image or (where HTML is allowed) an element; the
    engine within its budget."""
    assert not app.exception, app.exception
    for element in (*app.markdown, *app.error, *app.warning, *app.info, *app.success, *app.caption):
        body = drawn(element.proto.body)
        assert "](http://fz" not in body and "http://fz" not in body, body[:300]
        if getattr(element.proto, "allow_html", False):
            assert 'id="fz"' not in body and "<script>fz" not in body, body[:300]
    run = run_of(app)
    engine = getattr(run, "_engine", None)
    if engine is not None:
        cache = engine.runner.cache
        assert cache.gpu.nbytes + cache.cpu.nbytes <= KV_POOL_BYTES
    assert len(run.items()) <= MAX_REQUESTS


@fuzz
@given(params=st.dictionaries(KEYS, HOSTILE, max_size=6))
def test_any_link_opens_with_its_problems_named(lab_model, monkeypatch, params):
    monkeypatch.setenv("LAB_MODEL", lab_model)
    app = AppTest.from_file(APP, default_timeout=120)
    app.query_params.update(params)
    check_page(app.run())


FIELDS = st.sampled_from(["prompt", "max_tokens", "priority", "arrival_step", "temperature", "ignore_eos",
                          "prompt_tokens", "arrival_ms", "length_scale", TAG])
VALUES = st.one_of(HOSTILE, st.integers(-10**30, 10**30), st.floats(), st.booleans(), st.none(),
                   st.lists(st.integers(), max_size=3))


@fuzz
@given(rows=st.lists(st.dictionaries(FIELDS, VALUES, max_size=4), min_size=1, max_size=4))
def test_any_workload_file_loads_or_is_named(lab_model, monkeypatch, rows):
    monkeypatch.setenv("LAB_MODEL", lab_model)
    app = AppTest.from_file(APP, default_timeout=120).run()
    text = "\n".join(json.dumps({"prompt": "ROMEO:", **row}) for row in rows)
    app.file_uploader(key="upload").set_value((f"{LINK}.jsonl", text.encode("utf-8", "surrogatepass"),
                                               "application/jsonl")).run()
    check_page(app)


@fuzz
@given(line=st.integers(0, 3), path=st.lists(st.sampled_from(["budget", "batch", "events", "requests", "blocks",
                                                                "config", "workload", "changes", "modeled", "stats",
                                                                "0", "kind", "status", "tokens_used",
                                                                "num_gpu_blocks", "request_id"]), min_size=1,
                                               max_size=3), value=VALUES)
def test_any_edited_run_file_replays_or_is_named(lab_model, monkeypatch, line, path, value):
    monkeypatch.setenv("LAB_MODEL", lab_model)
    app = AppTest.from_file(APP, default_timeout=120)
    app.query_params.update({"preset": "burst", "step": "3"})
    app.run()
    lines = [json.loads(x) for x in export(app, "Run").splitlines()]
    _set(lines[line], path, value)
    upload_run(app, "fz.jsonl", "\n".join(json.dumps(x) for x in lines).encode("utf-8", "surrogatepass"))
    app.button(key="step").click().run()
    check_page(app)


def _set(data: object, path: list[str], value: object) -> None:
    """Put value at the path's end, through whatever containers the path finds (or at the top)."""
    for key in path[:-1]:
        child = data.get(key) if isinstance(data, dict) else data[int(key)] if isinstance(data, list) and \
            re.fullmatch(r"\d", key) and int(key) < len(data) else None
        if not isinstance(child, dict | list):
            break
        data = child
    if isinstance(data, dict):
        data[path[-1]] = value
    elif isinstance(data, list) and data:
        data[0] = value
