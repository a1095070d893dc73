"""Who a logged-in client is (:class:`Identity`: its principal and the version of the credential
it logged in with), and whether that session still holds (:func:`check_session`): removing a user
or changing its password ends the sessions made with the old credential at once, on every
listener (Flight or Kafka), and a user removed and added again gets none of its old sessions back."""

from __future__ import annotations

import dataclasses
from typing import Protocol

from sparklog.errors import AuthenticationFailed
from sparklog.security.principal import USER_TYPE


@dataclasses.dataclass(frozen=True)
class Identity:
    """Who a SASL call is: the principal and the version of the credential its session began with
    (what ``is_valid`` hands gRPC as the call's peer identity, ``encode``d)."""

    principal: str
    version: int

    def encode(self) -> bytes:
        return f"{self.principal}\n{self.version}".encode()

    @classmethod
    def decode(cls, data: bytes) -> Identity | None:
        """None unless ``data`` is an encoded identity (a certificate's name is not)."""
        principal, sep, version = data.decode(errors="replace").partition("\n")
        if not sep or not version.isdigit():
            return None
        return cls(principal, int(version))

    @property
    def user(self) -> str:
        return self.principal.removeprefix(f"{USER_TYPE}:")


class CredentialVersions(Protocol):
    """The current version of each user's credential (a broker's
    :class:`~sparklog.security.credential_store.CredentialWatch`)."""

    def version(self, user: str) -> int | None:
        """The version of ``user``'s credential as last seen; None if there is no such user."""
        ...

    def refresh(self, user: str) -> int | None:
        """The version read from the store now (when the one seen may be behind)."""
        ...


def check_session(versions: CredentialVersions, identity: Identity) -> None:
    """:class:`AuthenticationFailed` unless ``identity``'s session is still good: its user exists
    and has the credential the session began with (not removed, password not changed since).
    Versions only grow, so a session newer than the version seen means the watch is behind: the
    store is asked then (rare), never for an old session."""
    current = versions.version(identity.user)
    if current is None or current < identity.version:
        current = versions.refresh(identity.user)
    if current is None:
        raise AuthenticationFailed(f"user {identity.user!r} no longer exists; its sessions have ended")
    if current != identity.version:
        raise AuthenticationFailed(
            f"the credential of user {identity.user!r} changed since this session began; log in again"
        )
