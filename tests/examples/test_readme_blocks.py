"""The fenced code blocks of README.md and docs/*.md run as written, in order, against a cluster
this module starts, the way the notebooks run (tests/examples/test_notebooks.py): a reader who
copies them gets what they say.

The conventions (README.md, "Layout", tells writers):

- Every fence names its language. ``bash`` and ``python`` blocks run; ``text`` (output, diagrams,
  layouts) is not code; a ``properties`` block is a file a reader copies, so it must be one sparklog
  takes as it is (a broker's ``--config`` when it sets ``listeners``, else a client's).
- A ``bash`` or ``python`` block that cannot run here (``make demo``, a server in the foreground, a
  benchmark, a cluster other than the one below) has ``<!-- not run: why -->`` on the line before
  its fence, and the reason is not empty.
- A document's blocks run in order: ``bash`` blocks each in a new ``bash`` (``set -eo pipefail``)
  that starts with the variables earlier blocks exported, as in one terminal; ``python`` blocks in
  this process, in one namespace per document (a notebook's cells), on the ``spark`` session the
  other Spark tests share (``local_spark()`` hands that one back). Then they run again on the same
  cluster: a reader runs examples twice, so they must be idempotent (or not run).
- The cluster is what the README starts, ``sparklog up --brokers 3 --data-dir data``: an embedded
  ZooKeeper and three brokers on free ports, ``data`` in a fresh working directory per document,
  which the shell, Python and Spark (its Hadoop local file system's working directory) all work
  in. The one change made to a block's text: the addresses the docs give the cluster,
  ``127.0.0.1:2181`` (ZooKeeper), ``127.0.0.1:9092`` to ``9094`` (brokers 1 to 3, the ports
  ``sparklog up`` gives them when free) and ``127.0.0.1:19092`` to ``19094`` (their Kafka listeners,
  ``--kafka-port 19092``), become the test cluster's. Whatever else a block needs,
  an earlier block sets up, and the text says so.
"""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import sys
import time
import traceback
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

import sparklog
from sparklog.local_cluster import LocalCluster

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1200)]

ROOT = Path(__file__).resolve().parents[2]  # the repository (this file is tests/examples/...)
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
RUN = ("bash", "python")
NOT_CODE = ("text", "properties")
RUNS = 2  # each document's blocks: on the fresh cluster, then again on the same one
SHELL_TIMEOUT_S = 120.0
BROKERS = 3
# the addresses the docs give the cluster `sparklog up` starts (ZooKeeper, then brokers 1..3)
DOC_ZOOKEEPER = "127.0.0.1:2181"
DOC_BROKERS = [f"127.0.0.1:{9092 + i}" for i in range(BROKERS)]
DOC_KAFKA = [f"127.0.0.1:{19092 + i}" for i in range(BROKERS)]  # their Kafka listeners (--kafka-port 19092)

FENCE = re.compile(r"^[ \t]*```(?P<language>[^`\s]*)[ \t]*$")
NOT_RUN = re.compile(r"^[ \t]*<!--\s*not run:(?P<reason>.*?)-->[ \t]*$")


@dataclass(frozen=True)
class Block:
    """One fenced block: its document, the line of its opening fence (1-based), its language, its
    text, and the reason given for not running it (None: it runs)."""

    document: Path
    line: int
    language: str
    code: str
    not_run: str | None

    @property
    def name(self) -> str:
        return f"{self.document.relative_to(ROOT)}:{self.line} ({self.language or 'no language'})"

    @property
    def runs(self) -> bool:
        return self.language in RUN and self.not_run is None


