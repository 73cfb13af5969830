"""The lab page's sections, each drawn from the run's StepRecords: the scrubber, the header, why,
the event log, the generated text, the first screen and the SLO line."""

from __future__ import annotations

import html

import pandas as pd
import streamlit as st

from engine.metrics import Slo
from engine.records import StepRecord
from lab import markup
from lab.charts import window
from lab.charts.history import latest_views
from lab.metrics import run_metrics
from lab.run import History
from ui.draw import prose
from ui.session import session
from ui.widgets import scrubber as slider


def scrubber(run: History) -> None:
    """A slider over recorded history: moving it only changes which step is shown."""
    s = session()
    slider.scrubber("scrubber", lambda: len(s.run.records), run.cursor, lambda i: s.run.seek(i), "step", s.playing,
                    "Time travel: show any past step. Step from a past step branches the run there.")


def header(run: History, record: StepRecord) -> None:
    ses = session()
    playing = f" · ▶ {html.escape(ses.play_meter.note(ses.widget('speed')))}" if ses.playing else ""
    st.markdown(
        f"### Step {record.step} <span style='font-size:.6em;color:#777'>of {len(run.records) - 1}{playing}</span>",
        unsafe_allow_html=True)
    st.markdown(" ".join(f":{colour}-badge[{text}]" for colour, text in markup.badges(record)))
    b = record.budget
    if b.seqs_used > b.seq_cap:  # "7 / 4" would read as a broken limit
        st.caption(f":material/info: {b.seqs_used} requests run under a cap of {b.seq_cap}: `max_num_seqs` was "
                   "lowered while they ran. Lowering it preempts no one; no request is admitted until fewer "
                   f"than {b.seq_cap} run.")
    if not run.at_latest:
        st.caption(f":material/history: Looking back at step {record.step} of {len(run.records) - 1}. **Step** "
                   "re-runs the engine from here and drops the later steps; the slider takes you back to them.")


def why(run: History, record: StepRecord) -> None:
    """This step's decisions, each with the rule that made it."""
    st.markdown("##### Why: this step's decisions")
    lines = markup.change_lines(run.change_before(record.step)) + [markup.event_line(e) for e in record.events]
    st.markdown("".join(f"<div class='lab-event'>{line}</div>" for line in lines or [markup.NO_DECISIONS]),
                unsafe_allow_html=True)


def event_log(records: list[StepRecord]) -> None:
    """The events of the last RECENT_STEPS steps; this step's first, then the most recent."""
    shown = window.recent(records)
    rows = [dict(step=r.step, event=e.kind, request=e.request_id or "", reason=e.reason)
            for r in reversed(shown) for e in r.events]
    if caption := window.note(len(records), len(shown), "steps' events"):
        st.caption(caption)
    st.dataframe(pd.DataFrame(rows, columns=["step", "event", "request", "reason"]), hide_index=True,
                 height=360, key="event_log", column_config={
                     "step": st.column_config.NumberColumn(width="small"),
                     "reason": st.column_config.TextColumn(width="large")})


def generated_text(records: list[StepRecord]) -> None:
    """Each request's output so far; the token produced in the step on screen is highlighted."""
    new = {c.request_id: c.new_token_text for c in records[-1].batch if c.new_token_text is not None}
    rows = []
    views = latest_views(records)
    if caption := window.note(len(views), window.MAX_ROWS, "requests"):
        st.caption(caption)
    for rid, view in list(views.items())[-window.MAX_ROWS:]:
        text = view.output_text
        if rid in new and text.endswith(new[rid]):
            shown = html.escape(text[: len(text) - len(new[rid])]) + f"<mark>{html.escape(new[rid])}</mark>"
        else:
            shown = html.escape(text) or "<i style='color:#999'>nothing yet</i>"
        # escaped: in a loaded run file these are a visitor's text (issue 32)
        counts = html.escape(f"{view.status}, {view.num_output_tokens}/{view.max_tokens} tokens")
        rows.append(f"<div class='lab-event'>{markup.chip(rid)} <span style='color:#666'>{counts}</span>"
                    f"<div class='lab-text'>{shown}</div></div>")
    st.markdown("".join(rows), unsafe_allow_html=True)


def _cannot_start(run: History) -> bool:
    """Before step 0 with nothing the engine will serve (every request refused as it was added):
    say which requests, why, and which knob, rather than leave a page of greyed-out buttons."""
    refused = run.refused
    if not refused:
        return False
    st.markdown("### Nothing can run")
    lines = "\n".join(f"- **{e.request_id}** {e.reason}" for e in refused[:10])
    more = f"\n- ... and {len(refused) - 10} more" if len(refused) > 10 else ""
    st.error(f"The engine refused every request as it was added, so there is no step to run:\n\n{lines}{more}\n\n"
             "Change the limit each reason names in the sidebar: **num_gpu_blocks** (or block_size) for KV pages, "
             "**max_num_batched_tokens** or **enable_chunked_prefill** for a step's tokens, **max_model_len** for "
             "length, **watermark** for the pages kept free. The run starts over with the new value.",
             icon=":material/block:")
    return True


def intro(run: History) -> None:
    """Before step 0: what is about to arrive."""
    if _cannot_start(run):
        return
    st.markdown("### Ready at step 0")
    st.markdown("Press **Step** to run the first turn of the scheduler loop. These requests will arrive:")
    st.dataframe(pd.DataFrame(markup.workload_rows(run)),
                 # Sized to their headers: "small" cut "prompt tokens" to "prompt toke" beside a lesson.
                 hide_index=True, key="intro_workload", column_config={
                     "request": st.column_config.TextColumn(width="small"),
                     "prompt_tokens": st.column_config.NumberColumn("prompt tokens"),
                     "max_tokens": st.column_config.NumberColumn("max tokens"),
                     "arrives_at_step": st.column_config.NumberColumn("arrives at step")})


def slo_summary(run: History, records: list[StepRecord]) -> None:
    """Against the SLO knobs, the requests finished by the step on screen: attainment and goodput."""
    slo = Slo.of(run.config_next())
    if slo is None:
        st.caption("Set a TTFT or TPOT target under *Service-level objectives* to see attainment and goodput.")
        return
    agg = run_metrics(records, slo)["aggregate"]
    targets = " and ".join(f"{name} ≤ {value:g} ms" for name, value in (("TTFT", slo.ttft_ms), ("TPOT", slo.tpot_ms))
                           if value is not None)
    if agg["slo_attainment"] is None:
        st.markdown(f"**SLO** {targets}: no request has finished yet.")
        return
    verdict = ":green[met]" if agg["slo_met"] else ":red[missed]"
    prose(f"**SLO** {targets} for {slo.percentile:g} % of requests: {agg['slo_attainment']:.0%} attained "
          f"({verdict}) · goodput {agg['goodput']:.2f} of {agg['request_throughput']:.2f} finished requests/s")
