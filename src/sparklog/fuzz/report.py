"""What a run found: anomalies (each with its case), grouped into failures and findings.

*Failures* break an invariant (the broker died or stopped answering, acknowledged data is gone,
different or unreadable, a restart did not recover, a refused request stored records; in the
low-privilege mode, a secret record reached the user or a request its ACLs do not allow was
answered; in the Kafka mode's logins, a login succeeded that must fail, a request was answered
before a login or after its session ended, or a refused login told an unknown user from a wrong
password); the run exits non-zero on any. *Findings* are
wrong answers that keep the invariants: an invalid batch acknowledged, an error without a typed
code (or UNKNOWN_SERVER_ERROR, the broker's answer to an exception it did not expect), a request
refused with another error than the one it must get, a call without an answer in time, a leaked
traceback; in the Kafka mode also a response contradicting what the fuzzer knows, a connection its
client closed that the broker keeps, and a small request that costs the broker far more memory
than the topic lets it take.
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections import Counter
from typing import Any

# invariant failures
CRASH = "crash"  # a broker process exited
UNRESPONSIVE = "unresponsive"  # a live broker did not answer a ping
LOST = "lost"  # an acknowledged record is not read back
MISMATCH = "mismatch"  # an acknowledged record is read back different
UNREADABLE = "unreadable"  # reading acknowledged data failed (error, or a batch failing Arrow validation)
OFFSET_REUSE = "offset-reuse"  # two acknowledgements for the same offsets with different records
RESTART_FAILED = "restart-failed"  # a restarted broker did not come back serving its partitions
STORED_REFUSED = "stored-refused"  # a refused request (or a closed connection) stored records anyway
DUPLICATED = "duplicated"  # an idempotent producer's batch sent again was stored again
# the low-privilege mode's (sparklog.fuzz.privileges)
LEAK = "leak"  # a record of a topic the user may not Read reached it (or a topic it may Read)
UNAUTHORIZED = "unauthorized"  # a request its ACLs do not allow was answered
# the Kafka mode's SASL logins (sparklog.fuzz.kafka_login)
AUTH_BYPASS = "auth-bypass"  # a login that must fail succeeded, or a request was answered without a live login
USER_DISCLOSED = "user-disclosed"  # a refused login told an unknown user from a wrong password
FAILURES = (
    CRASH,
    UNRESPONSIVE,
    LOST,
    MISMATCH,
    UNREADABLE,
    OFFSET_REUSE,
    RESTART_FAILED,
    STORED_REFUSED,
    DUPLICATED,
    LEAK,
    UNAUTHORIZED,
    AUTH_BYPASS,
    USER_DISCLOSED,
)

# findings
ACCEPTED_INVALID = "accepted-invalid"  # an ack for a batch that must be refused
SERVED_INVALID = "served-invalid"  # a fetch sent a batch failing Arrow's full validation
UNTYPED_ERROR = "untyped-error"  # an error without a sparklog:<CODE>: prefix
LEAKED_INTERNALS = "leaked-internals"  # an error message with a traceback or source paths
NO_ANSWER = "no-answer"  # a call (not abandoned on purpose) did not finish within its deadline
BAD_ACK = "bad-ack"  # put metadata that is not {"base_offset", "last_offset", "count"} matching the batch
REFUSED_VALID = "refused-valid"  # a well-formed request refused with a non-retriable error
UNEXPECTED_ERROR = "unexpected-error"  # UNKNOWN_SERVER_ERROR: the broker's code raised what it did not expect
WRONG_ERROR = "wrong-error"  # refused, but not with the error it must get (Flight batches: INVALID_REQUEST)
# the Kafka mode's
WRONG_ANSWER = "wrong-answer"  # a response contradicting what the fuzzer knows (offsets, order, fields)
LINGERING = "lingering-connection"  # a connection its client closed still held by the broker
MEMORY_SPIKE = "memory-spike"  # a small request made the broker's memory grow far past what it may take
FINDINGS = (
    ACCEPTED_INVALID,
    SERVED_INVALID,
    UNTYPED_ERROR,
    LEAKED_INTERNALS,
    NO_ANSWER,
    BAD_ACK,
    REFUSED_VALID,
    UNEXPECTED_ERROR,
    WRONG_ERROR,
    WRONG_ANSWER,
    LINGERING,
    MEMORY_SPIKE,
)


@dataclasses.dataclass
class Anomaly:
    """Something wrong, with the case that caused it (or the cases since the last check)."""

    kind: str
    detail: str
    case: dict[str, Any] | None = None
    recent_cases: list[str] = dataclasses.field(default_factory=list)
    broker_log: str = ""

    @property
    def is_failure(self) -> bool:
        return self.kind in FAILURES

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def headline(self) -> str:
        where = f" [case #{self.case['index']} {self.case['kind']}]" if self.case else ""
        return f"{self.kind}{where}: {self.detail}"


@dataclasses.dataclass
class Report:
    """A whole run: counts, seed(s), every anomaly, and the brokers' peak threads and fds."""

    seed: int
    mode: str = "anonymous"  # or "low-privilege" (sparklog.fuzz.privileges), "kafka" (sparklog.fuzz.kafka_ops)
    cases: int = 0
    by_kind: Counter[str] = dataclasses.field(default_factory=Counter)
    outcomes: Counter[str] = dataclasses.field(default_factory=Counter)
    anomalies: list[Anomaly] = dataclasses.field(default_factory=list)
    acked_batches: int = 0
    acked_records: int = 0
    checks: int = 0
    restarts: int = 0
    resets: int = 0
    peak_threads: int = 0
    peak_fds: int = 0
    seconds: float = 0.0
    stopped_early: str = ""

    @property
    def failures(self) -> list[Anomaly]:
        return [a for a in self.anomalies if a.is_failure]

    @property
    def findings(self) -> list[Anomaly]:
        return [a for a in self.anomalies if not a.is_failure]

    @property
    def crashes(self) -> list[Anomaly]:
        return [a for a in self.anomalies if a.kind == CRASH]

    @property
    def cases_per_s(self) -> float:
        return self.cases / self.seconds if self.seconds > 0 else 0.0

    @property
    def ok(self) -> bool:
        return not self.failures

    def add(self, anomaly: Anomaly) -> None:
        self.anomalies.append(anomaly)

    def distinct(self, anomalies: list[Anomaly] | None = None) -> list[tuple[Anomaly, int]]:
        """One anomaly per (kind, first line of detail without numbers), with how often it came."""
        groups: dict[tuple[str, str], list[Anomaly]] = {}
        for a in self.anomalies if anomalies is None else anomalies:
            groups.setdefault((a.kind, shape(a.detail)), []).append(a)
        return [(found[0], len(found)) for found in groups.values()]

    def summary(self, limit: int = 40) -> str:
        lines = [
            f"fuzz ({self.mode}): seed {self.seed}: {self.cases} cases in {self.seconds:.0f} s, "
            f"{self.cases_per_s:.1f} cases/s ({', '.join(f'{k} {n}' for k, n in sorted(self.by_kind.items()))})",
            f"  acknowledged: {self.acked_batches} batches, {self.acked_records} records; checks {self.checks}, "
            f"restarts {self.restarts}, cluster resets {self.resets}; broker peak threads {self.peak_threads}, "
            f"fds {self.peak_fds}",
            f"  outcomes: {', '.join(f'{k} {n}' for k, n in self.outcomes.most_common())}",
            f"  crashes: {len(self.crashes)}; invariant failures: {len(self.failures)}; findings: {len(self.findings)}",
        ]
        if self.stopped_early:
            lines.append(f"  stopped early: {self.stopped_early}")
        for title, group in (("FAILURES", self.failures), ("findings", self.findings)):
            distinct = self.distinct(group)
            if not distinct:
                continue
            lines.append(f"  {title} ({len(distinct)} distinct):")
            for anomaly, count in distinct[:limit]:
                lines.append(f"    - x{count} {anomaly.headline()[:400]}")
                if anomaly.case:
                    lines.append(f"        input: {_case_line(anomaly.case)}")
                elif anomaly.recent_cases:
                    lines.append(f"        last case before it: {anomaly.recent_cases[-1][:300]}")
        return "\n".join(lines)

    def to_json(self) -> dict[str, Any]:
        return {
            "seed": self.seed,
            "mode": self.mode,
            "cases": self.cases,
            "by_kind": dict(self.by_kind),
            "outcomes": dict(self.outcomes),
            "crashes": len(self.crashes),
            "failures": len(self.failures),
            "findings": len(self.findings),
            "acked_batches": self.acked_batches,
            "acked_records": self.acked_records,
            "checks": self.checks,
            "restarts": self.restarts,
            "resets": self.resets,
            "peak_threads": self.peak_threads,
            "peak_fds": self.peak_fds,
            "seconds": round(self.seconds, 1),
            "cases_per_s": round(self.cases_per_s, 2),
            "stopped_early": self.stopped_early,
            "anomalies": [a.to_json() for a in self.anomalies],
        }


def shape(detail: str) -> str:
    """The first line of a detail with its numbers left out: what makes two anomalies the same."""
    first = detail.splitlines()[0] if detail else ""
    return re.sub(r"\d+", "N", first)[:120]


def _case_line(case: dict[str, Any]) -> str:
    text = json.dumps(case.get("params"), default=repr, separators=(",", ":"))
    return f"#{case.get('index')} {case.get('kind')} {text[:300]}"