def blocks(document: Path) -> list[Block]:
    """The fenced blocks of a markdown document, in order. A ``<!-- not run: ... -->`` marker
    belongs to the fence on the next non-blank line; one followed by anything else is an error."""
    lines = document.read_text().splitlines()
    found: list[Block] = []
    marker: tuple[int, str] | None = None
    i = 0
    while i < len(lines):
        fence = FENCE.match(lines[i])
        if fence is None:
            note = NOT_RUN.match(lines[i])
            if note is not None:
                marker = (i + 1, note.group("reason").strip())
            elif lines[i].strip() and marker is not None:
                raise AssertionError(f"{document.name}:{marker[0]}: a 'not run' marker that no fence follows")
            i += 1
            continue
        end = next((j for j in range(i + 1, len(lines)) if lines[j].strip() == "```"), None)
        assert end is not None, f"{document.name}:{i + 1}: a fence that is never closed"
        code = "\n".join(lines[i + 1 : end]) + "\n"
        found.append(Block(document, i + 1, fence.group("language"), code, marker[1] if marker else None))
        marker = None
        i = end + 1
    assert marker is None, f"{document.name}:{marker[0]}: a 'not run' marker that no fence follows"
    return found


def substitute(code: str, addresses: dict[str, str]) -> str:
    """The block's text with the docs' cluster addresses replaced by the test cluster's (all at
    once, so that no replacement is replaced again)."""
    pattern = re.compile("|".join(re.escape(a) for a in sorted(addresses, key=len, reverse=True)) + r"(?!\d)")
    return pattern.sub(lambda m: addresses[m.group(0)], code)


# ------------------------------------------------------------------------------------------ the conventions
def test_every_block_names_its_language_and_every_block_not_run_says_why() -> None:
    counts = {"run": 0, "not run": 0, "not code": 0}
    for document in DOCUMENTS:
        for block in blocks(document):
            assert block.language in RUN + NOT_CODE, (
                f"{block.name}: name the block's language, one of {', '.join(RUN + NOT_CODE)} "
                "(bash and python blocks run in tests/examples/test_readme_blocks.py)"
            )
            if block.not_run is not None:
                assert block.language in RUN, f"{block.name}: a 'not run' marker on a block that is not code"
                assert block.not_run, f"{block.name}: '<!-- not run: -->' must say why"
            counts["run" if block.runs else "not run" if block.language in RUN else "not code"] += 1
    print(counts)
    assert counts["run"] > 0


JAAS_SCRAM = (  # the login module line of a Java client's SCRAM settings
    r"org\.apache\.kafka\.common\.security\.scram\.ScramLoginModule\s+required\s+"
    r'username="[^"]+"\s+password="[^"]*";'
)


def test_the_properties_blocks_are_files_sparklog_takes(tmp_path: Path) -> None:
    """Copied into a file, each ``properties`` block is read as the docs mean it: no value carries
    a comment (in a properties file ``#`` starts one only at the start of a line), and the broker's or
    the client's settings parser takes it (neither reads the files the settings name); a Java
    client's (``sasl.jaas.config``) has SCRAM's login module line as Kafka's clients parse it."""
    from sparklog.security.broker_config import BrokerSecurity
    from sparklog.security.client_config import ClientSecurity, load_properties

    checked = 0
    for document in DOCUMENTS:
        for block in blocks(document):
            if block.language != "properties":
                continue
            path = tmp_path / f"{document.stem}-{block.line}.properties"
            path.write_text(block.code)
            properties = load_properties(path)
            commented = {k: v for k, v in properties.items() if "#" in v}
            assert not commented, f"{block.name}: a comment after a value is part of the value: {commented}"
            if "listeners" in properties:
                BrokerSecurity.from_properties(properties, "127.0.0.1", 9092)
            elif "sasl.jaas.config" in properties:  # the Java client's form (Kafka's tools, Spark's connector)
                assert re.fullmatch(JAAS_SCRAM, properties["sasl.jaas.config"]), f"{block.name}: {properties}"
                assert properties["ssl.truststore.type"] == "PEM" and properties["security.protocol"] == "SASL_SSL"
            else:
                ClientSecurity.from_config(properties)
            checked += 1
    assert checked > 0


# ------------------------------------------------------------------------------------------ running them
RUNNABLE = [d for d in DOCUMENTS if any(b.runs for b in blocks(d))]


