"""The client's side of the SASL logins the Kafka fuzzer sends (``kafka-login`` cases,
:mod:`sparklog.fuzz.kafka_login`), and what its oracle needs to read them back.

SCRAM-SHA-256 is computed here rather than by scramp, so that a case can send what a well-behaved
client never would and still be consistent where it means to be: a gs2 header with an
authorization id or a channel-binding flag, extensions, a nonce of any length, a client-final whose
nonce, channel binding or proof is wrong while the rest is right. PLAIN messages are built as they
are (``authzid NUL user NUL password``). :func:`mutate` flips, cuts or extends any of them.

The fuzz users (:data:`USERS`) live in the fuzz cluster's ZooKeeper with random passwords
(:class:`~sparklog.fuzz.cluster.FuzzCluster`); ``fz-long``'s password makes its PLAIN message
exactly :data:`~sparklog.security.sasl_exchange.MAX_MESSAGE` bytes, the largest login message the
broker reads.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import hashlib
import hmac
import secrets
import string

import numpy as np
import scramp
from scramp import utils as scramp_utils

from sparklog.security.sasl_exchange import MAX_MESSAGE, PLAIN

SCRAM = "SCRAM-SHA-256"
MECHANISMS = (SCRAM, PLAIN)  # what the fuzz cluster's SASL listeners enable
FUZZ_USER = "fz-user"
OTHER_USER = "fz-other"
LONG_USER = "fz-long"
USERS = (FUZZ_USER, OTHER_USER, LONG_USER)
MAX_ITERATIONS = 100_000  # a server-first asking for more is not followed (the fuzzer would stall)
NONCE_ALPHABET = string.ascii_letters + string.digits + "+/"


def new_passwords() -> dict[str, str]:
    """Random passwords of the fuzz users; ``fz-long``'s makes its PLAIN message exactly
    ``MAX_MESSAGE`` bytes."""
    long_size = MAX_MESSAGE - len(plain_message(LONG_USER, ""))
    return {
        FUZZ_USER: secrets.token_urlsafe(12),
        OTHER_USER: secrets.token_urlsafe(12),
        LONG_USER: secrets.token_urlsafe(long_size)[:long_size],
    }


def plain_message(user: str, password: str, authzid: str = "") -> bytes:
    """PLAIN's one message (RFC 4616)."""
    return f"{authzid}\0{user}\0{password}".encode()


def saslname(user: str) -> str:
    """A user name as SCRAM writes it in ``n=`` (``=`` and ``,`` escaped)."""
    return user.replace("=", "=3D").replace(",", "=2C")


def normalized(password: str) -> bytes:
    """SCRAM's ``Normalize(password)`` (SASLprep); a password SASLprep refuses as its UTF-8 bytes
    (such a login is wrong anyway: no credential was made from it)."""
    try:
        return scramp_utils.saslprep(password).encode()
    except scramp.ScramException:
        return password.encode(errors="replace")


def same_password(given: str, real: str) -> bool:
    """Whether a login with ``given`` matches a credential made from ``real`` (both SASLprepped,
    as the broker compares them)."""
    try:
        return scramp_utils.saslprep(given) == scramp_utils.saslprep(real)
    except scramp.ScramException:
        return False


def nonce(rng: np.random.Generator, size: int = 24) -> str:
    """A client nonce of ``size`` printable characters (no comma)."""
    picks = rng.integers(0, len(NONCE_ALPHABET), size)
    return "".join(NONCE_ALPHABET[int(i)] for i in picks)


def attributes(message: str) -> list[tuple[str, str]] | None:
    """A SCRAM message's ``k=v`` attributes in order (None: not of that shape)."""
    found = []
    for part in message.split(","):
        if len(part) < 2 or part[1] != "=":
            return None
        found.append((part[0], part[2:]))
    return found


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def _b64decoded(text: str) -> bytes | None:
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        return None


@dataclasses.dataclass(frozen=True)
class ServerFirst:
    """The broker's SCRAM server-first message, read."""

    nonce: str
    salt: bytes
    iterations: int

    @classmethod
    def parse(cls, message: str) -> ServerFirst | None:
        found = attributes(message)
        if found is None or [k for k, _ in found[:3]] != ["r", "s", "i"]:
            return None
        values = dict(found)
        salt = _b64decoded(values["s"])
        if salt is None or not values["i"].isdigit():
            return None
        return cls(values["r"], salt, int(values["i"]))


