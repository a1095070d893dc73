"""Fuzzing a live broker (issue 15's proof): hypothesis draws cases, a runner applies them to a
:class:`~sparklog.local_cluster.LocalCluster` and checks its invariants.

- :mod:`.cases`: a case is plain data (kind + JSON-able parameters), so any case can be printed,
  logged and applied again.
- :mod:`.batches`: Arrow record batches built from a case, well-formed or mutated (offsets, null
  counts, types, declared sizes, timestamps).
- :mod:`.requests`: JSON descriptors, tickets and action bodies, well-formed or mutated.
- :mod:`.strategies`: the hypothesis strategies that draw cases.
- :mod:`.flight_ops`: raw ``pyarrow.flight`` calls (and raw bytes on the port), each with a deadline.
- :mod:`.ledger`: every acknowledged produce and copy, with fingerprints of its records.
- :mod:`.readback`: reads partitions back (validating every batch before touching its values)
  and compares them with the ledger.
- :mod:`.cluster`: the cluster under test (topics, leaders, restarts, process statistics).
- :mod:`.apply`: one case against the cluster: what happened and what it says about the broker.
- :mod:`.report`: anomalies, failures and the run's summary.
- :mod:`.runner`: the loop (cases, checks every few cases, restarts at the end).

Invariants: every broker answers a ping; everything acknowledged is read back identical; a restart
(SIGTERM, then ``kill -9``) recovers and everything acknowledged is still there. Cases that do not
break an invariant can still be *findings*: an invalid batch acknowledged, an error without a typed
code, a call that got no answer in time.

Entry points: :func:`sparklog.fuzz.runner.run_fuzz` (``sparklog fuzz``, ``tests/fuzz/``).
"""
