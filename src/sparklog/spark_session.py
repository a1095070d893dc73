"""A local SparkSession with what sparklog's users need: the ``sparklog`` data source and Delta Lake
(jars fetched by ``scripts/install_delta.sh`` into ``.deps/delta``, passed with ``spark.jars``)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any


def delta_jars() -> list[str]:
    """The Delta Lake jars installed for this project (env ``SPARKLOG_DELTA_JARS``: a directory)."""
    roots = [os.environ.get("SPARKLOG_DELTA_JARS")] if os.environ.get("SPARKLOG_DELTA_JARS") else []
    here = Path(__file__).resolve()
    roots += [str(parent / ".deps" / "delta") for parent in here.parents] + [str(Path.cwd() / ".deps" / "delta")]
    for root in roots:
        jars = sorted(str(p) for p in Path(root).glob("delta-*.jar"))
        if jars:
            return jars
    raise FileNotFoundError("the Delta Lake jars are not installed: run scripts/install_delta.sh (make does)")


def local_spark(app: str = "sparklog", master: str = "local[2]", delta: bool = True, **conf: Any) -> Any:
    """A local SparkSession (UTC, no UI) with the ``sparklog`` data source registered; with
    ``delta`` the Delta Lake extension and catalog."""
    import sys

    from pyspark.sql import SparkSession

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)  # workers must import sparklog too

    builder = (
        SparkSession.builder.master(master)
        .appName(app)
        .config("spark.ui.enabled", "false")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.shuffle.partitions", "4")
    )
    if delta:
        builder = (
            builder.config("spark.jars", ",".join(delta_jars()))
            .config("spark.sql.extensions", "io.delta.sql.DeltaSparkSessionExtension")
            .config("spark.sql.catalog.spark_catalog", "org.apache.spark.sql.delta.catalog.DeltaCatalog")
        )
    for key, value in conf.items():
        builder = builder.config(key.replace("_", "."), str(value))
    spark = builder.getOrCreate()
    from sparklog.datasource import register

    register(spark)
    return spark
