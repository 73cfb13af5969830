"""Streamlit widgets the pages share: the step bar, the knobs, the workload panel, sharing, presenter mode."""
