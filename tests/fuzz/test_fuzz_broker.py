"""Issue 15's proof: a live broker fuzzed with hypothesis-drawn cases (:mod:`sparklog.fuzz`), and one
deterministic regression test per input that used to break it.

- ``test_quick_profile``: a few hundred cases with a fixed seed against one broker, checks every
  10 cases, restarts (SIGTERM, ``kill -9``) at the end: no invariant failure and no finding.
- ``test_long_profile``: only with ``--fuzz-cases N`` (``pytest tests/fuzz --fuzz-cases 10000``) or
  ``SPARKLOG_FUZZ_CASES=N``; the same, with restarts every 2,500 cases too. ``sparklog fuzz`` runs
  it from the command line.
- ``test_low_privilege_profile``: 200 cases with a fixed seed against a secured broker, sent by an
  authenticated user with ACLs on some topics only (:mod:`sparklog.fuzz.privileges`; ``sparklog
  fuzz --low-privilege``): no record of a topic it may not Read reaches it or a topic it may Read,
  no request its ACLs do not allow is answered, and the usual invariants hold.
- ``test_finding_*``: a produced batch that must be refused with a typed error, with nothing
  stored, the broker alive and its data readable afterwards.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pytest

from sparklog.fuzz import flight_ops
from sparklog.fuzz import frames as fuzz_frames
from sparklog.fuzz.batches import bad_offsets_binary, zstd_bomb
from sparklog.fuzz.runner import FuzzConfig, run_fuzz
from sparklog.protocol.record_frames import schema_text
from waiting import wait_for

if TYPE_CHECKING:
    from sparklog.coordination.zookeeper_server import EmbeddedZooKeeper
    from sparklog.local_cluster import LocalCluster

QUICK_SEED = 15
QUICK_CASES = 1000
LOW_PRIVILEGE_SEED = 15
LOW_PRIVILEGE_CASES = 200
LONG_RESTART_EVERY = 2500
MAINTENANCE_PASS_S = 7.0  # the broker's retention/compaction pass runs every 5 s


def _run(config: FuzzConfig, tmp_path: Path) -> None:
    messages: list[str] = []
    config.progress = messages.append
    report = run_fuzz(config)
    (tmp_path / "report.json").write_text(json.dumps(report.to_json(), default=repr, indent=1))
    assert report.cases > 0, "no case ran"
    assert not report.outcomes.get("fuzzer-error"), f"the fuzzer failed on some cases (cases: {config.log_path})"
    assert report.ok and not report.findings, (
        f"{report.summary()}\n(cases: {config.log_path}; report: {tmp_path / 'report.json'})"
    )


@pytest.mark.slow
def test_quick_profile(zookeeper: EmbeddedZooKeeper, tmp_path: Path) -> None:
    config = FuzzConfig(
        seed=QUICK_SEED,
        cases=QUICK_CASES,
        check_every=10,
        full_every=200,
        work_dir=tmp_path,
        zookeeper=zookeeper.connect_string,
        log_path=tmp_path / "cases.jsonl",
    )
    _run(config, tmp_path)


@pytest.mark.slow
def test_low_privilege_profile(zookeeper: EmbeddedZooKeeper, tmp_path: Path) -> None:
    """Authorization under fuzzing: a replica fetch under any replica id, ``copy_records`` between
    every pair of topics, ``offsets_for_leader_epoch``, ``list_offsets``, fetches, ``fetch_many``
    and ``metadata`` from a user that may Read and Write one topic, only Write another and nothing
    on a third must never hand it a record of the last two (nor move one into the first), nor answer
    what its ACLs do not allow (a ``leak`` or ``unauthorized`` failure names the case)."""
    config = FuzzConfig(
        seed=LOW_PRIVILEGE_SEED,
        cases=LOW_PRIVILEGE_CASES,
        check_every=10,
        full_every=100,
        work_dir=tmp_path,
        zookeeper=zookeeper.connect_string,
        log_path=tmp_path / "cases.jsonl",
        low_privilege=True,
    )
    _run(config, tmp_path)


@pytest.mark.slow
def test_long_profile(zookeeper: EmbeddedZooKeeper, tmp_path: Path, fuzz_options: dict[str, int | None]) -> None:
    cases = fuzz_options["cases"]
    if not cases:
        pytest.skip("the long profile runs with --fuzz-cases N (or SPARKLOG_FUZZ_CASES=N), or `sparklog fuzz`")
    config = FuzzConfig(
        seed=fuzz_options["seed"] if fuzz_options["seed"] is not None else QUICK_SEED,
        cases=cases,
        brokers=fuzz_options["brokers"] or 1,
        restart_every=LONG_RESTART_EVERY,
        work_dir=tmp_path,
        zookeeper=zookeeper.connect_string,
        log_path=tmp_path / "cases.jsonl",
    )
    _run(config, tmp_path)


# ----------------------------------------------------------------------------------- regressions
COMPACTED = "reg-compact"
PLAIN = "reg-plain"


@pytest.fixture
def cluster(zookeeper: EmbeddedZooKeeper, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """One broker with a compacted topic (small segments: the log cleaner reads every stored batch)
    and a plain one, each holding a few valid records. A fresh broker per test: a memory pool that
    grew in an earlier test would hide the next one's allocations from its peak RSS."""
    from sparklog.client.admin import Admin
    from sparklog.local_cluster import LocalCluster

    connect = f"{zookeeper.connect_string}/fuzz-regressions-{uuid.uuid4().hex[:8]}"
    running = LocalCluster(tmp_path_factory.mktemp("fuzz-regressions"), brokers=1, zookeeper=connect).start()
    try:
        with Admin(running.zookeeper) as admin:
            admin.create_topic(COMPACTED, 1, 1, {"cleanup.policy": "compact", "segment.bytes": str(1 << 20)})
            admin.create_topic(PLAIN, 1, 1)
        for topic in (COMPACTED, PLAIN):
            _wait_for_leader(running, topic)
            acks = _produce(running, topic, pa.RecordBatch.from_pydict({"key": [b"a", b"b"], "value": [b"1", b"2"]}))
            assert isinstance(acks, list) and acks, acks
        yield running
    finally:
        running.stop()


