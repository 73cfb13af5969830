"""The charts as one standalone HTML page that works offline."""

from __future__ import annotations

import html

import plotly.graph_objects as go


def figures_html(sections: dict[str, go.Figure], title: str = "Scheduler Loop Lab", about: str = "") -> str:
    """One standalone HTML page with every figure under its section title. plotly.js is inlined
    once (with the first figure) so the page works offline, e.g. on a lecture-hall laptop; it is
    most of the page's size (about 4.6 MB), the figures themselves are windowed as on screen."""
    parts = [f"<section><h2>{html.escape(name)}</h2>\n<div class='figure'>"
             f"{fig.to_html(full_html=False, include_plotlyjs=(i == 0))}</div></section>"
             for i, (name, fig) in enumerate(sections.items())]
    safe_title = html.escape(title)
    lede = f"<p>{html.escape(about, quote=False)}</p>\n" if about else ""
    return (f"<!DOCTYPE html>\n<html><head><meta charset='utf-8'><title>{safe_title}</title>\n"
            f"<style>{STYLE}</style></head>\n<body><h1>{safe_title}</h1>\n{lede}" + "\n".join(parts)
            + "\n</body></html>\n")


STYLE = ("body{font-family:'Source Sans Pro','Segoe UI',Helvetica,Arial,sans-serif;color:#262730;"
         "max-width:1100px;margin:2rem auto;padding:0 1rem} h2{font-size:1.2rem;margin:2rem 0 .4rem}")
