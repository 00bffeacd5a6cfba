"""Rows and Plotly figures the pages show (pure: no Streamlit, no store)."""
