"""The lab page (ui/pages/lab/page.py), its live views (views.py) and its sections (sections.py)."""

from ui.pages.lab.page import page

__all__ = ["page"]
