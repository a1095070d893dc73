"""One ``kafka-login`` case (:mod:`sparklog.fuzz.kafka_cases`) against a broker's SASL_PLAINTEXT
Kafka listener (or its PLAINTEXT one): the case's steps sent on one connection, each answer judged
against what the fuzzer expects of that connection (:class:`Expected`, the oracle: Kafka's
``SaslServerAuthenticator`` as a state machine, and the promises of :mod:`sparklog.kafka.session`).

- A login succeeds only when its user exists, its password is that user's (SASLprep applied, as
  SCRAM and the broker's PLAIN do), its mechanism is enabled and its messages are what a correct
  client sends (a mutation that still reads the same is allowed either way); a new login on a
  logged-in connection must also be the session's user and mechanism. One that must fail and
  succeeds is ``auth-bypass`` (an invariant failure); one that must succeed and is refused,
  ``refused-valid``.
- Until a login succeeds only ApiVersions, SaslHandshake and SaslAuthenticate are answered: any
  other request closes the connection unanswered, and so does one sent after the session's
  lifetime (``connections.max.reauth.ms``) passed without a new login; answered, it is
  ``auth-bypass``. A frame above 512 KiB before any login is refused unread.
- A refusal carries Kafka's code for it (SaslHandshake of a mechanism not enabled
  UNSUPPORTED_SASL_MECHANISM; out of order ILLEGAL_SASL_STATE; a failed login
  SASL_AUTHENTICATION_FAILED), then the connection closes: left open is ``wrong-answer``; closed
  without the answer, or UNKNOWN_SERVER_ERROR, ``unexpected-error``; another code ``wrong-error``.
- A refused login's message never names its user, and an unknown user's refusal reads as a wrong
  password's; SCRAM answers an unknown user with a server-first like a real user's (the same
  iteration count and salt size, a salt that stays the same for the name). Otherwise
  ``user-disclosed`` (an invariant failure).
- On the PLAINTEXT listener every SASL request is refused (ILLEGAL_SASL_STATE, or
  UNSUPPORTED_SASL_MECHANISM for a mechanism), whether or not the connection closes then, and
  every other request is answered.
- After the case, nothing the broker stores changed: no topic (a Metadata before the login asked to
  create one), no user or credential, no partition's log end (``stored-refused`` otherwise). A
  fresh connection logging in and answering Metadata is checked by
  :meth:`~sparklog.fuzz.kafka_apply.KafkaApplier.health` after each login case.

Whether a session has ended is judged by the clock: a request sent within half its lifetime of the
login must be answered, one sent after the lifetime (from the login's answer) must not; between
the two either is right.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from typing import Any

import numpy as np
from kafka.protocol.metadata import ApiVersionsRequest
from kafka.protocol.sasl import SaslAuthenticateRequest, SaslHandshakeRequest

from sparklog.fuzz import kafka_ops as ops
from sparklog.fuzz.apply import Outcome
from sparklog.fuzz.cases import Case
from sparklog.fuzz.cluster import REAUTH_MS, FuzzCluster
from sparklog.fuzz.kafka_cases import PLAINTEXT_LISTENER
from sparklog.fuzz.kafka_sasl import (
    FUZZ_USER,
    MECHANISMS,
    OTHER_USER,
    PLAIN,
    SCRAM,
    ScramLogin,
    ServerFirst,
    mutate,
    nonce,
    plain_login,
    plain_message,
    same_final,
    same_password,
    saslname,
)
from sparklog.fuzz.kafka_wire import CLOSED, SILENT, Answer, KafkaWire, decode_response, kafka_batch
from sparklog.fuzz.report import (
    AUTH_BYPASS,
    NO_ANSWER,
    REFUSED_VALID,
    STORED_REFUSED,
    UNEXPECTED_ERROR,
    USER_DISCLOSED,
    WRONG_ANSWER,
    Anomaly,
)
from sparklog.kafka import error_codes
from sparklog.kafka.listener_security import SASL_MAX_RECEIVE_BYTES
from sparklog.security.sasl_exchange import MAX_MESSAGE

STEP_TIMEOUT_S = 10.0
CLOSE_TIMEOUT_S = 3.0  # how long a connection that must close is given to close
EXPIRY_MARGIN_S = 0.15
PROBE_TOPIC = "fz-login-probe"  # what a Metadata request before a login asks to create
HANDSHAKE, AUTHENTICATE, LOGGED_IN, CLOSED_STAGE = "handshake", "authenticate", "logged-in", "closed"
MUST, MUST_NOT, EITHER = "must", "must-not", "either"
SASL_HANDSHAKE, SASL_AUTHENTICATE = SaslHandshakeRequest[1].API_KEY, SaslAuthenticateRequest[0].API_KEY
AUTH_FAILED = error_codes.SASL_AUTHENTICATION_FAILED
ILLEGAL_STATE = error_codes.ILLEGAL_SASL_STATE
UNSUPPORTED = error_codes.UNSUPPORTED_SASL_MECHANISM


class _Stop(Exception):  # noqa: N818 - control flow inside a case, never seen outside this module
    """The case's connection is closed (as expected or not): its remaining steps are not sent."""


