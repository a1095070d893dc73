"""The producer (``from sparklog import Producer``), in Kafka's shape: records accumulate per
partition and one sender thread sends each broker the batches of every partition it leads.

- :mod:`.producer`: ``Producer``, the API (``send``, ``send_batch``, ``flush``, ``close``)
- :mod:`.record_accumulator`: ``send()`` records gathered per topic until they leave
- :mod:`.row_routing`: rows to partitions (key hash, explicit, sticky), columnar
- :mod:`.produce_batch`: a wire batch for one partition and the rows it acknowledges
- :mod:`.partition_queue`: a partition's queued batches, in order, with its producer id and sequence
- :mod:`.sender`: the sender thread: a request per broker, retries, timeouts
- :mod:`.broker_stream`: one open ``produce_many`` stream to a broker, on its own thread
- :mod:`.futures`: ``RecordMetadata``, ``BatchMetadata``, ``ProduceFuture``
"""

from sparklog.client.producer.futures import BatchMetadata, ProduceFuture, RecordMetadata
from sparklog.client.producer.producer import Producer

__all__ = ["BatchMetadata", "ProduceFuture", "Producer", "RecordMetadata"]
