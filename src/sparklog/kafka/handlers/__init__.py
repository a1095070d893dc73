"""One module per Kafka API (as Redpanda's ``handlers/``): each declares the API it serves
(``API``, an :class:`~sparklog.kafka.api.ApiSpec`) and answers one request (``handle``)."""

from __future__ import annotations

from sparklog.kafka.api import ApiHandler
from sparklog.kafka.handlers import (
    alter_configs,
    api_versions,
    create_partitions,
    create_topics,
    delete_topics,
    describe_cluster,
    describe_configs,
    fetch,
    incremental_alter_configs,
    leader_epochs,
    list_offsets,
    metadata,
    produce,
    producer_ids,
)

TOPIC_ADMIN = (
    create_topics,
    delete_topics,
    create_partitions,
    describe_configs,
    incremental_alter_configs,
    alter_configs,
    describe_cluster,
)

HANDLERS: dict[int, ApiHandler] = {
    module.API.key: ApiHandler(module.API, module.handle)
    for module in (api_versions, metadata, produce, fetch, list_offsets, leader_epochs, producer_ids, *TOPIC_ADMIN)
}
