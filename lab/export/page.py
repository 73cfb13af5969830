"""The charts as one standalone HTML page that works offline."""

from __future__ import annotations

import html

import plotly.graph_objects as go


def figures_html(figures: list[go.Figure], title: str = "Scheduler Loop Lab") -> str:
    """One standalone HTML page with every figure. plotly.js is inlined once (with the first
    figure) so the page works offline, e.g. on a lecture-hall laptop."""
    parts = [fig.to_html(full_html=False, include_plotlyjs=(i == 0)) for i, fig in enumerate(figures)]
    body = "\n".join(f"<div class='figure'>{p}</div>" for p in parts)
    safe_title = html.escape(title)
    return (f"<!DOCTYPE html>\n<html><head><meta charset='utf-8'><title>{safe_title}</title></head>\n"
            f"<body><h1>{safe_title}</h1>\n{body}\n</body></html>\n")
