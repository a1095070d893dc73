"""Lake tiering (issue 19): the leader of each partition of a ``lake.enabled`` topic appends its
closed segments' committed records to the topic's Delta table, exactly once; consumers read
offsets that are only in the table from it (the union read).

- :mod:`.rows`: stored record batches <-> the table's rows (Arrow compute only; a typed topic's
  value fields as columns, in its latest schema version).
- :mod:`.table_schema`: a typed topic's table following its schema versions (additive, or rewritten).
- :mod:`.delta_table`: the Delta table of a topic (``deltalake``): its application transaction
  per partition, and fenced appends.
- :mod:`.source`: what the tierer reads of one partition (its closed, committed records).
- :mod:`.tierer`: the exactly-once logic (one pass over the partitions) and the broker's tiering
  thread.
- :mod:`.lake_reader`: a partition's offsets read back from the table (the union read).
- :mod:`.union_read`: consumer fetches below the local log start answered from the table, and the
  earliest offset.
"""
