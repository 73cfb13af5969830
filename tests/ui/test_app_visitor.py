"""A visitor on a shared classroom server, in the running app (AppTest; issue 32): models only
from the operator's list, files and links held to the session's budgets, input shown as text and
never as Markdown, and a restarted server that says what it rebuilt. The session keeps what it had."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from engine.workload import WorkloadItem, dump_workload
from tests.ui.test_app import click, run_of
from tests.ui.test_app_share import export, open_app, upload_run
from ui.link import BOOT, REPLAY_PARAM, SERVER_PARAM


@pytest.fixture
def lab_env(lab_model, monkeypatch):
    monkeypatch.setenv("LAB_MODEL", lab_model)
    monkeypatch.delenv("LAB_MODELS", raising=False)


def messages(app) -> str:
    """Every message on the page, as a reader sees it (Markdown's backslash escapes undone)."""
    text = "\n".join(m.value for kind in (app.error, app.warning, app.info, app.success) for m in kind)
    return re.sub(r"\\(.)", r"\1", text)


def rewrite(text: str, edit_header=None, edit_record=None) -> str:
    lines = [json.loads(line) for line in text.splitlines()]
    if edit_header:
        edit_header(lines[0])
    for record in lines[1:]:
        if edit_record:
            edit_record(record)
    return "\n".join(json.dumps(line) for line in lines) + "\n"


def test_the_model_is_picked_from_the_operators_list_and_never_typed(lab_env, lab_model, monkeypatch):
    monkeypatch.setenv("LAB_MODELS", "/srv/models/other")
    app = open_app()
    box = app.selectbox(key="knob_model")
    assert box.options == [Path(lab_model).name, "other"]  # folder names only: no server path is shown
    assert not [t for t in app.text_input if t.key == "knob_model"]


@pytest.mark.parametrize("model", ["/etc", "/no/such/folder"])
def test_continue_live_refuses_a_files_model_the_server_does_not_offer(lab_env, model):
    app = open_app({"preset": "burst"})
    click(app, "run_steps")
    upload_run(app, "theirs.jsonl", rewrite(export(app, "Run"), lambda h: h["config"].update(model=model)))
    replay = run_of(app)
    click(app, "continue_live")
    said = messages(app)
    assert "does not offer that model" in said and "config.json" not in said and "no folder" not in said
    assert run_of(app) is replay  # it stays a replay


def test_a_saved_run_past_the_pool_budget_is_refused_and_the_run_kept(lab_env):
    app = open_app({"preset": "burst"})
    click(app, "run_steps")
    live = run_of(app)
    big = rewrite(export(app, "Run"), lambda h: h["config"].update(num_gpu_blocks=1_000_000),
                  lambda r: r["budget"].update(num_gpu_blocks=1_000_000))
    upload_run(app, "huge.jsonl", big)
    assert "num_gpu_blocks=1000000" in messages(app) and run_of(app) is live


def test_a_files_bad_value_is_shown_as_text_never_as_a_link(lab_env):
    app = open_app({"preset": "burst"})
    click(app, "run_steps")
    evil = "[Session expired, log in](http://evil.example/login)"
    upload_run(app, "x.jsonl", rewrite(export(app, "Run"), edit_record=lambda r: r["budget"].update(tokens_used=evil)))
    said = app.error[0].value
    assert "budget.tokens_used must be an integer" in said
    assert "http" not in re.sub(r"(`+).*?\1", "", said)  # a URL is shown only as code, never linked
    assert "\\[Session expired," in said  # its brackets escaped: no link syntax left


def test_a_link_past_the_request_budget_is_refused_and_the_lab_opens_on_its_defaults(lab_env):
    app = open_app({f"req.{i}": "ROMEO:" for i in range(501)})
    assert "requests; a lab session may have 500" in app.error[0].value
    assert len(run_of(app).items()) < 501


def test_a_run_too_large_for_a_link_offers_its_file_and_writes_no_broken_link(lab_env):
    app = open_app()
    items = [WorkloadItem(f"ROMEO: {i}", max_tokens=3 + i % 5, arrival_step=i) for i in range(500)]
    app.file_uploader(key="upload").set_value(("many.jsonl", dump_workload(items, "jsonl").encode(),
                                               "application/jsonl")).run()
    assert len(run_of(app).items()) == 500
    assert any("a link opens with at most 1,000" in w.value for w in app.warning)
    assert set(app.query_params) <= {SERVER_PARAM, "done", "present"}  # no link it could not open


def test_a_page_reconnecting_to_a_restarted_server_says_what_was_rebuilt(lab_env):
    rebuilt = open_app({"preset": "burst", "step": "3", SERVER_PARAM: "0ld5erv"})
    assert "server restarted" in rebuilt.info[0].value and run_of(rebuilt).cursor == 3
    lost = open_app({REPLAY_PARAM: "mine.jsonl", SERVER_PARAM: "0ld5erv"})
    assert "The server restarted since this page showed the replay of ` mine.jsonl `" in lost.warning[0].value
    copied = open_app({REPLAY_PARAM: "mine.jsonl", SERVER_PARAM: BOOT})  # the address bar, in a new tab
    assert "A new session opened" in copied.warning[0].value
    same = open_app({"preset": "burst", SERVER_PARAM: BOOT})
    assert not same.info or "restarted" not in same.info[0].value
