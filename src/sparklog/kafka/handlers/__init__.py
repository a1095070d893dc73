"""One module per Kafka API (as Redpanda's ``handlers/``): each declares the API it serves
(``API``, an :class:`~sparklog.kafka.api.ApiSpec`) and answers one request (``handle``)."""

from __future__ import annotations

from sparklog.kafka.api import ApiHandler
from sparklog.kafka.handlers import (
    alter_client_quotas,
    alter_configs,
    alter_user_scram_credentials,
    api_versions,
    create_acls,
    create_partitions,
    create_topics,
    delete_acls,
    delete_groups,
    delete_topics,
    describe_acls,
    describe_client_quotas,
    describe_cluster,
    describe_configs,
    describe_groups,
    describe_log_dirs,
    describe_user_scram_credentials,
    fetch,
    find_coordinator,
    heartbeat,
    incremental_alter_configs,
    join_group,
    leader_epochs,
    leave_group,
    list_groups,
    list_offsets,
    metadata,
    offset_commit,
    offset_delete,
    offset_fetch,
    produce,
    producer_ids,
    sasl_authenticate,
    sasl_handshake,
    sync_group,
)

RECORDS = (produce, fetch, list_offsets, leader_epochs, producer_ids)
GROUPS = (
    find_coordinator,
    join_group,
    sync_group,
    heartbeat,
    leave_group,
    offset_commit,
    offset_fetch,
    list_groups,
    describe_groups,
    delete_groups,
    offset_delete,
)
TOPIC_ADMIN = (
    create_topics,
    delete_topics,
    create_partitions,
    describe_configs,
    incremental_alter_configs,
    alter_configs,
    describe_cluster,
    describe_log_dirs,
)
SECURITY_ADMIN = (
    describe_acls,
    create_acls,
    delete_acls,
    describe_user_scram_credentials,
    alter_user_scram_credentials,
    describe_client_quotas,
    alter_client_quotas,
)

LOGIN = (sasl_handshake, sasl_authenticate)

HANDLERS: dict[int, ApiHandler] = {
    module.API.key: ApiHandler(module.API, module.handle)
    for module in (api_versions, *LOGIN, metadata, *RECORDS, *GROUPS, *TOPIC_ADMIN, *SECURITY_ADMIN)
}
