"""A local SparkSession with what sparklog's users need: the ``sparklog`` data source and Delta Lake.

Delta's jars come one of two ways (env ``SPARKLOG_DELTA_SOURCE``: ``auto``, the default, ``pip`` or
``jars``):

- ``pip``: :func:`delta.configure_spark_with_delta_pip`, the way delta-spark's users do it: Spark's Ivy
  downloads ``io.delta:delta-spark_<spark>_2.13:<delta-spark version>`` at session start.
- ``jars``: the jars ``scripts/install_delta.sh`` fetched with Maven into ``.deps/delta``, passed with
  ``spark.jars``.

``auto`` takes the pip route only when the artifact it would ask for is on Maven Central, found out
with one HTTP HEAD (3 s at most, once per process), so a session never waits for an Ivy resolution
that is bound to fail. Here it is not: delta-spark 4.4.1 (PyPI) has no 4.4.1 jars on Maven Central,
so the folder holds 4.4.0 of the same Spark 4.2 line (``scripts/delta-pom.xml``). If the pip route
fails anyway (Spark's Ivy also looks in ``~/.m2``, where a POM without its jar makes it give up), the
session starts from the folder.
"""

from __future__ import annotations

import functools
import logging
import os
import sys
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

log = logging.getLogger("sparklog.spark_session")

DELTA_SOURCE_ENV = "SPARKLOG_DELTA_SOURCE"
MAVEN_CENTRAL = "https://repo1.maven.org/maven2"
QUICK_START_JVM_OPTIONS = "-XX:TieredStopAtLevel=1"  # the driver JVM of local_spark(quick_start=True)
DELTA_CONF = {
    "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
    "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
    "spark.databricks.delta.snapshotPartitions": "2",  # default 50 tasks per log replay: slow on 2 cores
}


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


def delta_pip_artifact() -> tuple[str, str, str]:
    """(group, artifact, version) that ``configure_spark_with_delta_pip`` asks Ivy for."""
    from importlib.metadata import version

    import pyspark

    spark_minor = ".".join(pyspark.__version__.split(".")[:2])
    return "io.delta", f"delta-spark_{spark_minor}_2.13", version("delta-spark")


@functools.cache
def delta_pip_resolvable(timeout: float = 3.0) -> bool:
    """Whether Maven Central has the artifact of :func:`delta_pip_artifact` (one HEAD request)."""
    group, artifact, version = delta_pip_artifact()
    url = f"{MAVEN_CENTRAL}/{group.replace('.', '/')}/{artifact}/{version}/{artifact}-{version}.pom"
    try:
        with urllib.request.urlopen(urllib.request.Request(url, method="HEAD"), timeout=timeout) as response:
            return bool(response.status == 200)
    except (urllib.error.URLError, OSError, ValueError):
        return False


def delta_source() -> str:
    """``pip`` or ``jars``: where this process's sessions take Delta from (see the module doc)."""
    chosen = os.environ.get(DELTA_SOURCE_ENV, "auto").strip().lower()
    if chosen not in ("auto", "pip", "jars"):
        raise ValueError(f"{DELTA_SOURCE_ENV} must be auto, pip or jars, got {chosen!r}")
    if chosen == "auto":
        return "pip" if delta_pip_resolvable() else "jars"
    return chosen


def local_spark(
    app: str = "sparklog", master: str = "local[2]", delta: bool = True, quick_start: bool = True, **conf: Any
) -> Any:
    """A local SparkSession (UTC, no UI, no console progress bars, bound to loopback) with the
    ``sparklog`` data source registered; with ``delta`` the Delta Lake extension and catalog. Extra
    settings as keyword arguments, dots spelled as underscores (``spark_sql_shuffle_partitions=2``).

    With a cluster's ``master`` (``spark://host:7077``) the driver binds where ``SPARK_LOCAL_IP``
    says (Spark's default: the machine's address), and executors run ``PYSPARK_PYTHON`` with this
    driver's ``sparklog`` first on their ``PYTHONPATH`` (``spark.executorEnv.PYTHONPATH``).

    ``quick_start``: the driver JVM (started here, unless this process has one already) compiles
    with C1 only (:data:`QUICK_START_JVM_OPTIONS`). A session that lives minutes on small data (the
    demo, the notebooks, trying things out) otherwise spends much of its CPU in the C2 compiler:
    the demo's pipeline (session, Delta table, four availableNow runs on ``local[2]``) took 43 %
    less JVM CPU and 15-20 % less time, and each of its runs was faster too. Long CPU-bound jobs
    (the benchmarks) want C2: ``quick_start=False``. A ``spark_driver_extraJavaOptions`` setting
    replaces these options."""
    from pyspark.sql import SparkSession

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)  # workers must import sparklog too
    if master.startswith("local"):
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    elif "spark_executorEnv_PYTHONPATH" not in conf:
        # a cluster's executors import the sparklog this driver runs (a checkout on a shared
        # filesystem, say), ahead of any other one their interpreter has installed
        conf["spark_executorEnv_PYTHONPATH"] = str(Path(__file__).resolve().parent.parent)

    def builder() -> Any:
        b = (
            SparkSession.builder.master(master)
            .appName(app)
            .config("spark.ui.enabled", "false")
            .config("spark.ui.showConsoleProgress", "false")
            .config("spark.sql.session.timeZone", "UTC")
            .config("spark.sql.shuffle.partitions", "4")
        )
        if quick_start:
            b = b.config("spark.driver.extraJavaOptions", QUICK_START_JVM_OPTIONS)
        for key, value in (DELTA_CONF if delta else {}).items():
            b = b.config(key, value)
        for key, value in conf.items():
            b = b.config(key.replace("_", "."), str(value))
        return b

    spark = None
    if delta and delta_source() == "pip":
        from delta import configure_spark_with_delta_pip

        try:
            spark = configure_spark_with_delta_pip(builder()).getOrCreate()
        except Exception as exc:  # noqa: BLE001 - Ivy failed: fall back to the project's jars
            log.warning("sparklog: Delta through spark.jars.packages failed (%s); using %s", exc, delta_jars())
    if spark is None:
        b = builder()
        if delta:
            b = b.config("spark.jars", ",".join(delta_jars()))
        spark = b.getOrCreate()
    from sparklog.datasource import register

    register(spark)
    return spark