@dataclasses.dataclass
class ScramLogin:
    """The client's side of one SCRAM-SHA-256 login: :meth:`first`, then :meth:`final` on the
    broker's server-first, then :meth:`verify` its server-final (the broker's proof)."""

    user: str
    password: str
    client_nonce: str
    gs2: str = "n,,"
    extensions: str = ""  # appended to the client-first-bare: ",k=v..."
    server_signature: bytes | None = None

    @property
    def bare(self) -> str:
        return f"n={saslname(self.user)},r={self.client_nonce}{self.extensions}"

    def first(self) -> bytes:
        return (self.gs2 + self.bare).encode()

    def final(
        self,
        server_first: str,
        nonce: str | None = None,
        cbind: bytes | None = None,
        extensions: str = "",
    ) -> bytes | None:
        """The client-final answering ``server_first`` (None: it cannot be read, or asks for more
        than :data:`MAX_ITERATIONS`): ``nonce``, ``cbind`` (the channel binding's bytes) and
        ``extensions`` replace or add to what a correct client sends, the proof computed over
        them all."""
        parsed = ServerFirst.parse(server_first)
        if parsed is None or not 0 < parsed.iterations <= MAX_ITERATIONS:
            return None
        without_proof = f"c={_b64(cbind if cbind is not None else self.gs2.encode())},r={nonce or parsed.nonce}"
        without_proof += extensions
        auth = f"{self.bare},{server_first},{without_proof}".encode()
        salted = hashlib.pbkdf2_hmac("sha256", normalized(self.password), parsed.salt, parsed.iterations)
        client_key = hmac.digest(salted, b"Client Key", "sha256")
        stored_key = hashlib.sha256(client_key).digest()
        proof = bytes(a ^ b for a, b in zip(client_key, hmac.digest(stored_key, auth, "sha256"), strict=True))
        self.server_signature = hmac.digest(hmac.digest(salted, b"Server Key", "sha256"), auth, "sha256")
        return f"{without_proof},p={_b64(proof)}".encode()

    def verify(self, server_final: bytes) -> bool:
        """Whether the broker's server-final proves it knows the user's credential."""
        found = attributes(server_final.decode(errors="replace"))
        if not found or found[0][0] != "v" or self.server_signature is None:
            return False
        return _b64decoded(found[0][1]) == self.server_signature


def same_final(sent: bytes, meant: bytes) -> bool:
    """Whether a mutated client-final still says what ``meant`` says, read as the broker reads it
    (each attribute in order; base64 values by the bytes they decode to, trailing bits ignored)."""
    a, b = attributes(sent.decode(errors="replace")), attributes(meant.decode(errors="replace"))
    if a is None or b is None or [k for k, _ in a] != [k for k, _ in b]:
        return False
    for (key, x), (_, y) in zip(a, b, strict=True):
        if key in ("c", "p"):
            dx, dy = _b64decoded(x), _b64decoded(y)
            if dx is None or dx != dy:
                return False
        elif x != y:
            return False
    return True


def plain_login(message: bytes, passwords: dict[str, str]) -> str | None:
    """The user a PLAIN message logs in (None: it must be refused), read as RFC 4616 says: at
    most ``MAX_MESSAGE`` bytes, three NUL-separated fields, a user in ``passwords`` acting for no
    one else and its password (SASLprepped)."""
    if len(message) > MAX_MESSAGE:
        return None
    parts = message.split(b"\0")
    if len(parts) != 3:
        return None
    authzid, user, password = (part.decode(errors="replace") for part in parts)
    if not user or (authzid and authzid != user) or user not in passwords:
        return None
    return user if same_password(password, passwords[user]) else None


def mutate(data: bytes, op: str, rng: np.random.Generator, n: int = 1, keep: float = 0.5) -> bytes:
    """``data`` with ``n`` bits flipped (``flip``), cut to a ``keep`` fraction (``cut``) or ``n``
    random bytes appended (``extend``)."""
    if op == "flip" and data:
        out = bytearray(data)
        for _ in range(max(1, n)):
            at = int(rng.integers(0, len(out)))
            out[at] ^= 1 << int(rng.integers(0, 8))
        return bytes(out)
    if op == "cut":
        return data[: int(len(data) * keep)]
    if op == "extend":
        return data + rng.integers(0, 256, max(1, n), dtype=np.uint8).tobytes()
    return data
