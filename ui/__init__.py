"""Streamlit only: one Session object (session.py), the address bar (link.py), widgets/ and pages/."""
