"""Pricing steps on a deployment from the lab: the sidebar control, the roofline, the link, bad names."""

from __future__ import annotations

import pytest

from tests.ui.test_app import charts, click, markdown, run_of
from tests.ui.test_app_share import link_of, open_app

DEPLOYMENT = "llama-3.1-8b@h100-sxm"


@pytest.fixture
def app(lab_model, monkeypatch):
    monkeypatch.setenv("LAB_MODEL", lab_model)
    return open_app()


def test_price_steps_as_a_deployment_draws_its_roofline_and_joins_the_link(app):
    assert "roofline" not in charts(click(app, "step"))  # this machine's clock: nothing modeled
    app.selectbox(key="knob_deployment").set_value(DEPLOYMENT).run()
    run = run_of(app)
    assert run.config.deployment == DEPLOYMENT and run.cursor == -1  # a pricing change restarts the run
    click(app, "step")
    record = run_of(app).record
    assert record.modeled is not None and record.modeled.deployment == DEPLOYMENT
    roof = charts(app)["roofline"]
    assert DEPLOYMENT in roof["layout"]["annotations"][0]["text"]
    # the step's own cost beside the clock (issue 31: lesson 9's header showed only the clock)
    assert f"this step {record.modeled.total_ms:,.1f} ms, clock {record.modeled.clock_ms:,.1f} ms modeled" \
        in markdown(app)
    assert link_of(app)["k.deployment"] == DEPLOYMENT

    opened = open_app(link_of(app))  # the link reopens the same priced run
    assert run_of(opened).config.deployment == DEPLOYMENT
    assert run_of(opened).records[0].modeled == record.modeled


def test_a_name_that_cannot_be_priced_is_named_and_the_run_kept(lab_model, monkeypatch):
    """From a link (a name typed into the control takes the same path: Run.set_knobs, then a message)."""
    monkeypatch.setenv("LAB_MODEL", lab_model)
    opened = open_app({"k.deployment": "llama-3.1-8b@h800", "k.num_gpu_blocks": "20"})
    warning = " ".join(w.value for w in opened.warning)
    assert "k.deployment" in warning and "unknown GPU 'h800'" in warning
    run = run_of(opened)
    assert run.config.deployment is None and run.config.num_gpu_blocks == 20  # the rest of the link is used
    with pytest.raises(ValueError, match="deployment"):
        run.set_knobs(deployment="gpt@h100-sxm")
    assert run_of(opened).config.deployment is None