def _location(cluster: LocalCluster) -> str:
    return f"grpc+tcp://127.0.0.1:{cluster.brokers[1].port}"


def _wait_for_leader(cluster: LocalCluster, topic: str, timeout: float = 30.0) -> None:
    wait_for(
        lambda: isinstance(flight_ops.list_offsets(_location(cluster), topic, 0), dict),
        timeout,
        f"a leader of {topic}-0",
        0.1,
    )


def _produce(
    cluster: LocalCluster, topic: str, batch: pa.RecordBatch, compression: str | None = None, old_wire: bool = False
) -> list[Any] | flight_ops.CallError:
    """The acknowledgements of one batch (a list), or the error the broker answered: sent as a frame
    (its message compressed with ``compression``), or with ``old_wire`` as a Flight record batch
    (compressed by Flight's writer)."""
    command = {"type": "produce", "topic": topic, "partition": 0, "acks": "1", "schema": schema_text(batch.schema)}
    descriptor = json.dumps(command).encode()
    if old_wire:
        result = flight_ops.put_batches(_location(cluster), descriptor, [batch], [None], True, compression, 60.0)
    else:
        frame = fuzz_frames.build(batch, None, compression).data
        result = flight_ops.put(_location(cluster), descriptor, [frame], True, timeout=60.0)
    if result.error is not None:
        return result.error
    return [json.loads(a) for a in result.acks if a is not None]


def _log_end(cluster: LocalCluster, topic: str) -> int:
    offsets = flight_ops.list_offsets(_location(cluster), topic, 0)
    assert isinstance(offsets, dict), offsets
    return int(offsets["log_end_offset"])


def _peak_rss_mb(cluster: LocalCluster) -> int:
    process = cluster.brokers[1].process
    assert process is not None
    status = Path(f"/proc/{process.pid}/status").read_text()
    line = next(x for x in status.splitlines() if x.startswith("VmHWM:"))
    return int(line.split()[1]) // 1024


def _reset_peak_rss(cluster: LocalCluster) -> None:
    process = cluster.brokers[1].process
    assert process is not None
    Path(f"/proc/{process.pid}/clear_refs").write_text("5")  # VmHWM starts again from the current RSS


def _assert_refused(answer: list[Any] | flight_ops.CallError, code: str) -> None:
    assert isinstance(answer, flight_ops.CallError), f"the broker acknowledged the batch: {answer}"
    assert answer.code == code, f"expected a typed {code} error, got {answer.message}"


def _assert_broker_healthy(cluster: LocalCluster) -> None:
    broker = cluster.brokers[1]
    assert broker.alive(), f"the broker exited with {broker.exited()}:\n{broker.log_tail(30)}"
    assert flight_ops.ping(_location(cluster)) == 1, "the broker does not answer a ping"


