"""SCRAM credentials made from a salted password (what a client sends, as Kafka's
AlterUserScramCredentials): the same keys scramp derives from the password itself, and a store that
checks what it is given before it writes anything."""

from __future__ import annotations

import pytest
import scramp
from kazoo.client import KazooClient

from sparklog.coordination.zk_layout import ZkLayout
from sparklog.errors import AuthenticationFailed, InvalidUserName, UnacceptableCredential
from sparklog.security.credential_store import MAX_ITERATIONS, MIN_ITERATIONS, CredentialStore
from sparklog.security.credentials import SCRAM_SHA_256, ScramCredential, new_salt, salted_password
from sparklog.security.sasl_exchange import PLAIN, REFUSED, Decoys, SaslExchange

LAYOUT = ZkLayout("/sparklog")


@pytest.mark.parametrize("password", ["alice-secret", "p\u00e4ss w\u00f6rd", "\u2168 (SASLprep maps it)"])
def test_a_credential_from_the_salted_password_is_scramps_credential_from_the_password(password: str) -> None:
    salt = new_salt()
    reference = scramp.ScramMechanism(SCRAM_SHA_256).make_auth_info(password, iteration_count=4096, salt=salt)
    made = ScramCredential.from_salted_password(salt, salted_password(password, salt, 4096), 4096)
    assert (made.salt, made.stored_key, made.server_key, made.iterations) == reference
    assert made.matches(password) and not made.matches(password + "x")
    created = ScramCredential.create(password, 4096)
    assert created.matches(password) and created.salt != salt  # a new salt every time


def test_a_plain_login_with_a_password_saslprep_refuses_is_refused_like_any_wrong_one() -> None:
    """Found by ``sparklog fuzz --kafka`` (kafka-login): such a password raised scramp's error out of
    the PLAIN check, and the Kafka listener closed the connection without its
    SASL_AUTHENTICATION_FAILED answer (the Flight handshake logged it as an unexpected failure and
    refused with another message than a wrong password's)."""
    credential = ScramCredential.create("alice-secret", 4096)
    assert not credential.matches("\x07alice-secret") and not credential.matches("\u0627\u0031")
    lookup = lambda user: (credential, 1) if user == "alice" else None  # noqa: E731
    for user in ("alice", "nobody"):  # a real user and an unknown one (a decoy credential) alike
        exchange = SaslExchange(PLAIN, lookup, Decoys(b"cluster secret"))
        with pytest.raises(AuthenticationFailed) as refused:
            exchange.step(f"\0{user}\0\x07alice-secret".encode())
        assert str(refused.value) == REFUSED


def test_passwords_scram_cannot_take_are_refused() -> None:
    with pytest.raises(UnacceptableCredential, match="must not be empty"):
        salted_password("", new_salt(), 4096)
    with pytest.raises(UnacceptableCredential, match="cannot be used with SCRAM"):
        salted_password("bad\u0007control", new_salt(), 4096)


def test_the_store_checks_a_salted_credential_before_writing(zk_client: KazooClient) -> None:
    store = CredentialStore(zk_client, LAYOUT)
    salt = new_salt()
    good = salted_password("alice-secret", salt, 4096)
    refused = [
        ("alice", salt, good, MIN_ITERATIONS - 1, "iterations must be from 4096 to 16384"),
        ("alice", salt, good, MAX_ITERATIONS + 1, "iterations must be from 4096 to 16384"),
        ("alice", b"short", good, 4096, "a salt must have 12 to 1024 bytes"),
        ("alice", salt, good[:31], 4096, "salted password has 32 bytes, got 31"),
    ]
    for user, s, salted, iterations, message in refused:
        with pytest.raises(UnacceptableCredential, match=message):
            store.upsert_salted(user, s, salted, iterations)
    with pytest.raises(InvalidUserName):
        store.upsert_salted("../alice", salt, good, 4096)
    assert store.users() == [] and store.iterations() == {}  # nothing was written

    assert store.upsert_salted("alice", salt, good, 4096) is True
    assert store.upsert_salted("alice", salt, good, 4096) is False  # the same user again: changed
    assert store.upsert("bob", "bob-secret", iterations=MAX_ITERATIONS) is True
    found = store.versioned_credential("alice")
    assert found is not None and found[0].matches("alice-secret")
    assert store.iterations() == {"alice": 4096, "bob": MAX_ITERATIONS}
    assert store.iterations(["bob", "carol"]) == {"bob": MAX_ITERATIONS}