@dataclasses.dataclass
class Expected:
    """What the fuzzer knows of the case's connection: its stage (waiting for a handshake, logging
    in, logged in, closed), the session's user and mechanism, the login under way, and when the
    last login was sent and answered (its session ends ``lifetime_s`` after that)."""

    sasl: bool
    lifetime_s: float
    stage: str = HANDSHAKE
    user: str | None = None
    mechanism: str | None = None
    pending: str | None = None  # the mechanism of the login under way
    pending_fails: bool = False  # that login must fail (a new login naming another mechanism)
    scram_started: bool = False  # the pending SCRAM login's client-first was answered
    ever_logged_in: bool = False  # frames above 512 KiB are read from then on
    may_be_closed: bool = False  # a refusal after which the broker may have closed the connection
    login_sent: float = 0.0
    login_answered: float = 0.0

    @classmethod
    def plaintext(cls) -> Expected:
        """A PLAINTEXT listener's connection: its client is who its transport says from the start."""
        return cls(False, 0.0, LOGGED_IN, "ANONYMOUS", ever_logged_in=True)

    def expired(self, at: float) -> bool | None:
        """Whether the session is over at ``at`` (None: it may or may not be)."""
        if not self.sasl or self.lifetime_s <= 0 or self.stage != LOGGED_IN:
            return False
        if at < self.login_sent + self.lifetime_s / 2:
            return False
        if at > self.login_answered + self.lifetime_s + EXPIRY_MARGIN_S:
            return True
        return None

    def logged_in(self, user: str, mechanism: str, sent: float) -> None:
        self.stage, self.user, self.mechanism = LOGGED_IN, user, mechanism
        self.pending, self.pending_fails, self.scram_started = None, False, False
        self.ever_logged_in = True
        self.login_sent, self.login_answered = sent, time.monotonic()


@dataclasses.dataclass
class _Scram:
    """A SCRAM login's expectations: of its client-first's answer and of the login."""

    first: str  # MUST (answered), MUST_NOT or EITHER
    login: str  # MUST (succeeds), MUST_NOT or EITHER


class LoginApplier:
    """Applies ``kafka-login`` cases; remembers, per cluster, how refusals and SCRAM's first answers
    read for real and unknown users (to tell whether they differ)."""

    def __init__(self, cluster: FuzzCluster, log_end: Callable[[str, int, bool], int | None]) -> None:
        """``log_end(topic, partition, fresh)``: a partition's log end (the Kafka applier's, kept
        between cases)."""
        self.cluster = cluster
        self.log_end = log_end
        self.refusals: dict[tuple[str, bool], tuple[str, str]] = {}  # (mechanism, user exists) -> message, case
        self.salts: dict[str, bytes] = {}  # SCRAM's salt per user name
        self.shape: tuple[int, int] | None = None  # a real user's salt size and iteration count
        self.due = False  # a login case ran since the last health check

    def reset(self) -> None:
        """A fresh cluster (new users, a new secret for unknown users' salts)."""
        self.refusals.clear()
        self.salts.clear()
        self.shape = None

    def apply(self, case: Case) -> Outcome:
        p = case.params
        broker_ids = self.cluster.broker_ids
        broker_id = broker_ids[int(p.get("broker", 0)) % len(broker_ids)]
        plaintext = p.get("listener") == PLAINTEXT_LISTENER
        port = self.cluster.kafka_port(broker_id) if plaintext else self.cluster.sasl_port(broker_id)
        self.due = True
        before = self._stored(broker_id)
        try:
            wire = KafkaWire(ops.HOST, port, timeout=STEP_TIMEOUT_S)
        except OSError as exc:
            return Outcome("connect-failed", [], {"error": str(exc)})
        run = _Run(self, wire, broker_id, int(p.get("seed", 0)), plaintext)
        try:
            for index, step in enumerate(p["steps"]):
                run.step(index, step)
        except _Stop:
            pass
        finally:
            wire.close()
        skipped = len(p["steps"]) - len(run.log)
        if skipped > 0:
            run.log.append(f"rest: {skipped} step(s) not sent, the connection is closed")
        anomalies = run.anomalies + self._changed(broker_id, before)
        return Outcome(f"login:{run.expected.stage}", anomalies, {"broker": broker_id, "steps": run.log})

    # ------------------------------------------------------------------ what the broker stores
    def _stored(self, broker_id: int) -> dict[str, Any]:
        """The partitions' log ends, the topics and the users, before the case."""
        ends = {key: self.log_end(*key, False) for key in self.cluster.partitions()}
        return {"ends": ends, "topics": self._topics(broker_id), "users": self.cluster.users()}

    def _topics(self, broker_id: int) -> set[str] | None:
        try:
            with KafkaWire(ops.HOST, self.cluster.kafka_port(broker_id), timeout=ops.HEALTH_TIMEOUT_S) as wire:
                answer = wire.exchange(ops.metadata_request(12, None))
        except OSError:
            return None
        return None if answer.response is None else {t.name for t in answer.response.topics}

    def _changed(self, broker_id: int, before: dict[str, Any]) -> list[Anomaly]:
        found: list[Anomaly] = []
        for (topic, partition), end in before["ends"].items():
            after = self.log_end(topic, partition, True)
            if end is not None and after is not None and after != end:
                found.append(Anomaly(STORED_REFUSED, f"{topic}-{partition}: a login case, the log went {end}->{after}"))
        topics = self._topics(broker_id)
        if before["topics"] is not None and topics is not None and topics != before["topics"]:
            new, gone = sorted(topics - before["topics"]), sorted(before["topics"] - topics)
            found.append(Anomaly(STORED_REFUSED, f"a login case changed the topics: new {new}, gone {gone}"))
        users = self.cluster.users()
        if users != before["users"]:
            found.append(Anomaly(STORED_REFUSED, f"a login case changed the users: {before['users']} -> {users}"))
        return found

    # ------------------------------------------------------------------ checks between cases
    def health(self) -> tuple[list[int], list[Anomaly]]:
        """After a login case: every live broker's SASL listener logs ``fz-user`` in on a fresh
        connection (SCRAM, then PLAIN) and answers Metadata (a second try after a pause); the
        brokers whose listener does not, and findings in its answers."""
        silent: list[int] = []
        findings: list[Anomaly] = []
        if not self.due:
            return silent, findings
        self.due = False
        topics = sorted(self.cluster.topics)
        password = self.cluster.passwords[FUZZ_USER]
        for broker_id in self.cluster.broker_ids:
            if not self.cluster.alive(broker_id):
                continue
            port = self.cluster.sasl_port(broker_id)
            for mechanism in MECHANISMS:
                problem, found = ops.sasl_listener_health(port, FUZZ_USER, password, mechanism, topics)
                if problem is not None:
                    time.sleep(0.5)
                    problem, found = ops.sasl_listener_health(port, FUZZ_USER, password, mechanism, topics)
                findings += found
                if problem is not None:
                    silent.append(broker_id)
                    break
        return silent, findings


