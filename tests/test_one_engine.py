"""One engine per workbench: the app's browser sessions (threads) share it."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

from promptlab.engine import Engine
from promptlab.workbench import Workbench

THREADS = 8


def test_threads_asking_at_once_get_one_engine(db_path: object) -> None:
    with Workbench.open() as wb:
        start = threading.Barrier(THREADS)

        def first_use() -> Engine:
            start.wait()  # every thread asks at the same moment
            return wb.engine

        with ThreadPoolExecutor(THREADS) as pool:
            engines = list(pool.map(lambda _i: first_use(), range(THREADS)))
        assert len({id(engine) for engine in engines}) == 1
        assert wb.engine is engines[0]
