"""The lab page (ui/pages/lab/page.py), its live views (views.py) and its sections (sections.py)."""

from ui.pages.lab.page import page
from ui.pages.lab.sections import scrubber_key

__all__ = ["page", "scrubber_key"]