class _Run:
    """One case's connection: its steps sent and judged in order."""

    def __init__(self, applier: LoginApplier, wire: KafkaWire, broker_id: int, seed: int, plaintext: bool) -> None:
        self.applier = applier
        self.cluster = applier.cluster
        self.wire = wire
        self.broker_id = broker_id
        self.seed = seed
        self.passwords = applier.cluster.passwords
        self.expected = Expected.plaintext() if plaintext else Expected(True, REAUTH_MS / 1000)
        self.anomalies: list[Anomaly] = []
        self.log: list[str] = []
        self.rng = np.random.default_rng(seed)
        self.what = ""  # the step under way, for anomalies' details
        self.note = ""  # what came of it, for the case's log
        self.pipeline = False  # a Metadata request goes with the login's last message, in one write
        self.behind: Answer | None = None  # what came of that Metadata request

    # ------------------------------------------------------------------ steps
    def step(self, index: int, step: dict[str, Any]) -> None:
        self.rng = np.random.default_rng([self.seed, index])
        op = step["op"]
        self.what = f"step {index} ({op})"
        self.note = ""
        self.pipeline, self.behind = False, None
        handler = {
            "login": self._login,
            "handshake": self._handshake_step,
            "authenticate": self._authenticate_step,
            "request": self._request_step,
            "frame": self._frame_step,
            "wait": self._wait,
        }[op]
        try:
            handler(step)
        finally:
            self.log.append(f"{op}: {self.note or self.expected.stage}")

    def _password(self, symbol: str, user: str) -> str:
        """A symbolic password (``right``, ``wrong``, ...) for ``user`` (an unknown user's right
        one is ``fz-user``'s)."""
        right = self.passwords.get(user, self.passwords[FUZZ_USER])
        other = self.passwords[OTHER_USER if user != OTHER_USER else FUZZ_USER]
        return {
            "right": right,
            "wrong": "wrong-" + right,
            "empty": "",
            "control": "\x07" + right,
            "prefix": right[:-1],
            "other": other,
            "saslprep": right[:1] + "\u00ad" + right[1:],  # a soft hyphen: SASLprep maps it to nothing
            "long": "p" * 5000,
        }.get(symbol, symbol)  # any other: the password itself

    # ------------------------------------------------------------------ a whole login
    def _login(self, step: dict[str, Any]) -> None:
        mechanism, user = str(step["mechanism"]), str(step["user"])
        password = self._password(str(step["password"]), user)
        version = int(step.get("version", 2))
        mutation = step.get("mutation") or {}
        self.pipeline = bool(step.get("pipeline"))
        what = f"{self.what}: a {mechanism!r:.40} login as {user!r:.40}"
        what += ", Metadata pipelined behind it" if self.pipeline else ""
        if not self._handshake(mechanism, 1, what):
            self.note = "handshake refused"
            return
        if mechanism == PLAIN:
            if not self._interrupt(step.get("interrupt"), mechanism, what):
                return
            self._plain(user, password, version, mutation, what)
        else:
            self._scram(step, user, password, version, mutation, what)

    def _interrupt(self, kind: str | None, mechanism: str, what: str) -> bool:
        """A request in the middle of a login; whether the login goes on."""
        if kind is None:
            return True
        if kind == "handshake":
            self._handshake(mechanism, 1, f"{what}, a SaslHandshake in the middle")
            return self.expected.stage == AUTHENTICATE
        request = ops.api_versions_request(3) if kind == "api-versions" else ops.metadata_request(12, None)
        self._request(kind, request, f"{what}, {kind} in the middle")
        return self.expected.stage == AUTHENTICATE

    def _plain(self, user: str, password: str, version: int, mutation: dict[str, Any], what: str) -> None:
        op = mutation.get("op")
        token = plain_message(user, password)
        if op == "authzid-self":
            token = plain_message(user, password, authzid=user)
        elif op == "authzid-other":
            token = plain_message(user, password, authzid=OTHER_USER if user != OTHER_USER else FUZZ_USER)
        elif op == "fields":
            token += b"\0extra"
        elif op == "size":
            prefix = plain_message(user, "")
            need = max(0, int(mutation["n"]) - len(prefix))
            token = prefix + (password.encode() + b"x" * need)[:need]
        elif op in ("flip", "cut", "extend"):
            token = mutate(token, op, self.rng, int(mutation.get("n", 1)), float(mutation.get("keep", 0.5)))
        self._plain_message(token, version, what + (f", mutated ({op})" if op else ""), plain=not op)

    def _plain_message(self, token: bytes, version: int, what: str, plain: bool = False) -> None:
        """PLAIN's one message, judged (``plain``: an unmutated message, its refusal compared
        with other users')."""
        expected = self.expected
        logs_in = plain_login(token, self.passwords)
        if expected.pending_fails or (expected.user is not None and logs_in != expected.user):
            logs_in = None
        parts = token.split(b"\0")
        well_formed = len(parts) == 3 and not parts[0] and bool(parts[1]) and len(token) <= MAX_MESSAGE
        user = parts[1].decode(errors="replace") if well_formed else None
        sent = time.monotonic()
        answer = self._send_last(SaslAuthenticateRequest[version](auth_bytes=token))
        self._finish_login(
            answer,
            MUST if logs_in else MUST_NOT,
            logs_in,
            PLAIN,
            version,
            sent,
            what,
            refused_user=user if plain and not expected.pending_fails and expected.user is None else None,
        )

    def _scram(
        self, step: dict[str, Any], user: str, password: str, version: int, mutation: dict[str, Any], what: str
    ) -> None:
        target, op = mutation.get("target"), mutation.get("op")
        client = ScramLogin(user, password, nonce(self.rng))
        captured = None
        if op in ("replay-final", "replay-both"):
            captured = self._side_login(user)
            if captured is None:
                self.note = "not sent: no login to replay"
                return
        first = client.first()
        if target == "first":
            first = self._mutated_first(client, op, mutation)
        if op == "replay-both" and captured is not None:
            first = captured[0]
        plan = self._scram_plan(client, user, password, first, target, op)
        what += f", {target} mutated ({op})" if op else ""
        answer = self._exchange(SaslAuthenticateRequest[version](auth_bytes=first))
        plain = target != "first" and op != "replay-both"  # the client-first as a correct client sends it
        server_first = self._scram_first(answer, plan, user, first, client, plain, what)
        if server_first is None:
            return
        if not self._interrupt(step.get("interrupt"), SCRAM, what):
            return
        final = client.final(server_first)
        if final is None:
            self._found(WRONG_ANSWER, f"{what}: the server-first {server_first[:80]!r} cannot be answered")
            raise _Stop()
        meant, login = final, plan.login
        if target == "final":
            final, plan.login = self._mutated_final(client, server_first, final, op, mutation, captured, login)
            if op in ("flip", "cut", "extend") and same_final(final, meant):  # still says the same
                plan.login = EITHER if login == MUST else login
        if len(final) > MAX_MESSAGE:
            plan.login = MUST_NOT
        sent = time.monotonic()
        answer = self._send_last(SaslAuthenticateRequest[version](auth_bytes=final))
        credentials_only = op is None and self.expected.user is None and not self.expected.pending_fails
        self._finish_login(
            answer,
            plan.login,
            user,
            SCRAM,
            version,
            sent,
            what,
            scram=client,
            refused_user=user if credentials_only else None,
        )

    def _mutated_first(self, client: ScramLogin, op: str | None, mutation: dict[str, Any]) -> bytes:
        user = client.user
        if op == "gs2-y":
            client.gs2 = "y,,"
        elif op == "authzid-self":
            client.gs2 = f"n,a={saslname(user)},"
        elif op == "authzid-other":
            client.gs2 = f"n,a={OTHER_USER if user != OTHER_USER else FUZZ_USER},"
        elif op == "cbind-p":
            client.gs2 = "p=tls-unique,,"
        elif op == "mext":
            return (client.gs2 + "m=fz," + client.bare).encode()
        elif op == "extension":
            client.extensions = ",x=" + nonce(self.rng, 8)
        elif op == "size":
            size = int(mutation["n"])
            if mutation.get("via") == "nonce":
                client.client_nonce = nonce(self.rng, max(1, size - len(client.first()) + len(client.client_nonce)))
            else:
                client.extensions = ",x=" + "e" * max(1, size - len(client.first()) - 3)
        elif op in ("flip", "cut", "extend"):
            return mutate(client.first(), op, self.rng, int(mutation.get("n", 1)), float(mutation.get("keep", 0.5)))
        return client.first()

    def _scram_plan(
        self, client: ScramLogin, user: str, password: str, first: bytes, target: str | None, op: str | None
    ) -> _Scram:
        """What the client-first must get, and whether the login must succeed."""
        expected = self.expected
        right = user in self.passwords and same_password(password, self.passwords[user])
        if expected.pending_fails or (expected.user is not None and user != expected.user):
            right = False
        answerable = bool(user) and user.isprintable()  # a name scramp reads (an unknown one too)
        login = MUST if right else MUST_NOT
        first_answer = MUST if answerable else EITHER
        if target == "first":
            if op in ("flip", "cut", "extend"):
                if first.decode(errors="replace") != client.first().decode():
                    first_answer, login = EITHER, MUST_NOT
            elif op in ("gs2-y", "authzid-self"):
                first_answer, login = EITHER, EITHER if right else MUST_NOT
            elif op in ("authzid-other", "cbind-p", "mext"):
                first_answer, login = EITHER, MUST_NOT
        elif op in ("replay-final", "replay-both"):
            login = MUST_NOT
        if len(first) > MAX_MESSAGE:
            first_answer, login = MUST_NOT, MUST_NOT
        return _Scram(first_answer, login)

    def _scram_first(
        self,
        answer: Answer,
        plan: _Scram,
        user: str,
        first: bytes,
        client: ScramLogin,
        plain: bool,
        what: str,
    ) -> str | None:
        """The server-first answering a client-first, checked (None: the login is over)."""
        if answer.response is None:
            self._no_answer(answer, f"{what}: the client-first")
        code = int(answer.response.error_code)
        if code:
            if plan.first == MUST:
                kind = USER_DISCLOSED if plain and user not in self.passwords else REFUSED_VALID
                self._found(
                    kind,
                    f"{what}: a well-formed client-first refused with {ops.code_name(code)} (a real user's is not)",
                )
            self._refused(answer, {AUTH_FAILED}, f"{what}: the client-first", closes=True)
            return None
        if plan.first == MUST_NOT:
            self._found(
                WRONG_ANSWER, f"{what}: a client-first of {len(first)} bytes (above {MAX_MESSAGE}) was answered"
            )
        server_first = bytes(answer.response.auth_bytes or b"").decode(errors="replace")
        parsed = ServerFirst.parse(server_first)
        if parsed is None:
            self._found(WRONG_ANSWER, f"{what}: the server-first {server_first[:80]!r} is not r=,s=,i=")
            raise _Stop()
        extends = parsed.nonce.startswith(client.client_nonce) and len(parsed.nonce) > len(client.client_nonce)
        if (plain or first == client.first()) and not extends:
            self._found(WRONG_ANSWER, f"{what}: the server nonce does not extend the client's")
        if plain:
            self._compare_first(user, parsed, what)
        self.expected.scram_started = True
        return server_first

    def _compare_first(self, user: str, parsed: ServerFirst, what: str) -> None:
        """An unknown user's server-first must read as a real user's; a name's salt stays."""
        applier = self.applier
        shape = (len(parsed.salt), parsed.iterations)
        if user in self.passwords:
            applier.shape = applier.shape or shape
        elif applier.shape is not None and shape != applier.shape:
            self._found(
                USER_DISCLOSED,
                f"{what}: an unknown user's salt size and iterations {shape} are not a real user's {applier.shape}",
            )
        seen = applier.salts.setdefault(user, parsed.salt)
        if seen != parsed.salt:
            self._found(USER_DISCLOSED, f"{what}: the salt of {user!r:.40} changed between two logins")

    def _mutated_final(
        self,
        client: ScramLogin,
        server_first: str,
        final: bytes,
        op: str | None,
        mutation: dict[str, Any],
        captured: tuple[bytes, bytes] | None,
        login: str,
    ) -> tuple[bytes, str]:
        """The client-final a final mutation sends, and whether the login may then succeed."""
        parsed = ServerFirst.parse(server_first)
        assert parsed is not None
        if op in ("flip", "cut", "extend"):
            return mutate(final, op, self.rng, int(mutation.get("n", 1)), float(mutation.get("keep", 0.5))), MUST_NOT
        if op == "nonce":
            real, ours = parsed.nonce, client.client_nonce
            how = mutation.get("how")
            if how == "flip-server":
                other = real[:-1] + ("A" if real[-1] != "A" else "B")
            elif how == "flip-client":
                other = ("A" if real[0] != "A" else "B") + real[1:]
            elif how == "cut-server":
                other = real[: len(ours) + (len(real) - len(ours)) // 2]
            else:
                other = real + "x"
            return client.final(server_first, nonce=other) or final, MUST_NOT
        if op == "cbind":
            cbind = {
                "y": b"y,,",
                "p": b"p=tls-unique,," + bytes(12),
                "garbage": b"\xff\x00garbage",
                "empty-authzid": b"n,a=,",
            }[str(mutation.get("how"))]
            if cbind == client.gs2.encode():
                return final, login
            return client.final(server_first, cbind=cbind) or final, MUST_NOT
        if op == "proof":
            how = mutation.get("how")
            head = final[: final.rindex(b",p=") + 3]
            if how == "zeros":
                return head + b"AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=", MUST_NOT
            if how == "short":
                return head + final[len(head) : len(head) + 20], MUST_NOT
            if how == "empty":
                return head, MUST_NOT
            wrong = dataclasses.replace(client, password=client.password + "-not")
            return wrong.final(server_first) or final, MUST_NOT
        if op == "order":
            parts = final.split(b",")
            return b",".join([parts[1], parts[0], *parts[2:]]), MUST_NOT
        if op == "extension":
            return client.final(server_first, extensions=",x=fz") or final, EITHER if login == MUST else login
        if op in ("replay-final", "replay-both") and captured is not None:
            return captured[1], MUST_NOT
        return final, login

    def _side_login(self, user: str) -> tuple[bytes, bytes] | None:
        """A correct SCRAM login of ``user`` (``fz-user`` if unknown) on another connection: its
        client-first and client-final, to replay."""
        if not self.expected.sasl:
            return None
        user = user if user in self.passwords else FUZZ_USER
        client = ScramLogin(user, self.passwords[user], nonce(self.rng))
        try:
            with KafkaWire(ops.HOST, self.cluster.sasl_port(self.broker_id), timeout=STEP_TIMEOUT_S) as side:
                side.exchange(SaslHandshakeRequest[1](mechanism=SCRAM))
                first = client.first()
                answer = side.exchange(SaslAuthenticateRequest[2](auth_bytes=first))
                if answer.response is None or answer.response.error_code:
                    return None
                final = client.final(bytes(answer.response.auth_bytes).decode(errors="replace"))
                if final is None:
                    return None
                answer = side.exchange(SaslAuthenticateRequest[2](auth_bytes=final))
                if answer.response is None or answer.response.error_code:
                    self._found(REFUSED_VALID, f"{self.what}: a correct SCRAM login of {user} (to replay) was refused")
                    return None
        except OSError:
            return None
        return first, final

    def _finish_login(
        self,
        answer: Answer,
        must: str,
        user: str | None,
        mechanism: str,
        version: int,
        sent: float,
        what: str,
        scram: ScramLogin | None = None,
        refused_user: str | None = None,
    ) -> None:
        """The answer to a login's last message: logged in (as ``user``), or refused and closed."""
        if answer.response is None:
            self._no_answer(answer, f"{what}: the login's last message")
        response = answer.response
        code = int(response.error_code)
        if code == error_codes.NONE:
            if must == MUST_NOT:
                self._found(AUTH_BYPASS, f"{what}: logged in")
            if scram is not None and must != MUST_NOT and not scram.verify(bytes(response.auth_bytes or b"")):
                self._found(WRONG_ANSWER, f"{what}: the broker's proof (server-final) is wrong")
            if version >= 1 and int(response.session_lifetime_ms) != REAUTH_MS:
                self._found(
                    WRONG_ANSWER, f"{what}: session_lifetime_ms {response.session_lifetime_ms}, not {REAUTH_MS}"
                )
            self.expected.logged_in(user or self.expected.user or "?", mechanism, sent)
            if self.behind is not None:
                self._answered(self.behind, f"{what}: Metadata pipelined behind the login")
            self.note = f"logged in as {user!r:.40}" + (", Metadata behind it answered" if self.behind else "")
            return
        if must == MUST:
            self._found(REFUSED_VALID, f"{what}: a correct login refused with {ops.code_name(code)}")
        message = str(response.error_message or "")
        if refused_user is not None and len(refused_user) >= 4 and refused_user in message:
            self._found(USER_DISCLOSED, f"{what}: the refusal names the user: {message[:200]!r}")
        if refused_user is not None and code == AUTH_FAILED:
            self._compare_refusal(mechanism, refused_user in self.passwords, message, what)
        self.note = "login refused"
        if self.behind is not None:  # what the broker did with a request it must not answer
            behind = self.behind
            if behind.response is not None:
                self._found(AUTH_BYPASS, f"{what}: Metadata pipelined behind a refused login was answered")
            elif behind.problem == SILENT:
                self._found(NO_ANSWER, f"{what}: a refused login with Metadata behind it: neither answered nor closed")
            self.anomalies.extend(ops.check_code(what, code, {AUTH_FAILED}))
            self.note = f"refused ({ops.NAMES.get(code, code)}), Metadata behind it {behind.problem or 'answered'}"
            self._close()
        self._refused(answer, {AUTH_FAILED}, f"{what}: the login's last message", closes=True)

    def _send_last(self, request: Any) -> Answer:
        """A login's last message; with ``pipeline``, a Metadata request sent with it in one write
        (its answer, or why there is none, in ``behind``)."""
        if not self.pipeline:
            return self._exchange(request)
        metadata = ops.metadata_request(12, None)
        frames = self.wire.frame(request)
        first = self.wire.correlation_id
        frames += self.wire.frame(metadata)
        second = self.wire.correlation_id
        if not self.wire.send_bytes(frames):
            return Answer(None, CLOSED)
        answers = []
        for sent, correlation in ((request, first), (metadata, second)):
            got = self.wire.receive(STEP_TIMEOUT_S)
            answers.append(
                Answer(None, got)
                if isinstance(got, str)
                else decode_response(sent.API_KEY, sent.API_VERSION, got, correlation)
            )
            if isinstance(got, str):
                break
        if len(answers) == 2:
            self.behind = answers[1]
            if answers[1].response is not None:
                self.expected.may_be_closed = False
        return answers[0]

    def _compare_refusal(self, mechanism: str, exists: bool, message: str, what: str) -> None:
        """A refused login's message for an unknown user must read as one for a wrong password."""
        refusals = self.applier.refusals
        refusals.setdefault((mechanism, exists), (message, what))
        other = refusals.get((mechanism, not exists))
        if other is not None and other[0] != message:
            unknown, wrong = (message, other[0]) if not exists else (other[0], message)
            self._found(
                USER_DISCLOSED,
                f"{what}: a {mechanism} login of an unknown user is refused with {unknown[:120]!r}, "
                f"one with a wrong password with {wrong[:120]!r}",
            )

    # ------------------------------------------------------------------ lone SASL requests
    def _handshake_step(self, step: dict[str, Any]) -> None:
        self._handshake(str(step["mechanism"]), int(step.get("version", 1)), f"{self.what}: SaslHandshake")

    def _handshake(self, mechanism: str, version: int, what: str) -> bool:
        """A SaslHandshake, judged; whether it began a login."""
        expected = self.expected
        what = f"{what} v{version} of {mechanism!r:.40}"
        if version != 1:
            self._unserved(SASL_HANDSHAKE, version, what)
        answer = self._exchange(SaslHandshakeRequest[1](mechanism=mechanism))
        if answer.response is None:
            self._no_answer(answer, what)
        code = int(answer.response.error_code)
        if not expected.sasl:
            if code == error_codes.NONE:
                self._found(WRONG_ANSWER, f"{what}: a PLAINTEXT listener took a SaslHandshake")
                raise _Stop()
            self._refused(answer, {ILLEGAL_STATE, UNSUPPORTED}, what, closes=None)
            return False
        if code in (error_codes.NONE, UNSUPPORTED) and set(answer.response.mechanisms or []) != set(MECHANISMS):
            self._found(WRONG_ANSWER, f"{what}: the mechanisms listed are {answer.response.mechanisms}")
        session_mechanism = expected.mechanism if expected.stage == LOGGED_IN else None
        if expected.stage == AUTHENTICATE:
            codes, kafka_takes_it = {ILLEGAL_STATE}, False
        elif mechanism not in MECHANISMS:
            codes, kafka_takes_it = {UNSUPPORTED}, False
        elif session_mechanism is not None and mechanism != session_mechanism:
            # Kafka answers NONE and fails the login at its end; refusing it at once is as good
            codes, kafka_takes_it = {ILLEGAL_STATE, UNSUPPORTED, AUTH_FAILED}, True
        else:
            codes, kafka_takes_it = set(), True
        if code != error_codes.NONE:
            if not codes:
                self._found(REFUSED_VALID, f"{what}: refused with {ops.code_name(code)}")
            self._refused(answer, codes or {code}, what, closes=True)
            return False
        if not kafka_takes_it:
            self._found(WRONG_ANSWER, f"{what}: taken")
        expected.pending_fails = mechanism not in MECHANISMS or (bool(codes) and kafka_takes_it)
        expected.stage, expected.pending, expected.scram_started = AUTHENTICATE, mechanism, False
        return True

    def _authenticate_step(self, step: dict[str, Any]) -> None:
        version = int(step.get("version", 2))
        what = f"{self.what}: SaslAuthenticate v{version} ({step['token']})"
        if not 0 <= version <= 2:
            self._unserved(SASL_AUTHENTICATE, version, what)
        token = self._token(str(step["token"]), int(step.get("n", 16)))
        self._authenticate(token, version, what)

    def _token(self, kind: str, n: int) -> bytes:
        if kind == "empty":
            return b""
        if kind == "plain-right":
            return plain_message(FUZZ_USER, self.passwords[FUZZ_USER])
        if kind == "scram-first":
            return ScramLogin(FUZZ_USER, self.passwords[FUZZ_USER], nonce(self.rng)).first()
        return self.rng.integers(0, 256, n, dtype=np.uint8).tobytes()

    def _authenticate(self, token: bytes, version: int, what: str) -> None:
        """A SaslAuthenticate on its own, judged by the stage it finds."""
        expected = self.expected
        if expected.stage == AUTHENTICATE and expected.pending == PLAIN:
            self._plain_message(token, version, what)
            return
        answer = self._exchange(SaslAuthenticateRequest[version](auth_bytes=token))
        if answer.response is None:
            self._no_answer(answer, what)
        code = int(answer.response.error_code)
        if expected.stage != AUTHENTICATE:
            if code == error_codes.NONE:
                self._found(AUTH_BYPASS, f"{what}: answered without error while {expected.stage}")
                raise _Stop()
            # Kafka keeps a logged-in connection open (KafkaApis answers it); sparklog closes it
            closes = True if expected.sasl and expected.stage == HANDSHAKE else None
            self._refused(answer, {ILLEGAL_STATE}, what, closes=closes)
            return
        if not expected.scram_started and len(token) <= MAX_MESSAGE:
            if code == error_codes.NONE:  # taken as a client-first (a real one must be)
                expected.scram_started = True
                return
            self._refused(answer, {AUTH_FAILED}, what, closes=True)
            return
        self._finish_login(answer, MUST_NOT, None, str(expected.pending), version, time.monotonic(), what)

    def _unserved(self, api_key: int, version: int, what: str) -> None:
        """A version the listener does not serve: the connection closes unanswered."""
        flexible = api_key == SASL_AUTHENTICATE and version >= 2
        header = ops.raw_header(api_key, version, 99, b"fz", flexible)
        self.wire.send_bytes(len(header + bytes(4)).to_bytes(4, "big") + header + bytes(4))
        got = self.wire.receive(CLOSE_TIMEOUT_S)
        if got == SILENT:
            self._found(NO_ANSWER, f"{what}: an unserved version neither answered nor closed")
        elif isinstance(got, bytes):
            self._found(WRONG_ANSWER, f"{what}: an unserved version was answered")
        self.note = "closed: unserved version"
        self._close()

    # ------------------------------------------------------------------ other requests
    def _request_step(self, step: dict[str, Any]) -> None:
        api, topic, partition = str(step["api"]), str(step["topic"]), int(step["partition"])
        if api in ("produce", "init-pid", "metadata-create") and self.expected.stage == LOGGED_IN:
            self.note = "not sent: it would store something once logged in"
            return
        request = {
            "api-versions": lambda: ops.api_versions_request(3),
            "metadata": lambda: ops.metadata_request(12, [topic]),
            "list-offsets": lambda: ops.list_offsets_request(6, [(topic, partition)], -1),
            "fetch": lambda: ops.fetch_request(
                12, [(topic, partition, 0)], max_wait_ms=0, min_bytes=1, max_bytes=1 << 16
            ),
            "produce": lambda: ops.produce_request(
                9, 1, 10_000, None, [(topic, partition, kafka_batch([b"fz-login-probe"]))]
            ),
            "init-pid": lambda: ops.init_pid_request(4, None, 60_000, -1, -1),
            "metadata-create": lambda: ops.metadata_request(12, [PROBE_TOPIC], auto_create=True),
        }[api]()
        self._request(api, request, f"{self.what}: {api}")

    def _request(self, api: str, request: Any, what: str) -> None:
        """A request other than SaslHandshake and SaslAuthenticate, judged by the connection's
        stage (and the session's age)."""
        expected = self.expected
        at = time.monotonic()
        expired = expected.expired(at)
        answer = self._exchange(request)
        if api == "api-versions":
            if expired is False:
                self._answered(answer, what)
                self._check_table(answer, what)
            else:  # Kafka closes an ended session's connection on any request but a new login
                self._answered_or_closed(answer, what)
            return
        if not expected.sasl or (expected.stage == LOGGED_IN and expired is False):
            self._answered(answer, what)
            return
        if expected.stage == LOGGED_IN and expired is None:
            self._answered_or_closed(answer, what)
            return
        why = "after the session's lifetime" if expected.stage == LOGGED_IN else f"while {expected.stage}"
        if answer.response is not None:
            self._found(AUTH_BYPASS, f"{what}: answered {why}")
        elif answer.problem == SILENT:
            self._found(NO_ANSWER, f"{what}: {why}, neither answered nor closed")
        self.note = f"closed: {api} {why}"
        self._close()

    def _answered(self, answer: Answer, what: str) -> None:
        """A request that must be answered (codes Kafka defines, never UNKNOWN_SERVER_ERROR)."""
        if answer.response is None:
            self._no_answer(answer, what)
        self.anomalies.extend(ops.codes_in(answer.response, what))
        self.note = "answered"

    def _answered_or_closed(self, answer: Answer, what: str) -> None:
        """A request sent about when its session ends: answered, or its connection closed."""
        if answer.response is not None:
            self.note = "answered"
            return
        if answer.problem == SILENT:
            self._found(NO_ANSWER, f"{what}: neither answered nor closed")
        self.note = "closed: the session ended"
        self._close()

    def _check_table(self, answer: Answer, what: str) -> None:
        """A SASL listener's ApiVersions lists SaslHandshake v1 and SaslAuthenticate v0-2."""
        if not self.expected.sasl or answer.response is None:
            return
        table = {k.api_key: (k.min_version, k.max_version) for k in answer.response.api_keys}
        if table.get(SASL_HANDSHAKE) != (1, 1) or table.get(SASL_AUTHENTICATE) != (0, 2):
            self._found(WRONG_ANSWER, f"{what}: the SASL APIs advertised are {table.get(17)} and {table.get(36)}")

    # ------------------------------------------------------------------ frames and time
    def _frame_step(self, step: dict[str, Any]) -> None:
        size, content = int(step["size"]), str(step["content"])
        what = f"{self.what}: a {content} frame of {size} bytes"
        expected = self.expected
        if content == "api-versions":
            build = lambda k: ApiVersionsRequest[3](client_software_name="x" * k, client_software_version="1.0")  # noqa: E731
        else:
            build = lambda k: SaslAuthenticateRequest[2](auth_bytes=b"x" * k)  # noqa: E731
        request, payload = self._sized(build, size)
        unread = expected.sasl and not expected.ever_logged_in and size > SASL_MAX_RECEIVE_BYTES
        if unread:
            self.wire.send_bytes(len(payload).to_bytes(4, "big") + payload)
            got = self.wire.receive(CLOSE_TIMEOUT_S)
            if got == SILENT:
                self._found(NO_ANSWER, f"{what} before a login: neither refused nor answered")
            elif got != CLOSED:
                self._found(WRONG_ANSWER, f"{what} before a login was read (limit {SASL_MAX_RECEIVE_BYTES})")
            self.note = "closed: frame too large before a login"
            self._close()
        if content == "api-versions":
            expired = expected.expired(time.monotonic())
            answer = self._send_payload(request, payload)
            if expired is False:
                self._answered(answer, what)
            else:
                self._answered_or_closed(answer, what)
            return
        self._authenticate_payload(request, payload, what)

    def _sized(self, build: Any, size: int) -> tuple[Any, bytes]:
        """A request built by ``build(k)`` whose frame (without its size prefix) is ``size`` bytes."""
        k = max(0, size - 64)
        for _ in range(4):
            request = build(k)
            payload = self.wire.frame(request)[4:]
            if len(payload) == size:
                break
            k = max(0, k + size - len(payload))
        return request, payload

    def _send_payload(self, request: Any, payload: bytes) -> Answer:
        correlation = int.from_bytes(payload[4:8], "big")
        try:
            self.wire.sock.sendall(len(payload).to_bytes(4, "big") + payload)
        except OSError:
            return Answer(None, CLOSED)
        got = self.wire.receive(STEP_TIMEOUT_S)
        if isinstance(got, str):
            return Answer(None, got)
        return decode_response(request.API_KEY, request.API_VERSION, got, correlation)

    def _authenticate_payload(self, request: Any, payload: bytes, what: str) -> None:
        """A large SaslAuthenticate (its token far above 4096 bytes) sent as it is."""
        expected = self.expected
        answer = self._send_payload(request, payload)
        if expected.stage == AUTHENTICATE:
            if answer.response is not None and int(answer.response.error_code) == error_codes.NONE:
                self._found(AUTH_BYPASS, f"{what}: a login message above {MAX_MESSAGE} bytes was taken")
                raise _Stop()
            self._finish_login(answer, MUST_NOT, None, str(expected.pending), 2, time.monotonic(), what)
            return
        if answer.response is None:
            self._no_answer(answer, what)
        if int(answer.response.error_code) == error_codes.NONE:
            self._found(AUTH_BYPASS, f"{what}: answered without error while {expected.stage}")
            raise _Stop()
        closes = True if expected.sasl and expected.stage == HANDSHAKE else None
        self._refused(answer, {ILLEGAL_STATE}, what, closes=closes)

    def _wait(self, _step: dict[str, Any]) -> None:
        """Until the session's lifetime is over (a moment when there is none)."""
        expected = self.expected
        if expected.sasl and expected.stage == LOGGED_IN:
            until = expected.login_answered + expected.lifetime_s + EXPIRY_MARGIN_S + 0.05
            time.sleep(max(0.0, until - time.monotonic()))
            self.note = "the session's lifetime passed"
        else:
            time.sleep(0.05)

    # ------------------------------------------------------------------ judging
    def _exchange(self, request: Any) -> Answer:
        try:
            answer = self.wire.exchange(request, STEP_TIMEOUT_S)
        except OSError:
            return Answer(None, CLOSED)
        if answer.response is not None:
            self.expected.may_be_closed = False  # an answer: the connection is open after all
        return answer

    def _found(self, kind: str, detail: str) -> None:
        self.anomalies.append(Anomaly(kind, detail))

    def _close(self) -> None:
        self.expected.stage = CLOSED_STAGE
        self.wire.close()
        raise _Stop()

    def _no_answer(self, answer: Answer, what: str) -> None:
        """No response where one is due (a refusal's, at least): the case ends."""
        if answer.problem == CLOSED and self.expected.may_be_closed:
            self.note = "closed after an earlier refusal"
        elif answer.problem == CLOSED:
            self._found(UNEXPECTED_ERROR, f"{what}: the connection closed without an answer")
        elif answer.problem == SILENT:
            self._found(NO_ANSWER, f"{what}: no answer in time")
        else:
            self._found(WRONG_ANSWER, f"{what}: {answer.problem}")
        self._close()

    def _refused(self, answer: Answer, codes: set[int], what: str, closes: bool | None) -> None:
        """A refusal: its code one of ``codes``; then the connection must close (``closes``), or
        may (None: the case goes on while it is open)."""
        assert answer.response is not None
        code = int(answer.response.error_code)
        self.anomalies.extend(ops.check_code(what, code, codes))
        self.note = f"refused ({ops.NAMES.get(code, code)})"
        if closes is None:
            self.expected.may_be_closed = True
            return
        if not self.wire.closed_by_broker(CLOSE_TIMEOUT_S):
            self._found(WRONG_ANSWER, f"{what}: refused ({ops.code_name(code)}), but the connection stayed open")
        self._close()
