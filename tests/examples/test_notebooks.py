"""The notebooks in examples/notebooks run top to bottom against a real local cluster (each starts and
stops its own ZooKeeper, broker and Spark); a failing cell, including a failed ``assert`` in one,
fails the test. They are committed without outputs."""

from __future__ import annotations

import os
import time
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

pytestmark = pytest.mark.slow

NOTEBOOKS = Path(__file__).resolve().parents[2] / "examples" / "notebooks"  # from tests/examples/
# charts each notebook must draw (image/png outputs)
CHARTS = {
    "01-quickstart.ipynb": 0,
    "02-stream-to-delta.ipynb": 1,
    "03-replay-and-lag.ipynb": 2,
    "04-topic-history-in-delta.ipynb": 1,
}


def test_every_notebook_is_tested_and_committed_without_outputs() -> None:
    assert sorted(p.name for p in NOTEBOOKS.glob("*.ipynb")) == sorted(CHARTS)
    for name in CHARTS:
        book = nbformat.read(NOTEBOOKS / name, as_version=4)
        nbformat.validate(book)
        code = [c for c in book.cells if c.cell_type == "code"]
        assert code, name
        assert all(not c.outputs and c.execution_count is None for c in code), f"{name} has outputs"


@pytest.mark.parametrize("name", sorted(CHARTS))
def test_notebook_runs_top_to_bottom(name: str, tmp_path: Path) -> None:
    book = nbformat.read(NOTEBOOKS / name, as_version=4)
    client = NotebookClient(book, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(NOTEBOOKS)}})
    began = time.monotonic()
    # the kernel's temporary directories go under tmp_path: whatever a failed run leaves is pytest's
    client.execute(env={**os.environ, "TMPDIR": str(tmp_path)})
    print(f"{name}: {time.monotonic() - began:.1f} s")

    code = [c for c in book.cells if c.cell_type == "code"]
    assert all(c.execution_count is not None for c in code), "a cell did not run"
    errors = [o for c in code for o in c.outputs if o.output_type == "error"]
    assert not errors, errors
    images = [o for c in code for o in c.outputs if "image/png" in o.get("data", {})]
    assert len(images) == CHARTS[name]
    stopped = "".join(o.get("text", "") for o in code[-1].outputs)
    assert "stopped Spark, the broker and ZooKeeper" in stopped
    assert not any(tmp_path.glob("sparklog-*")), "the notebook left its working directory behind"