@pytest.fixture
def workdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The document's working directory, this process's too while its blocks run; no ``SPARKLOG_*``
    setting of whoever runs the tests reaches a block."""
    for key in list(os.environ):
        if key.startswith("SPARKLOG_"):
            monkeypatch.delenv(key)
    # local_spark() hands back the shared session either way: no need for its look at Maven Central
    monkeypatch.setenv("SPARKLOG_DELTA_SOURCE", "jars")
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.fixture
def docs_cluster(workdir: Path) -> Iterator[LocalCluster]:
    """``sparklog up --brokers 3 --data-dir data`` in the working directory, on free ports."""
    cluster = LocalCluster(workdir / "data", brokers=BROKERS)
    cluster.start()
    try:
        yield cluster
    finally:
        for problem in cluster.stop():  # the cluster's, not the docs': shown, not failed on
            print(f"stopping the cluster: {problem}")


def shell_env() -> dict[str, str]:
    """The shells' environment: this interpreter's ``bin`` first on the PATH (``sparklog``,
    ``python``), this tree's sources on the PYTHONPATH, no ``SPARKLOG_*`` setting."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SPARKLOG_")}
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    source = str(Path(sparklog.__file__).resolve().parents[1])
    env["PYTHONPATH"] = os.pathsep.join(p for p in [source, env.get("PYTHONPATH", "")] if p)
    env["PYTHONUNBUFFERED"] = "1"
    return env


def run_shell(code: str, workdir: Path, exported: Path) -> str:
    """``code`` in a new bash in ``workdir``, with what earlier blocks exported (kept in
    ``exported``); its output, or AssertionError naming the command that failed."""
    script = (
        "set -eo pipefail\n"
        f"if [ -f '{exported}' ]; then source '{exported}'; fi\n"
        f"trap 'export -p > \"{exported}\"' EXIT\n"
        "trap 'echo \"failed (exit $?): $BASH_COMMAND\" >&2' ERR\n" + code
    )
    try:
        done = subprocess.run(
            ["bash", "-c", script],
            cwd=workdir,
            env=shell_env(),
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=SHELL_TIMEOUT_S,
        )
    except subprocess.TimeoutExpired as exc:
        raise AssertionError(f"still running after {SHELL_TIMEOUT_S:.0f} s:\n{exc.stdout}\n{exc.stderr}") from None
    output = f"{done.stdout}{done.stderr}"
    if done.returncode != 0:
        raise AssertionError(f"exit {done.returncode}:\n{output[-4000:]}")
    return output


def run_python(block: Block, code: str, namespace: dict[str, Any]) -> None:
    """``code`` in ``namespace``, compiled as the document's own lines (a traceback shows them)."""
    exec(compile("\n" * block.line + code, str(block.document), "exec"), namespace)  # noqa: S102


class Queries:
    """The streaming queries the blocks start on the shared session: the ones that failed (a
    ``StreamingQueryListener``'s termination events) and the ones left running."""

    def __init__(self, spark: Any) -> None:
        from pyspark.sql.streaming import StreamingQueryListener

        failed: dict[str, str] = {}
        ended: set[str] = set()
        self.failed, self.ended = failed, ended

        class Watch(StreamingQueryListener):
            def onQueryStarted(self, event: Any) -> None:
                pass

            def onQueryProgress(self, event: Any) -> None:
                pass

            def onQueryIdle(self, event: Any) -> None:
                pass

            def onQueryTerminated(self, event: Any) -> None:
                ended.add(str(event.id))
                if event.exception:
                    failed[str(event.id)] = event.exception

        self.spark = spark
        self.watch = Watch()

    def problems(self) -> list[str]:
        """What went wrong with the queries since the last call; stops the ones left running (a
        script would have ended with them doing nothing, or half of it)."""
        found = []
        for query in self.spark.streams.active:
            found.append(f"the streaming query {query.id} ({query.name}) was left running: await it or stop it")
            query.stop()
            deadline = time.monotonic() + 30
            while str(query.id) not in self.ended and time.monotonic() < deadline:
                time.sleep(0.1)  # its termination event comes on the listener bus
        found += [f"the streaming query {q} failed: {why[:2000]}" for q, why in self.failed.items()]
        self.failed.clear()
        return found


