"""A load in time from the lab's sidebar: a trace priced on a deployment, its link, and the SLO panel."""

from __future__ import annotations

import pytest

from engine.hardware import SUGGESTED
from engine.workload.load import TraceSpec
from tests.ui.test_app import click, markdown, run_of, session_of
from tests.ui.test_app_share import link_of, open_app


@pytest.fixture
def app(lab_model, monkeypatch):
    monkeypatch.setenv("LAB_MODEL", lab_model)
    return open_app()


def test_loading_a_trace_prices_the_run_and_the_link_names_the_trace(app):
    app.selectbox(key="load_kind").set_value("azure-code")
    app.number_input(key="load_rate").set_value(2.0)
    app.number_input(key="load_duration").set_value(10.0)
    app.button[[b.label for b in app.button].index("Load")].click().run()
    assert not app.exception
    run = run_of(app)
    spec = TraceSpec("azure-code", rate=2.0, duration_s=10.0)
    assert run.workload == spec.items() and run.config.deployment == SUGGESTED[0]  # arrivals need a clock
    assert session_of(app).source.load == spec and any("trace azure-code" in c.value for c in app.caption)
    link = link_of(app)
    assert link["trace"] == "azure-code" and link["trace.rate"] == "2.0" and not any(k.startswith("req.") for k in link)
    assert run_of(open_app(link)).workload == spec.items()


def test_the_slo_panel_reports_attainment_and_goodput_of_the_finished_requests(app):
    app.number_input(key="knob_slo_ttft_ms").set_value(200.0).run()
    assert run_of(app).config_next().slo_ttft_ms == 200.0 and run_of(app).cursor == -1  # live: nothing restarts
    app.selectbox(key="knob_deployment").set_value(SUGGESTED[0]).run()
    app.number_input(key="run_n").set_value(60)
    click(app, "run_steps")
    app.session_state["history_tab"] = "Metrics"
    app.run()
    shown = markdown(app)
    # Its terms link to their glossary entries (a new tab), so "goodput" is one click from its meaning.
    assert "**[SLO](glossary#slo)** [TTFT](glossary#ttft) ≤ 200 ms" in shown and "attained" in shown
    assert "[goodput](glossary#goodput)" in shown
