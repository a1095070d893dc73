"""The Flight contract between clients and brokers: request and answer formats (``wire``), record
batches carried as bytes so a broker bounds them before decoding (``record_frames``, with
``ipc_metadata`` reading what an IPC message declares), multi-partition fetches (``multi_fetch``)
and compact fetch columns (``fetch_columns``)."""