def _consume_in_subprocess(cluster: LocalCluster, topic: str, records: int) -> subprocess.CompletedProcess[str]:
    """Read ``records`` records with a sparklog Consumer in another process (a consumer that reads a
    malformed batch can die of a segmentation fault: not this one)."""
    program = (
        "import sys\n"
        "from sparklog import Consumer\n"
        f"consumer = Consumer({topic!r}, zookeeper={cluster.zookeeper!r}, auto_offset_reset='earliest')\n"
        "got = []\n"
        "for _ in range(40):\n"
        "    got += consumer.poll(timeout=0.5)\n"
        f"    if len(got) >= {records}:\n"
        "        break\n"
        "consumer.close()\n"
        "print(len(got), [(r.key, r.value) for r in got][:5])\n"
        f"sys.exit(0 if len(got) >= {records} else 3)\n"
    )
    return subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=120)


def test_finding_1_key_offsets_out_of_bounds_refused(cluster: LocalCluster) -> None:
    """Finding 1: a ``key`` column of valid first/last offsets and an impossible middle one
    (``[0, 1<<30, 3]``) used to be stored; a consumer reading it, and the log cleaner of a
    compacted topic, then died with a segmentation fault. It must be refused (INVALID_RECORD),
    nothing stored, and both the consumer and the cleaner keep working."""
    key = bad_offsets_binary(2, 1 << 30)
    batch = pa.RecordBatch.from_arrays([key, pa.array([b"x", b"y"])], names=["key", "value"])
    for topic in (COMPACTED, PLAIN):
        before = _log_end(cluster, topic)
        _assert_refused(_produce(cluster, topic, batch), "INVALID_RECORD")
        assert _log_end(cluster, topic) == before, f"{topic}: something of the refused batch was stored"
    for topic in (COMPACTED, PLAIN):
        read = _consume_in_subprocess(cluster, topic, 2)
        assert read.returncode == 0, (
            f"a consumer of {topic} exited with {read.returncode}: {read.stdout}{read.stderr[-2000:]}"
        )
    time.sleep(MAINTENANCE_PASS_S)  # the log cleaner reads every batch of the compacted topic
    _assert_broker_healthy(cluster)


def test_finding_2_fifty_million_null_rows_refused_before_allocating(cluster: LocalCluster) -> None:
    """Finding 2: a ~300-byte request declaring 50M rows of ``null``-typed columns took the broker
    from ~100 MB to ~900 MB before anything checked its size. It must be refused
    (RECORD_TOO_LARGE) from its declared size, with nothing stored and no such allocation."""
    rows = 50_000_000
    batch = pa.RecordBatch.from_arrays([pa.nulls(rows), pa.nulls(rows)], names=["key", "value"])
    before = _log_end(cluster, PLAIN)
    _reset_peak_rss(cluster)
    start_mb = _peak_rss_mb(cluster)
    _assert_refused(_produce(cluster, PLAIN, batch), "RECORD_TOO_LARGE")
    grew = _peak_rss_mb(cluster) - start_mb
    assert grew < 100, f"refusing it took {grew} MB of broker memory at its peak"
    assert _log_end(cluster, PLAIN) == before
    _assert_broker_healthy(cluster)


@pytest.mark.parametrize("old_wire", [False, True], ids=["frame", "flight-batches"])
def test_finding_2_zstd_batch_over_64_mib_refused(cluster: LocalCluster, old_wire: bool) -> None:
    """Finding 2: a ~14 KB zstd-compressed IPC body of 70 MiB of values (past every size limit)
    must be refused with nothing stored. Arrow Flight's C++ reader decompresses a record batch of
    a ``do_put`` stream before any Python code sees it, so the broker once grew by the decompressed
    size. Sent as a frame (the produce wire), it is refused (RECORD_TOO_LARGE) from the size its
    message declares, before anything is decompressed; sent as Flight record batches (the wire
    before frames), it is refused (INVALID_REQUEST) from the stream's declared schema, before Flight
    reads the batch. Either way the broker's peak memory does not grow by the batch."""
    batch = pa.RecordBatch.from_arrays([zstd_bomb(70)], names=["value"])
    before = _log_end(cluster, PLAIN)
    _reset_peak_rss(cluster)
    start_mb = _peak_rss_mb(cluster)
    answer = _produce(cluster, PLAIN, batch, compression="zstd", old_wire=old_wire)
    _assert_refused(answer, "INVALID_REQUEST" if old_wire else "RECORD_TOO_LARGE")
    grew = _peak_rss_mb(cluster) - start_mb
    assert grew < 16, f"refusing it took {grew} MB of broker memory at its peak (decompressed?)"
    assert _log_end(cluster, PLAIN) == before
    _assert_broker_healthy(cluster)
