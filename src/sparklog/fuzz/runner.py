"""The fuzz loop: hypothesis draws cases (seeded: a seed and a case count reproduce a run), each is
applied to the live cluster, and the invariants are checked.

- After every case: every broker answers a ping (a broker that exited is a ``crash``, with the
  cases since the last check and its log's tail; it is started again and must recover).
- Every ``check_every`` cases: the acknowledgements not yet read back are read back; every
  ``full_every`` cases (and after a restart, and at the end) everything acknowledged is.
- At the end (and every ``restart_every`` cases): each broker restarted with SIGTERM, then one
  killed with ``kill -9``; after each, every acknowledged record must be read back unchanged.

A broker that cannot be recovered (it does not come back, or dies again while the cluster
settles) is a ``restart-failed``; the run then continues on a fresh cluster (at most
``max_resets`` times). Every case and its outcome go to ``log_path`` (JSON lines) if given.

``low_privilege``: a secured cluster, cases sent as a user with ACLs on some topics only
(:mod:`sparklog.fuzz.privileges`): first :func:`~sparklog.fuzz.strategies.low_privilege_sweep`
(counted in ``cases``), then drawn by :func:`~sparklog.fuzz.strategies.low_privilege_case`.
Each case's answers are checked as they come (``leak``, ``unauthorized``); after each action or
abandoned call, and at every check, the topics the user may Read are scanned for secret records.
The admin's records are in the ledger too, so they must read back and survive the restarts.

``kafka``: the cases go to the Kafka listeners (:mod:`sparklog.fuzz.kafka_apply`, drawn by
:func:`~sparklog.fuzz.kafka_cases.kafka_case`). After each case every listener must also answer
ApiVersions and Metadata on a fresh connection (after a login case, every SASL listener must log a
user in and answer Metadata too); the checks read back through a Kafka Fetch (at the full ones
through sparklog's fetches too) and look for connections a broker keeps after their clients closed
them. ``kafka_kinds`` narrows the cases drawn to some kinds (``kafka-login`` alone, say).
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import json
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

from hypothesis import HealthCheck, Phase, given, seed, settings
from hypothesis import strategies as st

from sparklog.fuzz.apply import Applier
from sparklog.fuzz.cases import ABANDON, ACTION, Case
from sparklog.fuzz.cluster import FuzzCluster
from sparklog.fuzz.kafka_apply import KafkaApplier
from sparklog.fuzz.kafka_cases import KAFKA_KINDS, KafkaTopology, kafka_case
from sparklog.fuzz.kafka_readback import read_partition_kafka
from sparklog.fuzz.ledger import Ledger
from sparklog.fuzz.privileges import ReadableScan
from sparklog.fuzz.readback import verify
from sparklog.fuzz.report import CRASH, LEAK, RESTART_FAILED, UNRESPONSIVE, Anomaly, Report, shape
from sparklog.fuzz.strategies import Topology, any_case, low_privilege_case, low_privilege_sweep

SETTLE_S = 6.0  # a restarted broker must survive a maintenance pass (every 5 s: retention, the log cleaner)
RECENT_CASES = 25


@dataclasses.dataclass
class FuzzConfig:
    """A run: ``cases`` (at most) within ``minutes`` (if set), drawn from ``seed``."""

    seed: int = 0
    cases: int = 300
    minutes: float | None = None
    brokers: int = 1
    check_every: int = 10
    full_every: int = 250
    restart_every: int = 0  # 0: restarts at the end only
    restarts_at_end: bool = True
    max_resets: int = 3
    work_dir: Path | None = None
    zookeeper: str | None = None  # default: the cluster's own ZooKeeper
    log_path: Path | None = None
    progress: Callable[[str], None] | None = None
    progress_every_s: float = 15.0
    replay: list[Case] | None = None  # apply these cases (from a case log) instead of drawing new ones
    low_privilege: bool = False  # a secured cluster, the cases sent as a user with few ACLs (sparklog.fuzz.privileges)
    kafka: bool = False  # the cases sent to the brokers' Kafka listeners (sparklog.fuzz.kafka_cases)
    kafka_kinds: tuple[str, ...] = KAFKA_KINDS  # the Kafka case kinds drawn


class _Stop(BaseException):  # not an error: ends hypothesis' loop without shrinking
    """Raised inside the hypothesis test to end the run (time is up, or the cluster is lost)."""


class Runner:
    def __init__(self, config: FuzzConfig) -> None:
        self.config = config
        mode = "kafka" if config.kafka else "low-privilege" if config.low_privilege else "anonymous"
        self.report = Report(seed=config.seed, mode=mode)
        self.ledger = Ledger()
        self.cluster: FuzzCluster | None = None
        self.applier: Applier | KafkaApplier | None = None
        self.scan: ReadableScan | None = None  # the low-privilege mode's scan of the topics the user may Read
        self.recent: collections.deque[str] = collections.deque(maxlen=RECENT_CASES)
        self.deadline = None if config.minutes is None else time.monotonic() + config.minutes * 60
        self._log: IO[str] | None = None
        self._last_progress = 0.0
        self._started = 0.0
        self._reported: set[tuple[str, str]] = set()  # read-back problems already reported on this cluster

    # ------------------------------------------------------------------ the run
    def run(self) -> Report:
        self._started = time.monotonic()
        work = self.config.work_dir or Path(tempfile.mkdtemp(prefix="sparklog-fuzz-"))
        if self.config.log_path is not None:
            self._log = open(self.config.log_path, "a")  # noqa: SIM115 - closed in finally
        self.cluster = FuzzCluster(
            work, self.config.brokers, self.config.zookeeper, self.config.low_privilege, self.config.kafka
        )
        try:
            self.cluster.start()
            self._record_filled()
            if self.config.kafka:
                self.applier = KafkaApplier(self.cluster, self.ledger)
            else:
                self.applier = Applier(self.cluster, self.ledger)
            if self.cluster.secrets is not None:
                self.scan = ReadableScan(self.cluster.secrets)
            self._say(f"cluster up in {work} ({self.config.brokers} broker(s)); seed {self.config.seed}")
            if self.cluster.access is not None:
                self._say(
                    f"cases sent as {self.cluster.access.principal} over SASL_SSL; it may "
                    + ", ".join(f"{' and '.join(ops)} {t}" for t, ops in sorted(self.cluster.access.grants.items()))
                    + "; nothing else"
                )
            with contextlib.suppress(_Stop):
                if self.config.replay is None:
                    self._drive()
                else:
                    self._replay(self.config.replay)
            if self.config.restarts_at_end and not self.report.stopped_early:
                self._check(full=True, when="end of the cases")
                self._restarts("end of the run")
            elif not self.report.stopped_early:
                self._check(full=True, when="end of the cases")
            self._sample_stats()
        finally:
            problems = self.cluster.stop()
            for problem in problems:
                self.report.add(Anomaly(CRASH, f"on the final stop: {problem}"))
            if self._log is not None:
                self._log.close()
            self._count_acknowledged()
            self.report.seconds = time.monotonic() - self._started
        return self.report

    def _drive(self) -> None:
        cluster = self.cluster_or_fail()
        topology = Topology(
            {t.name: t.partitions for t in cluster.topics.values()},
            cluster.broker_ids,
            {t.name for t in cluster.topics.values() if t.compacted},
        )
        if self.config.kafka:
            strategy = kafka_case(
                KafkaTopology(
                    topology.topics,
                    frozenset(topology.compacted),
                    frozenset(t.name for t in cluster.topics.values() if t.max_message_bytes < (1 << 20)),
                    tuple(cluster.broker_ids),
                ),
                self.config.kafka_kinds,
            )
        elif self.config.low_privilege:
            strategy = low_privilege_case(topology)
        else:
            strategy = any_case(topology)
        counter = {"n": 0}
        if self.config.low_privilege:  # the authorization matrix first, then drawn cases
            for case in low_privilege_sweep(topology)[: self.config.cases]:
                if self.deadline is not None and time.monotonic() > self.deadline:
                    raise _Stop()
                self._step(case.with_index(counter["n"]))
                counter["n"] += 1
        drawn = self.config.cases - counter["n"]
        if drawn <= 0:
            return

        @seed(self.config.seed)
        @settings(
            max_examples=drawn,
            database=None,
            deadline=None,
            derandomize=False,
            phases=[Phase.generate],
            suppress_health_check=list(HealthCheck),
            print_blob=False,
            report_multiple_bugs=False,
        )
        @given(st.data())
        def one_case(data: st.DataObject) -> None:
            if self.deadline is not None and time.monotonic() > self.deadline:
                raise _Stop()
            case = data.draw(strategy).with_index(counter["n"])
            counter["n"] += 1
            self._step(case)

        one_case()

    def _replay(self, cases: list[Case]) -> None:
        for case in cases:
            if self.deadline is not None and time.monotonic() > self.deadline:
                return
            self._step(case)

    def _step(self, case: Case) -> None:
        assert self.applier is not None
        self.recent.append(case.describe())
        started = time.monotonic()
        try:
            outcome = self.applier.apply(case)
        except Exception as exc:  # a fuzzer bug must not end the run unreported
            outcome_label, anomalies, detail = "fuzzer-error", [], {"error": f"{type(exc).__name__}: {exc}"}
        else:
            outcome_label, anomalies, detail = outcome.label, outcome.anomalies, outcome.detail
        self.report.cases += 1
        self.report.by_kind[case.kind] += 1
        self.report.outcomes[outcome_label.split(":")[0] if outcome_label.startswith("refused") else outcome_label] += 1
        for anomaly in anomalies:
            self.report.add(anomaly)
        if case.kind in (ACTION, ABANDON):  # a copy may have moved records into a topic the user may Read
            for anomaly in self._scan_readable():
                anomaly.case = case.to_json()
                anomalies.append(anomaly)
                self.report.add(anomaly)
        self._write_log(case, outcome_label, anomalies, detail, time.monotonic() - started)
        self._health(case)
        n = self.report.cases
        if n % self.config.full_every == 0:
            self._check(full=True, when=f"after case #{case.index}")
        elif n % self.config.check_every == 0:
            self._check(full=False, when=f"after case #{case.index}")
        if self.config.restart_every and n % self.config.restart_every == 0:
            self._restarts(f"after case #{case.index}")
        self._progress()

    # ------------------------------------------------------------------ invariants
    def cluster_or_fail(self) -> FuzzCluster:
        assert self.cluster is not None
        return self.cluster

    def _health(self, case: Case | None) -> bool:
        """Every broker alive and answering a ping; otherwise record it and recover (or reset)."""
        cluster = self.cluster_or_fail()
        dead = [b for b in cluster.broker_ids if not cluster.alive(b)]
        silent: list[int] = []
        if not dead:
            for broker_id in cluster.broker_ids:
                if cluster.ping(broker_id, timeout=5.0) != broker_id:
                    time.sleep(0.5)  # one more chance: a ping can lose a race with a busy server
                    if cluster.ping(broker_id, timeout=10.0) != broker_id:
                        silent.append(broker_id)
            dead = [b for b in cluster.broker_ids if not cluster.alive(b)]
        if not dead and not silent and isinstance(self.applier, KafkaApplier):
            silent, findings = self.applier.health()
            for anomaly in findings:
                if case is not None:
                    anomaly.case = case.to_json()
                self.report.add(anomaly)
            dead = [b for b in cluster.broker_ids if not cluster.alive(b)]
        if not dead and not silent:
            return True
        for broker_id in dead:
            self._anomaly(CRASH, f"broker {broker_id} exited{self._death(broker_id)}", broker_id)
        for broker_id in silent:
            if broker_id not in dead:
                what = "its Kafka listener did not answer" if self.config.kafka else "it did not answer a ping"
                self._anomaly(UNRESPONSIVE, f"broker {broker_id} is running but {what}", broker_id)
        self._recover(dead + [b for b in silent if b not in dead], "a crash" if dead else "an unanswered ping")
        return False

    def _death(self, broker_id: int) -> str:
        """How a broker died: exit code, the fatal error in its log, and the acknowledged batches
        the fuzzer could not predict (invalid ones the broker accepted: the usual suspects)."""
        cluster = self.cluster_or_fail()
        text = f" with code {cluster.exit_code(broker_id)}"
        fatal = cluster.fatal_error(broker_id)
        if fatal:
            text += f": {fatal}"
        suspects = self.ledger.invalid(3)
        if suspects:
            text += "; accepted invalid batches stored: " + ", ".join(e.describe() for e in suspects)
        return text

    def _anomaly(self, kind: str, detail: str, broker_id: int | None = None) -> None:
        cluster = self.cluster_or_fail()
        log = cluster.log_tail(broker_id, 40) if broker_id is not None else ""
        self.report.add(Anomaly(kind, detail, recent_cases=list(self.recent), broker_log=log))
        self._say(f"{kind.upper()}: {detail}" + (f"\n{log[-1500:]}" if log else ""))

    def _recover(self, brokers: list[int], why: str) -> None:
        cluster = self.cluster_or_fail()
        self._disconnect()
        for broker_id in brokers:
            cluster.kill(broker_id)  # a frozen one too
        problem = cluster.start_dead()
        if problem is None:
            time.sleep(SETTLE_S)
            dead = [b for b in cluster.broker_ids if not cluster.alive(b)]
            if dead:
                problem = f"broker(s) {dead} died again within {SETTLE_S:.0f} s of the restart"
                for broker_id in dead:
                    self._anomaly(
                        CRASH,
                        f"broker {broker_id} died again after restarting{self._death(broker_id)}",
                        broker_id,
                    )
        if problem is None:
            self.recent.clear()
            self._check(full=True, when=f"recovery from {why}")
            return
        self._anomaly(RESTART_FAILED, f"recovery from {why}: {problem}", brokers[0] if brokers else None)
        self._reset()

    def _reset(self) -> None:
        cluster = self.cluster_or_fail()
        if self.report.resets >= self.config.max_resets:
            self.report.stopped_early = f"the cluster could not be recovered {self.report.resets + 1} times"
            raise _Stop()
        self.report.resets += 1
        self._say(f"starting a fresh cluster (reset {self.report.resets} of at most {self.config.max_resets})")
        self._count_acknowledged()
        self._reported.clear()
        self.ledger.clear()
        assert self.applier is not None
        self.applier.reset()
        self.recent.clear()
        if self.scan is not None:
            self.scan.reset()
        cluster.reset()
        self._record_filled()

    def _record_filled(self) -> None:
        """The admin's records of a fresh cluster (low-privilege mode) join the ledger."""
        for entry in self.cluster_or_fail().filled:
            self.ledger.add(entry)

    def _scan_readable(self) -> list[Anomaly]:
        """Secret records in the topics the user may Read (low-privilege mode), since the last scan."""
        if self.scan is None:
            return []
        found = [Anomaly(LEAK, hit) for hit in self.scan.check(self.cluster_or_fail(), self.ledger)]
        for anomaly in found:
            self._say(f"{anomaly.kind.upper()}: {anomaly.detail}")
        return found

    def _check(self, full: bool, when: str) -> None:
        cluster = self.cluster_or_fail()
        self.report.checks += 1
        self._sample_stats()
        if isinstance(self.applier, KafkaApplier):
            # through the Kafka listener; at full checks through sparklog's own fetches too
            anomalies = verify(cluster, self.ledger, full, read_partition_kafka)
            if full:
                anomalies += verify(cluster, self.ledger, full)
            anomalies += self.applier.lingering_connections()
        else:
            anomalies = verify(cluster, self.ledger, full) + self._scan_readable()
        for anomaly in anomalies:
            key = (anomaly.kind, shape(anomaly.detail))
            if key in self._reported:
                continue  # the same damage seen again by a later check
            self._reported.add(key)
            anomaly.detail = f"{anomaly.detail} ({'full' if full else 'incremental'} check {when})"
            anomaly.recent_cases = list(self.recent)
            self.report.add(anomaly)
            self._say(f"{anomaly.kind.upper()}: {anomaly.detail}")
        if not anomalies:
            self.recent.clear()

    def _disconnect(self) -> None:
        """The Kafka mode's open connections closed (brokers are about to go away)."""
        if isinstance(self.applier, KafkaApplier):
            self.applier.disconnect()

    def _restarts(self, when: str) -> None:
        """SIGTERM and start every broker in turn, then kill -9 and start the first; full check after each."""
        cluster = self.cluster_or_fail()
        for how, brokers in (("term", cluster.broker_ids), ("kill", cluster.broker_ids[:1])):
            for broker_id in brokers:
                lagging = cluster.wait_replicated()
                if lagging:
                    self._say(f"before restarting broker {broker_id}: {lagging}")
                self.report.restarts += 1
                self._disconnect()
                problem = cluster.restart(broker_id, how)
                if problem is None:
                    time.sleep(SETTLE_S)
                    dead = [b for b in cluster.broker_ids if not cluster.alive(b)]
                    if dead:
                        problem = f"broker(s) {dead} died within {SETTLE_S:.0f} s of the restart"
                        problem += "".join(self._death(b) for b in dead)
                if problem is not None:
                    self._anomaly(RESTART_FAILED, f"{how} restart of broker {broker_id} ({when}): {problem}", broker_id)
                    try:
                        self._reset()
                    except _Stop:
                        return
                    return
                self._check(full=True, when=f"{how} restart of broker {broker_id} ({when})")
                self._say(f"{how} restart of broker {broker_id}: recovered")

    # ------------------------------------------------------------------ output
    def _count_acknowledged(self) -> None:
        """Add the ledger's acknowledgements to the report (before a reset clears it, and at the end)."""
        self.report.acked_batches += self.ledger.batches
        self.report.acked_records += self.ledger.records

    def _sample_stats(self) -> None:
        for stats in self.cluster_or_fail().stats().values():
            self.report.peak_threads = max(self.report.peak_threads, stats.threads)
            self.report.peak_fds = max(self.report.peak_fds, stats.fds)

    def _write_log(
        self, case: Case, label: str, anomalies: list[Anomaly], detail: dict[str, Any], seconds: float
    ) -> None:
        if self._log is None:
            return
        line = {
            "case": case.to_json(),
            "outcome": label,
            "seconds": round(seconds, 3),
            "detail": detail,
            "anomalies": [a.headline() for a in anomalies],
        }
        self._log.write(json.dumps(line, default=repr) + "\n")
        self._log.flush()

    def _say(self, message: str) -> None:
        if self.config.progress is not None:
            self.config.progress(message)

    def _progress(self) -> None:
        now = time.monotonic()
        if self.config.progress is None or now - self._last_progress < self.config.progress_every_s:
            return
        self._last_progress = now
        r = self.report
        stats = self.cluster_or_fail().stats()
        threads = max((s.threads for s in stats.values()), default=0)
        fds = max((s.fds for s in stats.values()), default=0)
        rss = max((s.rss_mb for s in stats.values()), default=0)
        self._say(
            f"{r.cases} cases in {now - self._started:.0f} s; acked {self.ledger.batches} batches; "
            f"failures {len(r.failures)}, findings {len(r.findings)}; "
            f"broker threads {threads}, fds {fds}, anonymous memory {rss} MB"
        )


def run_fuzz(config: FuzzConfig) -> Report:
    """Run the fuzzer (see the module docs) and return its report."""
    return Runner(config).run()


def read_case_log(path: Path, upto: int | None = None) -> list[Case]:
    """The cases of a case log (``FuzzConfig.log_path``), up to index ``upto`` included: a run's
    input again, to replay it on a fresh cluster (``sparklog fuzz --replay``)."""
    cases = []
    with open(path) as f:
        for line in f:
            case = Case.from_json(json.loads(line)["case"])
            if upto is not None and case.index > upto:
                break
            cases.append(case)
    return cases


def print_progress(message: str) -> None:
    print(f"[fuzz] {message}", file=sys.stderr, flush=True)
