"""Who may talk to a cluster, and what each may do (issue 17).

- :mod:`.principal`: principals (``User:alice``) and the anonymous one.
- :mod:`.client_config`: the client settings users know from librdkafka (``security.protocol``,
  ``ssl.*``, ``sasl.*``), read from a dict or a properties file.
- :mod:`.certificates`: a CA and certificates for brokers and clients (``sparklog up --secure``, tests).
- :mod:`.scram`: SCRAM-SHA-256 credentials (salted, iterated; never the password) and the Flight
  handshake that checks them.
- :mod:`.credential_store`: the credentials in ZooKeeper (``sparklog users``).
- :mod:`.acls`, :mod:`.acl_store`, :mod:`.authorizer`: ACLs, where they are kept, and the check
  every broker call goes through.
"""
