"""One module per Kafka API (as Redpanda's ``handlers/``): each declares the API it serves
(``API``, an :class:`~sparklog.kafka.api.ApiSpec`) and answers one request (``handle``)."""

from __future__ import annotations

from sparklog.kafka.api import ApiHandler
from sparklog.kafka.handlers import api_versions, fetch, leader_epochs, list_offsets, metadata, produce, producer_ids

HANDLERS: dict[int, ApiHandler] = {
    module.API.key: ApiHandler(module.API, module.handle)
    for module in (api_versions, metadata, produce, fetch, list_offsets, leader_epochs, producer_ids)
}
