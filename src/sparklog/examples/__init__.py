"""Code shared by ``make demo`` (:mod:`sparklog.demo`) and the notebooks in ``examples/notebooks``.

- :mod:`sparklog.examples.clickstream`: a synthetic click stream (keys, event times, late records)
  and the aggregates a correct pipeline must produce from it (numpy and pyarrow only, no Spark).
- :mod:`sparklog.examples.pipeline`: the Structured Streaming job (``format("sparklog")`` ->
  windowed aggregation with a watermark -> Delta Lake MERGE), group lag, and the chart.
"""
