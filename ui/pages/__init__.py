"""The pages: the lab (with the lesson panel beside it), the lessons and glossary, A/B, and the sweep."""
