"""The only part of promptlab that imports Streamlit: shared resources and widgets."""
