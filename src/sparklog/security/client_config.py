"""How a client proves who it is and trusts the broker: the settings Python Kafka users know from
confluent-kafka / librdkafka, given as a dict (``config={...}``), a properties file
(``--command-config``) or Spark options (``kafka.``-prefixed names accepted).

- ``security.protocol``: ``PLAINTEXT`` (default), ``SSL``, ``SASL_PLAINTEXT``, ``SASL_SSL``
- ``ssl.ca.location``: the CA certificate(s) (PEM) that sign the brokers' certificates (default:
  the system's roots)
- ``ssl.certificate.location``, ``ssl.key.location``: the client's certificate and key (PEM) for
  brokers that ask for mutual TLS
- ``sasl.mechanism``: ``SCRAM-SHA-256`` (default) or ``PLAIN``; ``sasl.username``, ``sasl.password``

The password is kept out of ``repr`` and every error message.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from sparklog.errors import InvalidConfig

PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
MECHANISMS = ("SCRAM-SHA-256", "PLAIN")
KEYS = (
    "security.protocol",
    "ssl.ca.location",
    "ssl.certificate.location",
    "ssl.key.location",
    "sasl.mechanism",
    "sasl.username",
    "sasl.password",
)
SPARK_PREFIX = "kafka."


def load_properties(path: str | Path) -> dict[str, str]:
    """A Java-style properties file (``key=value`` or ``key: value`` lines, ``#`` and ``!``
    comments), as Kafka's tools take with ``--command-config``."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise InvalidConfig(f"cannot read the properties file {str(path)!r}: {exc.strerror or exc}") from None
    properties: dict[str, str] = {}
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line[0] in "#!":
            continue
        cut = min((i for i in (line.find("="), line.find(":")) if i >= 0), default=-1)
        if cut <= 0:
            raise InvalidConfig(f"{path}, line {number}: expected 'key=value'")
        properties[line[:cut].strip()] = line[cut + 1 :].strip()
    return properties


def _read_pem(setting: str, location: str | None) -> bytes | None:
    if location is None:
        return None
    try:
        return Path(location).read_bytes()
    except OSError as exc:
        raise InvalidConfig(f"{setting}: cannot read {location!r}: {exc.strerror or exc}") from None


@dataclasses.dataclass(frozen=True)
class ClientSecurity:
    """A client's security settings (see the module's docstring)."""

    protocol: str = "PLAINTEXT"
    ca_location: str | None = None
    certificate_location: str | None = None
    key_location: str | None = None
    mechanism: str = "SCRAM-SHA-256"
    username: str | None = None
    password: str | None = dataclasses.field(default=None, repr=False)

    @classmethod
    def from_config(cls, config: Mapping[str, Any] | None) -> ClientSecurity:
        """The security settings among ``config`` (other keys are left to their owners; a key may
        carry Spark's ``kafka.`` prefix), checked: a clear :class:`InvalidConfig` names what is wrong."""
        values: dict[str, str] = {}
        for key, value in (config or {}).items():
            name = key[len(SPARK_PREFIX) :] if key.startswith(SPARK_PREFIX) else key
            if name in KEYS and value is not None:
                values[name] = str(value)
        protocol = values.get("security.protocol", "PLAINTEXT").upper()
        if protocol not in PROTOCOLS:
            raise InvalidConfig(f"security.protocol {protocol!r:.40} is not one of {', '.join(PROTOCOLS)}")
        mechanism = values.get("sasl.mechanism", "SCRAM-SHA-256").upper()
        if mechanism not in MECHANISMS:
            raise InvalidConfig(f"sasl.mechanism {mechanism!r:.40} is not one of {', '.join(MECHANISMS)}")
        security = cls(
            protocol,
            values.get("ssl.ca.location"),
            values.get("ssl.certificate.location"),
            values.get("ssl.key.location"),
            mechanism,
            values.get("sasl.username"),
            values.get("sasl.password"),
        )
        if security.sasl and (not security.username or security.password is None):
            raise InvalidConfig(f"security.protocol {protocol} needs sasl.username and sasl.password")
        if (security.certificate_location is None) != (security.key_location is None):
            raise InvalidConfig("ssl.certificate.location and ssl.key.location go together: give both or neither")
        return security

    @property
    def tls(self) -> bool:
        return self.protocol in ("SSL", "SASL_SSL")

    @property
    def sasl(self) -> bool:
        return self.protocol in ("SASL_PLAINTEXT", "SASL_SSL")

    @property
    def scheme(self) -> str:
        return "grpc+tls" if self.tls else "grpc+tcp"

    def location(self, host: str, port: int) -> str:
        return f"{self.scheme}://{host}:{port}"

    def tls_options(self) -> dict[str, bytes]:
        """The TLS arguments of ``pyarrow.flight.FlightClient`` (empty for plaintext)."""
        if not self.tls:
            return {}
        options: dict[str, bytes] = {}
        ca = _read_pem("ssl.ca.location", self.ca_location)
        if ca is not None:
            options["tls_root_certs"] = ca
        certificate = _read_pem("ssl.certificate.location", self.certificate_location)
        key = _read_pem("ssl.key.location", self.key_location)
        if certificate is not None and key is not None:
            options["cert_chain"] = certificate
            options["private_key"] = key
        return options

    def to_config(self) -> dict[str, str]:
        """These settings as client config keys (what a worker process needs to rebuild them)."""
        config = {"security.protocol": self.protocol, "sasl.mechanism": self.mechanism}
        for key, value in (
            ("ssl.ca.location", self.ca_location),
            ("ssl.certificate.location", self.certificate_location),
            ("ssl.key.location", self.key_location),
            ("sasl.username", self.username),
            ("sasl.password", self.password),
        ):
            if value is not None:
                config[key] = value
        return config


PLAINTEXT = ClientSecurity()
