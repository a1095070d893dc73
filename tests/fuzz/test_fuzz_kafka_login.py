"""Logins on the Kafka listeners under fuzzing (``kafka-login`` cases, :mod:`sparklog.fuzz.kafka_login`).

- ``test_a_hostile_login_sequence``: each hostile sequence written as a case (wrong passwords,
  unknown users, mechanisms not enabled, SaslAuthenticate before a handshake, a handshake in the
  middle, mutated and replayed SCRAM messages, messages around 4096 bytes, frames around 512 KiB,
  requests before a login, after a refused one and after the session's lifetime, a second login as
  another user or mechanism, the PLAINTEXT listener's refusals), applied to one live broker: no
  anomaly, each step came out as Kafka's rules say (its note in the case's detail), and the
  listeners log in and answer afterwards.
- ``test_kafka_login_profile``: hypothesis-drawn login cases with a fixed seed against a fresh
  cluster: no invariant failure, no finding, every listener healthy after each case.
- The oracle's own pieces (SCRAM computed by the fuzzer, PLAIN read as RFC 4616 says, mutated
  messages that still say the same) without a cluster.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pytest
import scramp

from sparklog.fuzz.cases import Case
from sparklog.fuzz.cluster import FuzzCluster
from sparklog.fuzz.kafka_apply import KafkaApplier
from sparklog.fuzz.kafka_cases import KAFKA_LOGIN, PLAINTEXT_LISTENER, SASL_LISTENER
from sparklog.fuzz.kafka_sasl import (
    FUZZ_USER,
    LONG_USER,
    OTHER_USER,
    PLAIN,
    SCRAM,
    ScramLogin,
    mutate,
    plain_login,
    plain_message,
    same_final,
)
from sparklog.fuzz.ledger import Ledger
from sparklog.fuzz.runner import FuzzConfig, run_fuzz
from sparklog.kafka.listener_security import SASL_MAX_RECEIVE_BYTES
from sparklog.security.sasl_exchange import MAX_MESSAGE

if TYPE_CHECKING:
    from sparklog.coordination.zookeeper_server import EmbeddedZooKeeper

LOGIN_SEED = 21
LOGIN_CASES = 150
OK = f"logged in as {FUZZ_USER!r}"
AUTH_FAILED = "refused (SaslAuthenticationFailedError)"
ILLEGAL = "refused (IllegalSaslStateError)"
UNSUPPORTED = "refused (UnsupportedSaslMechanismError)"
CLOSED_REST = "step(s) not sent, the connection is closed"


def login(mechanism: str = SCRAM, user: str = FUZZ_USER, password: str = "right", **more: Any) -> dict[str, Any]:
    return {"op": "login", "mechanism": mechanism, "user": user, "password": password, "version": 2} | more


def scram(target: str, op: str, **more: Any) -> dict[str, Any]:
    return login(mutation={"target": target, "op": op, **more})


def request(api: str, topic: str = "fz-plain", partition: int = 0) -> dict[str, Any]:
    return {"op": "request", "api": api, "topic": topic, "partition": partition}


def authenticate(token: str, n: int = 16, version: int = 2) -> dict[str, Any]:
    return {"op": "authenticate", "token": token, "n": n, "version": version, "seed": 3}


def handshake(mechanism: str, version: int = 1) -> dict[str, Any]:
    return {"op": "handshake", "mechanism": mechanism, "version": version}


def frame(size: int, content: str) -> dict[str, Any]:
    return {"op": "frame", "size": size, "content": content}


WAIT = {"op": "wait"}
KIB512 = SASL_MAX_RECEIVE_BYTES

# (name, listener, steps, each step's note in order)
SEQUENCES: list[tuple[str, str, list[dict[str, Any]], list[str]]] = [
    ("scram", SASL_LISTENER, [login(), request("metadata"), request("fetch")], [OK, "answered", "answered"]),
    ("plain", SASL_LISTENER, [login(PLAIN), request("list-offsets")], [OK, "answered"]),
    ("long-plain-4096", SASL_LISTENER, [login(PLAIN, LONG_USER)], [f"logged in as {LONG_USER!r}"]),
    (
        "wrong-password",
        SASL_LISTENER,
        [login(password="wrong"), request("metadata")],
        [AUTH_FAILED, f"1 {CLOSED_REST}"],
    ),
    ("unknown-user-scram", SASL_LISTENER, [login(user="fz-nobody")], [AUTH_FAILED]),
    ("unknown-user-plain", SASL_LISTENER, [login(PLAIN, "fz-nobody")], [AUTH_FAILED]),
    ("wrong-password-plain", SASL_LISTENER, [login(PLAIN, password="prefix")], [AUTH_FAILED]),
    ("control-password-plain", SASL_LISTENER, [login(PLAIN, password="control")], [AUTH_FAILED]),
    ("saslprep-password-plain", SASL_LISTENER, [login(PLAIN, password="saslprep")], [OK]),
    ("saslprep-password-scram", SASL_LISTENER, [login(password="saslprep")], [OK]),
    ("mechanism-not-enabled", SASL_LISTENER, [login("SCRAM-SHA-512")], [UNSUPPORTED]),
    (
        "mechanism-garbage",
        SASL_LISTENER,
        [handshake("M" * 300), request("metadata")],
        [UNSUPPORTED, f"1 {CLOSED_REST}"],
    ),
    ("authenticate-first", SASL_LISTENER, [authenticate("plain-right"), login()], [ILLEGAL, f"1 {CLOSED_REST}"]),
    ("handshake-mid-login", SASL_LISTENER, [login(interrupt="handshake")], [ILLEGAL]),
    ("api-versions-mid-login", SASL_LISTENER, [login(interrupt="api-versions")], [OK]),
    ("metadata-behind-login", SASL_LISTENER, [login(PLAIN, pipeline=True)], [f"{OK}, Metadata behind it answered"]),
    (
        "metadata-behind-refused-login",
        SASL_LISTENER,
        [login(password="wrong", pipeline=True)],
        ["refused (SaslAuthenticationFailedError), Metadata behind it closed"],
    ),
    (
        "metadata-behind-refused-plain",
        SASL_LISTENER,
        [login(PLAIN, "fz-nobody", pipeline=True)],
        ["refused (SaslAuthenticationFailedError), Metadata behind it closed"],
    ),
    ("metadata-mid-login", SASL_LISTENER, [login(interrupt="metadata")], ["closed: metadata while authenticate"]),
    ("first-flipped", SASL_LISTENER, [scram("first", "flip", n=3)], [AUTH_FAILED]),
    ("first-cut", SASL_LISTENER, [scram("first", "cut", keep=0.5)], [AUTH_FAILED]),
    ("first-channel-binding", SASL_LISTENER, [scram("first", "cbind-p")], [AUTH_FAILED]),
    ("first-other-authzid", SASL_LISTENER, [scram("first", "authzid-other")], [AUTH_FAILED]),
    ("first-mandatory-extension", SASL_LISTENER, [scram("first", "mext")], [AUTH_FAILED]),
    ("first-extension", SASL_LISTENER, [scram("first", "extension")], [OK]),
    ("final-cut", SASL_LISTENER, [scram("final", "cut", keep=0.9)], [AUTH_FAILED]),
    ("final-extended", SASL_LISTENER, [scram("final", "extend", n=5)], [AUTH_FAILED]),
    ("final-flipped", SASL_LISTENER, [scram("final", "flip", n=1)], [AUTH_FAILED]),
    ("final-wrong-nonce", SASL_LISTENER, [scram("final", "nonce", how="flip-server")], [AUTH_FAILED]),
    ("final-client-nonce", SASL_LISTENER, [scram("final", "nonce", how="cut-server")], [AUTH_FAILED]),
    ("final-channel-binding", SASL_LISTENER, [scram("final", "cbind", how="y")], [AUTH_FAILED]),
    ("final-zero-proof", SASL_LISTENER, [scram("final", "proof", how="zeros")], [AUTH_FAILED]),
    ("final-other-password", SASL_LISTENER, [scram("final", "proof", how="other-password")], [AUTH_FAILED]),
    ("final-reordered", SASL_LISTENER, [scram("final", "order")], [AUTH_FAILED]),
    ("final-replayed", SASL_LISTENER, [scram("final", "replay-final")], [AUTH_FAILED]),
    ("login-replayed", SASL_LISTENER, [scram("final", "replay-both")], [AUTH_FAILED]),
    ("first-4096", SASL_LISTENER, [scram("first", "size", n=MAX_MESSAGE, via="extension")], [OK]),
    ("first-4097", SASL_LISTENER, [scram("first", "size", n=MAX_MESSAGE + 1, via="extension")], [AUTH_FAILED]),
    ("nonce-4096", SASL_LISTENER, [scram("first", "size", n=MAX_MESSAGE, via="nonce")], [AUTH_FAILED]),
    (
        "plain-4097",
        SASL_LISTENER,
        [login(PLAIN, LONG_USER, mutation={"target": "plain", "op": "authzid-self"})],
        [AUTH_FAILED],
    ),
    (
        "frame-over-512k-before-login",
        SASL_LISTENER,
        [frame(KIB512 + 1, "api-versions")],
        ["closed: frame too large before a login"],
    ),
    ("frame-512k-before-login", SASL_LISTENER, [frame(KIB512, "api-versions"), login()], ["answered", OK]),
    ("frame-600k-after-login", SASL_LISTENER, [login(), frame(600 * 1024, "api-versions")], [OK, "answered"]),
    ("token-512k-before-handshake", SASL_LISTENER, [frame(KIB512 - 100, "sasl-authenticate")], [ILLEGAL]),
    (
        "token-512k-in-login",
        SASL_LISTENER,
        [handshake(SCRAM), frame(KIB512, "sasl-authenticate")],
        ["authenticate", AUTH_FAILED],
    ),
    ("create-before-login", SASL_LISTENER, [request("metadata-create")], ["closed: metadata-create while handshake"]),
    ("produce-before-login", SASL_LISTENER, [request("produce")], ["closed: produce while handshake"]),
    ("init-pid-before-login", SASL_LISTENER, [request("init-pid")], ["closed: init-pid while handshake"]),
    (
        "fetch-mid-login",
        SASL_LISTENER,
        [handshake(PLAIN), request("fetch")],
        ["authenticate", "closed: fetch while authenticate"],
    ),
    ("api-versions-before-login", SASL_LISTENER, [request("api-versions"), login()], ["answered", OK]),
    ("second-login-other-user", SASL_LISTENER, [login(), login(user=OTHER_USER)], [OK, AUTH_FAILED]),
    ("second-login-other-mechanism", SASL_LISTENER, [login(), login(PLAIN)], [OK, ILLEGAL]),
    ("second-login-same", SASL_LISTENER, [login(PLAIN), login(PLAIN), request("metadata")], [OK, OK, "answered"]),
    (
        "authenticate-after-login",
        SASL_LISTENER,
        [login(), authenticate("random"), request("metadata")],
        [OK, ILLEGAL, "closed after an earlier refusal"],
    ),
    ("unserved-handshake", SASL_LISTENER, [handshake(SCRAM, version=0)], ["closed: unserved version"]),
    ("unserved-authenticate", SASL_LISTENER, [authenticate("empty", version=3)], ["closed: unserved version"]),
    (
        "after-lifetime",
        SASL_LISTENER,
        [login(), WAIT, request("metadata")],
        [OK, "the session's lifetime passed", "closed: metadata after the session's lifetime"],
    ),
    (
        "login-again-after-lifetime",
        SASL_LISTENER,
        [login(PLAIN), WAIT, login(PLAIN), request("fetch")],
        [OK, "the session's lifetime passed", OK, "answered"],
    ),
    (
        "plaintext-handshake",
        PLAINTEXT_LISTENER,
        [handshake(SCRAM), request("metadata")],
        [ILLEGAL, "closed after an earlier refusal"],
    ),
    ("plaintext-login", PLAINTEXT_LISTENER, [login(PLAIN)], ["handshake refused"]),
    ("plaintext-authenticate", PLAINTEXT_LISTENER, [authenticate("plain-right")], [ILLEGAL]),
    (
        "plaintext-large-frame",
        PLAINTEXT_LISTENER,
        [frame(600 * 1024, "api-versions"), request("fetch")],
        ["answered", "answered"],
    ),
]


@pytest.fixture(scope="module")
def applier(zookeeper: EmbeddedZooKeeper, tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaApplier]:
    cluster = FuzzCluster(tmp_path_factory.mktemp("kafka-login"), zookeeper=zookeeper.connect_string, kafka=True)
    cluster.start()
    try:
        yield KafkaApplier(cluster, Ledger())
    finally:
        problems = cluster.stop()
        assert not problems, problems


@pytest.mark.slow
@pytest.mark.parametrize(("listener", "steps", "notes"), [s[1:] for s in SEQUENCES], ids=[s[0] for s in SEQUENCES])
def test_a_hostile_login_sequence(
    applier: KafkaApplier, listener: str, steps: list[dict[str, Any]], notes: list[str]
) -> None:
    case = Case(KAFKA_LOGIN, {"listener": listener, "broker": 0, "seed": 7, "steps": steps}, index=0)
    outcome = applier.apply(case)
    assert [a.headline() for a in outcome.anomalies] == [], outcome.detail
    assert [line.split(": ", 1)[-1] for line in outcome.detail["steps"]] == notes
    silent, findings = applier.health()
    assert not silent and not findings, [f.headline() for f in findings]


@pytest.mark.slow
def test_unknown_users_are_refused_as_wrong_passwords_are(applier: KafkaApplier) -> None:
    """The applier compares the refusals it saw: the same message, whichever the reason."""
    for mechanism in (SCRAM, PLAIN):
        for steps in (
            [login(mechanism, password="wrong")],
            [login(mechanism, "fz-nobody")],
            [login(mechanism, "ü-user")],
        ):
            outcome = applier.apply(Case(KAFKA_LOGIN, {"listener": SASL_LISTENER, "seed": 1, "steps": steps}))
            assert not outcome.anomalies, [a.headline() for a in outcome.anomalies]
        assert {(m, exists) for m, exists in applier.login.refusals if m == mechanism} == {
            (mechanism, True),
            (mechanism, False),
        }


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_kafka_login_profile(zookeeper: EmbeddedZooKeeper, tmp_path: Path) -> None:
    log = tmp_path / "cases.jsonl"
    config = FuzzConfig(
        seed=LOGIN_SEED,
        cases=LOGIN_CASES,
        check_every=25,
        full_every=LOGIN_CASES,
        work_dir=tmp_path / "run",
        zookeeper=zookeeper.connect_string,
        log_path=log,
        kafka=True,
        kafka_kinds=(KAFKA_LOGIN,),
        restarts_at_end=False,
    )
    report = run_fuzz(config)
    (tmp_path / "report.json").write_text(json.dumps(report.to_json(), default=repr, indent=1))
    assert report.cases == LOGIN_CASES and set(report.by_kind) == {KAFKA_LOGIN}, report.summary()
    assert not report.outcomes.get("fuzzer-error"), f"the fuzzer failed on some cases (cases: {log})"
    assert report.ok and not report.findings, f"{report.summary()}\n(cases: {log})"
    assert report.outcomes.get("login:logged-in", 0) > 0 and report.outcomes.get("login:closed", 0) > 0


# ----------------------------------------------------------------------------------------- the oracle's pieces
def test_the_fuzzers_scram_logs_in_where_scramp_serves_it() -> None:
    mechanism = scramp.ScramMechanism(SCRAM)
    info = mechanism.make_auth_info("secret", iteration_count=4096)
    rng = np.random.default_rng(1)
    for gs2, extensions in (("n,,", ""), ("y,,", ""), ("n,,", ",x=pad")):
        server = mechanism.make_server(lambda _user: info)
        client = ScramLogin("fz-user", "secret", "c" * 24, gs2, extensions)
        server.set_client_first(client.first().decode())
        final = client.final(server.get_server_first())
        assert final is not None
        server.set_client_final(final.decode())
        assert client.verify(server.get_server_final().encode())
        assert same_final(final, final) and not same_final(mutate(final, "cut", rng, keep=0.9), final)


def test_plain_messages_are_read_as_rfc_4616_says() -> None:
    passwords = {"fz-user": "secret"}
    assert plain_login(plain_message("fz-user", "secret"), passwords) == "fz-user"
    assert plain_login(plain_message("fz-user", "secret", authzid="fz-user"), passwords) == "fz-user"
    assert plain_login(plain_message("fz-user", "secret", authzid="admin"), passwords) is None
    assert plain_login(plain_message("fz-user", "se\u00adcret"), passwords) == "fz-user"  # SASLprep
    assert plain_login(plain_message("fz-user", "\x07secret"), passwords) is None
    assert plain_login(plain_message("fz-user", "secret") + b"\0", passwords) is None
    assert plain_login(b"\0fz-user\0" + b"s" * MAX_MESSAGE, {"fz-user": "s" * MAX_MESSAGE}) is None
