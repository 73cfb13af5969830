"""The sidebar's last section: the share link, the downloads, loading a saved run, presenter mode."""

from __future__ import annotations

import streamlit as st

from lab.budgets import check_replay
from lab.export import SavedRun, downloads, load_run
from lab.recording import Recording
from ui.draw import literal
from ui.link import LINK_PARAMS, LONG_LINK, scenario_params, share_url
from ui.session import cached_load, exclusive, session
from ui.widgets import presenter
from ui.widgets.workload import file_name, read_upload


def _budgeted_run(text: str) -> SavedRun:
    saved = load_run(text)
    check_replay(saved.config, cached_load)
    return saved


@exclusive
def _on_run_upload() -> None:
    saved = read_upload("run_upload", _budgeted_run)
    if saved is None:
        return
    s = session()
    name = file_name(s.widget("run_upload"))
    if not s.replaying:
        s.live_run = s.run  # to come back to
    s.show(Recording(saved, name))
    s.flash("success", f"Loaded {literal(name)}: {len(saved.records)} recorded steps, replayed without the engine. "
                       "Step and the slider move through them.")


def share_panel() -> None:
    s = session()
    run = s.run
    with st.sidebar:
        st.header("Share", divider="gray")
        with st.expander("Share link", icon=":material/link:"):
            if s.replaying:
                st.caption("A replayed file has no link: share the file itself.")
            elif (count := len(scenario_params(s))) > LINK_PARAMS - 2:
                st.warning(f"This run lists its {len(run.items())} requests one by one: as a link it would take "
                           f"{count:,} parameters, and a link opens with at most {LINK_PARAMS:,}. Share it as a "
                           "file instead: **Export ▸ Run (JSONL)**, which anyone can open under *Load a saved run*.")
            else:
                # Drawn with the sidebar, which a Step does not redraw (ui/pages/lab/page.py): so the link
                # says which step it opens at, and the button below brings it up to the step on screen.
                url, at = share_url(), "before step 0" if run.cursor < 0 else f"at step {run.cursor}"
                st.caption(f"Opens the lab **{at}**, with these knobs and this workload. Copy it with the button "
                           "at the code block's right. The address bar always holds the link to the step on screen.")
                st.code(url, language=None, wrap_lines=True)
                st.button("Link to the step on screen", key="share_refresh", icon=":material/refresh:",
                          width="stretch", help="Make the link again, for the step the views show now.")
                if len(url) > LONG_LINK:
                    st.warning(f"This link is {len(url)} characters long: some mail and chat tools cut links that "
                               "long. Export the run instead.")
        with st.expander("Export", icon=":material/download:"):
            if not run.records:
                st.caption("Run a step first: there is nothing to export yet.")
            for i, (label, name, data, mime, why) in enumerate(downloads(run)):
                st.download_button(label, data, name, mime, key=f"export_{i}", help=why, on_click="ignore",
                                   disabled=not run.records, width="stretch", icon=":material/download:")
            st.caption("The trace opens in [ui.perfetto.dev](https://ui.perfetto.dev): one track per request.")
        with st.expander("Load a saved run", icon=":material/upload_file:"):
            st.file_uploader("A run file (.jsonl) exported from the lab", type=["jsonl"], key="run_upload",
                             on_change=_on_run_upload, help="Replays its steps without the model. A bad file is "
                             "named with its line, and the current run is kept.")
        presenter.toggle()
