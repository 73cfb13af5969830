"""A saved run on screen: the banner above it, and in place of the knobs, the ways out of the replay."""

from __future__ import annotations

import streamlit as st

from engine.workload import WorkloadSource
from lab.recording import Recording
from ui.draw import literal, plain
from ui.session import cached_load, exclusive, session


@exclusive
def _on_back_to_live() -> None:
    s = session()
    s.show(s.live_run)  # None: the session's run starts afresh on its next use
    s.live_run = None


@exclusive
def _on_continue_live() -> None:
    """Re-run the file on the engine; if every recorded step comes out the same, the live run takes
    over at the step on screen and can go past the end."""
    s = session()
    recording: Recording = s.run
    try:
        run = recording.continue_live(cached_load)
    except (ValueError, OSError) as exc:
        s.flash("error", f"The engine could not re-run {literal(recording.name)}: {plain(exc)}. It stays a replay.")
        return
    s.show(run, WorkloadSource(requests=tuple(recording.workload), name=f"workload of {recording.name}"))
    s.live_run = None
    s.flash("success", f"The engine re-ran {literal(recording.name)} step for step; this is now a live run.")


def notice() -> None:
    """Above the step bar: whose steps these are, and why Step stops at the last one."""
    run: Recording = session().run
    last = len(run.records) - 1
    message = (f":material/movie: **Replay of** {literal(run.name)}: {last + 1} recorded steps, no engine running. "
               "Step, Run and Play move through the recording.")
    if run.done:
        message += (f" **Step {last} is the last recorded step**: going further needs the engine. "
                    "*Continue live* in the sidebar re-runs the file on the engine and carries on from here.")
    st.info(message)


def sidebar() -> None:
    """The file's config (read-only) and the ways out of the replay."""
    s = session()
    run: Recording = s.run
    with st.sidebar:
        st.markdown("### :material/neurology: Scheduler Loop Lab")
        st.header("Replay", divider="gray")
        st.caption(f"{literal(run.name)} · {len(run.records)} steps · {len(run.workload)} requests")
        st.button("Back to the live lab", key="back_to_live", on_click=_on_back_to_live, type="primary",
                  width="stretch", icon=":material/undo:")
        st.button("Continue live", key="continue_live", on_click=_on_continue_live, width="stretch",
                  icon=":material/play_circle:", help="Re-run the file's config and workload on the engine. If it "
                  "reproduces every recorded step, the run goes on live from the step shown.")
        with st.expander("The recorded knobs"):
            st.dataframe({"knob": list(run.config.to_dict()), "value": [str(v) for v in run.config.to_dict().values()]},
                         hide_index=True, key="replay_knobs")
