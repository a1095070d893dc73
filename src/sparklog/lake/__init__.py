"""What clients and brokers share about a topic's Delta table: where it is and how its commits
are named (``layout``), and one snapshot of it as the driver reads it (``snapshot``). The broker's
side (tiering, the union read) is :mod:`sparklog.broker.lake`."""