@contextlib.contextmanager
def spark_in(spark: Any, workdir: Path) -> Iterator[Queries]:
    """While the blocks run, Spark resolves relative paths (checkpoints, tables) against
    ``workdir`` as it would in a session started there; afterwards the shared session is as it was:
    its settings, no query running, no listener of ours."""
    jvm = spark.sparkContext._jvm
    local = jvm.org.apache.hadoop.fs.FileSystem.getLocal(spark.sparkContext._jsc.hadoopConfiguration())
    before_dir = local.getWorkingDirectory()
    before_conf = spark.conf.getAll
    queries = Queries(spark)
    spark.streams.addListener(queries.watch)
    local.setWorkingDirectory(jvm.org.apache.hadoop.fs.Path(workdir.as_uri()))
    try:
        yield queries
    finally:
        for query in spark.streams.active:
            query.stop()
        spark.streams.removeListener(queries.watch)
        local.setWorkingDirectory(before_dir)
        for key, value in spark.conf.getAll.items():
            if before_conf.get(key) != value and spark.conf.isModifiable(key):
                if key in before_conf:
                    spark.conf.set(key, before_conf[key])
                else:
                    spark.conf.unset(key)


def forget_listeners(spark: Any, namespace: dict[str, Any]) -> None:
    """Remove the streaming query listeners the blocks added to the shared session."""
    from pyspark.sql.streaming import StreamingQueryListener

    for value in namespace.values():
        if isinstance(value, StreamingQueryListener):
            spark.streams.removeListener(value)


@pytest.mark.parametrize("document", RUNNABLE, ids=[str(d.relative_to(ROOT)) for d in RUNNABLE])
def test_the_blocks_run_as_written(
    document: Path, workdir: Path, docs_cluster: LocalCluster, request: pytest.FixtureRequest
) -> None:
    found = [b for b in blocks(document) if b.runs]
    addresses = {DOC_ZOOKEEPER: docs_cluster.zookeeper}
    addresses.update(zip(DOC_BROKERS, docs_cluster.bootstrap_servers.split(","), strict=True))
    addresses.update(zip(DOC_KAFKA, docs_cluster.kafka_bootstrap_servers.split(","), strict=True))
    needs_spark = any(b.language == "python" and "spark" in b.code for b in found)
    spark = request.getfixturevalue("spark") if needs_spark else None

    failures: list[str] = []
    with spark_in(spark, workdir) if spark is not None else contextlib.nullcontext() as queries:
        for run in range(1, RUNS + 1):
            namespace: dict[str, Any] = {"__name__": "__main__"}
            exported = workdir / f"exported-{run}.sh"
            for block in found:
                began = time.monotonic()
                code = substitute(block.code, addresses)
                try:
                    if block.language == "bash":
                        output = run_shell(code, workdir, exported)
                        print(f"--- {block.name}, run {run}:\n{output}")
                    else:
                        print(f"--- {block.name}, run {run}:")
                        run_python(block, code, namespace)
                except Exception as exc:  # noqa: BLE001 - every failing block is reported, not only the first
                    shown = str(exc) if block.language == "bash" else "".join(traceback.format_exception(exc))
                    failures.append(f"{block.name}, run {run}: {shown[-3000:]}")
                    print(f"FAILED: {failures[-1]}")
                print(f"--- {block.name}, run {run}: {time.monotonic() - began:.1f} s")
            if queries is not None:
                forget_listeners(spark, namespace)
                failures += [f"{document.relative_to(ROOT)}, run {run}: {p}" for p in queries.problems()]
            if failures:
                break  # a second run would only repeat what the first one's failures caused
    assert not failures, "\n\n".join(failures)
