"""A user's SCRAM-SHA-256 credential as Kafka keeps it in ZooKeeper: a random salt, an iteration
count, and the stored and server keys derived from the password, never the password itself (RFC
5802, computed with the ``scramp`` package's functions).

As Kafka's AlterUserScramCredentials, the salted password (RFC 5802's ``Hi(password, salt, i)``:
:func:`salted_password`) is computed where the password is typed; a broker derives the keys from it
(:meth:`ScramCredential.from_salted_password`) and never sees the password.
"""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import hmac
import json
import secrets

import scramp
from scramp import utils as scramp_utils

from sparklog.errors import UnacceptableCredential

SCRAM_SHA_256 = "SCRAM-SHA-256"
DEFAULT_ITERATIONS = 8192  # Kafka's minimum is 4096
SALT_BYTES = 32  # a new credential's salt (scramp's default)
_MECHANISM = scramp.ScramMechanism(SCRAM_SHA_256)
_HASH = hashlib.sha256  # SCRAM-SHA-256's hash function


@dataclasses.dataclass(frozen=True)
class ScramCredential:
    """A user's salted, iterated SCRAM-SHA-256 credential."""

    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int

    @classmethod
    def create(cls, password: str, iterations: int = DEFAULT_ITERATIONS) -> ScramCredential:
        """A credential for ``password`` with a new random salt."""
        salt = new_salt()
        return cls.from_salted_password(salt, salted_password(password, salt, iterations), iterations)

    @classmethod
    def from_salted_password(cls, salt: bytes, salted: bytes, iterations: int) -> ScramCredential:
        """The credential whose salted password (:func:`salted_password`) is ``salted``: RFC 5802's
        ``StoredKey = H(HMAC(SaltedPassword, "Client Key"))`` and ``ServerKey =
        HMAC(SaltedPassword, "Server Key")``, computed with scramp's functions. What a broker
        stores from an AlterUserScramCredentials upsertion."""
        client_key = scramp_utils.hmac(_HASH, salted, b"Client Key")
        return cls(salt, scramp_utils.h(_HASH, client_key), scramp_utils.hmac(_HASH, salted, b"Server Key"), iterations)

    def matches(self, password: str) -> bool:
        """Whether ``password`` is the one this credential was made from (PLAIN's check); never
        one SASLprep refuses (control characters, broken bidirectional text), from which no
        credential is made."""
        try:
            _, stored_key, _, _ = _MECHANISM.make_auth_info(password, iteration_count=self.iterations, salt=self.salt)
        except scramp.ScramException:
            return False
        return hmac.compare_digest(stored_key, self.stored_key)

    def to_json(self) -> bytes:
        encode = lambda b: base64.b64encode(b).decode()  # noqa: E731
        return json.dumps(
            {
                "mechanism": SCRAM_SHA_256,
                "salt": encode(self.salt),
                "stored_key": encode(self.stored_key),
                "server_key": encode(self.server_key),
                "iterations": self.iterations,
            }
        ).encode()

    @classmethod
    def from_json(cls, data: bytes) -> ScramCredential:
        raw = json.loads(data)
        return cls(
            base64.b64decode(raw["salt"]),
            base64.b64decode(raw["stored_key"]),
            base64.b64decode(raw["server_key"]),
            int(raw["iterations"]),
        )


def new_salt() -> bytes:
    """A random salt for a new credential."""
    return secrets.token_bytes(SALT_BYTES)


def salted_password(password: str, salt: bytes, iterations: int) -> bytes:
    """RFC 5802's ``SaltedPassword = Hi(Normalize(password), salt, i)`` for SCRAM-SHA-256 (SASLprep
    and PBKDF2-HMAC-SHA-256, computed by scramp as its own ``make_auth_info`` does): what a client
    sends to set a user's password (Kafka's AlterUserScramCredentials), so the password itself
    never leaves it. :class:`UnacceptableCredential` for a password SASLprep refuses."""
    try:
        normalized = scramp_utils.saslprep(password)
    except scramp.ScramException as exc:
        raise UnacceptableCredential(f"the password cannot be used with SCRAM: {exc}") from None
    if not normalized:
        raise UnacceptableCredential("the password must not be empty")
    return scramp_utils.hi(_HASH, scramp_utils.uenc(normalized), salt, iterations)
