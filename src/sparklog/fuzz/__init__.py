"""Fuzzing a live broker (issue 15's proof): hypothesis draws cases, a runner applies them to a
:class:`~sparklog.local_cluster.LocalCluster` and checks its invariants.

- :mod:`.cases`: a case is plain data (kind + JSON-able parameters), so any case can be printed,
  logged and applied again.
- :mod:`.batches`: Arrow record batches built from a case, well-formed or mutated (offsets, null
  counts, types, declared sizes, timestamps).
- :mod:`.frames`: produced batches as frames (the produce wire), mutated or not, the schema a
  descriptor names, and what the broker must make of a frame (read as it reads it).
- :mod:`.requests`: JSON descriptors, tickets and action bodies, well-formed or mutated.
- :mod:`.strategies`: the hypothesis strategies that draw cases.
- :mod:`.flight_ops`: raw ``pyarrow.flight`` calls (and raw bytes on the port), each with a deadline.
- :mod:`.ledger`: every acknowledged produce and copy, with fingerprints of its records.
- :mod:`.readback`: reads partitions back (validating every batch before touching its values)
  and compares them with the ledger.
- :mod:`.cluster`: the cluster under test (topics, leaders, restarts, process statistics).
- :mod:`.apply`: one case against the cluster: what happened and what it says about the broker.
- :mod:`.report`: anomalies, failures and the run's summary.
- :mod:`.privileges`: the low-privilege mode's user, its ACLs, the admin's marked records and the
  checks of what the user gets back.
- :mod:`.runner`: the loop (cases, checks every few cases, restarts at the end).
- The Kafka mode's (``FuzzConfig(kafka=True)``, ``sparklog fuzz --kafka``): :mod:`.kafka_cases`
  (its cases and strategies), :mod:`.kafka_batches` (Kafka record batches built, mutated and
  judged by a reference reader), :mod:`.kafka_wire` (a raw Kafka connection), :mod:`.kafka_ops`
  (requests, the error codes each API may answer, the listener's health, what is read of a broker
  process), :mod:`.kafka_apply` (one case against the listeners) and :mod:`.kafka_readback`
  (partitions read back through a Kafka Fetch).

Invariants: every broker answers a ping; everything acknowledged is read back identical; a restart
(SIGTERM, then ``kill -9``) recovers and everything acknowledged is still there. Cases that do not
break an invariant can still be *findings*: an invalid batch acknowledged, an error without a typed
code or an UNKNOWN_SERVER_ERROR, a stream of Flight record batches (the produce wire before frames)
not refused with INVALID_REQUEST, a call that got no answer in time.

By default the fuzzer is an anonymous client of a plain cluster. The low-privilege mode
(``FuzzConfig(low_privilege=True)``, ``sparklog fuzz --low-privilege``) secures the cluster as
``sparklog up --secure`` does (SASL_SSL, SCRAM, ACLs), creates the user ``fz-user`` in its
credential store with Read and Write on ``fz-own``, Write only on ``fz-drop`` and nothing on
``fz-secret``, has the admin fill the last two with records carrying a marker unique to the run,
and sends every case as that user over authenticated Flight clients, starting with a sweep of the
requests ACLs guard (replica fetches under any replica id, ``copy_records`` between every pair of
topics, ``offsets_for_leader_epoch``, ``list_offsets``, fetches, ``fetch_many``, ``metadata``). Two
more invariants then hold after each case: no byte returned to the user carries the marker, nor
does any record of a topic it may Read (read back as admin: ``leak``); no request its ACLs do not
allow is answered (``unauthorized``). The others still hold for what the user got acknowledged
(and for the admin's records).

The Kafka mode (``FuzzConfig(kafka=True)``, ``sparklog fuzz --kafka``) sends its cases to the
brokers' Kafka-protocol listeners instead (the cluster gains ``fz-small``, ``max.message.bytes``
64 KiB, and ``fz-logtime``, ``LogAppendTime``): Produce requests built with kafka-python's classes
carrying record batches well-formed or mutated, idempotent producers' retried batches,
whole-request mutations, hostile queries and half-sent requests. Its invariants: after each case
every listener answers ApiVersions and Metadata on a fresh connection; a refused request (or one
whose connection closed) stored nothing of its partitions, and a retried idempotent batch was
stored once (``stored-refused``, ``duplicated``); everything acknowledged reads back identical
through a Kafka Fetch from the listener (and through sparklog's own fetches at the full checks).
Its findings add error codes that are not Kafka's or not the API's (UNKNOWN_SERVER_ERROR
included), a connection closed on a well-formed request, answers that contradict what the fuzzer
knows, connections the broker keeps after their clients closed them, and memory spikes on
compression bombs.

Entry points: :func:`sparklog.fuzz.runner.run_fuzz` (``sparklog fuzz``, ``tests/fuzz/``).
"""
