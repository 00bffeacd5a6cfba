"""Data in and out: datasets, feedback and logs, batch files, readers, exports, the demo."""
