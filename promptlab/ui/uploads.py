"""Uploaded files as real files for a moment: DuckDB's readers import from a path."""

from __future__ import annotations

import re
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO

from promptlab.errors import DatasetError

#: The largest upload the Datasets page imports (Streamlit's own default cap, too).
MAX_UPLOAD_BYTES = 200 * 2**20


@contextmanager
def saved_upload(
    data: BinaryIO, filename: str, size: int, max_bytes: int = MAX_UPLOAD_BYTES
) -> Iterator[Path]:
    """The upload written under its own file name (no folders) in a private temporary
    folder, removed afterwards; refused when larger than `max_bytes`."""
    name = Path(filename).name or "upload"
    if size > max_bytes:
        raise DatasetError(
            f"{name}: {size:,} bytes, more than the {max_bytes:,} an upload may have"
        )
    with tempfile.TemporaryDirectory(prefix="promptlab-upload-") as folder:
        path = Path(folder) / name
        data.seek(0)
        with path.open("wb") as handle:
            shutil.copyfileobj(data, handle, 2**20)
        yield path


def dataset_name_for(filename: str) -> str:
    """A dataset name made from a file name: `Tickets 2024.csv` -> `tickets-2024`."""
    stem = Path(filename).stem.lower()
    name = re.sub(r"[^a-z0-9_.-]+", "-", stem).strip("-._")
    return name[:80] or "dataset"
