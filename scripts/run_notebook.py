"""Run a notebook top to bottom and keep what it printed and drew (the committed copy stays without outputs).

    .venv/bin/python scripts/run_notebook.py examples/notebooks/02-stream-to-delta.ipynb \\
        --executed data/notebooks/02-stream-to-delta.ipynb --chart docs/images/stream-to-delta.png

``--chart`` writes the notebook's last PNG output (how the README's chart was made).
"""

from __future__ import annotations

import argparse
import base64
import sys
from pathlib import Path

import nbformat
from nbclient import NotebookClient


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("notebook", type=Path)
    parser.add_argument("--executed", type=Path, help="write the executed notebook here")
    parser.add_argument("--chart", type=Path, help="write the last image/png output here")
    args = parser.parse_args(argv)

    book = nbformat.read(args.notebook, as_version=4)
    NotebookClient(
        book, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(args.notebook.parent)}}
    ).execute()
    if args.executed:
        args.executed.parent.mkdir(parents=True, exist_ok=True)
        nbformat.write(book, args.executed)
    if args.chart:
        images = [
            o["data"]["image/png"] for c in book.cells for o in c.get("outputs", []) if "image/png" in o.get("data", {})
        ]
        if not images:
            print(f"{args.notebook} drew no chart", file=sys.stderr)
            return 1
        args.chart.parent.mkdir(parents=True, exist_ok=True)
        args.chart.write_bytes(base64.b64decode(images[-1]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
