"""InitProducerId: an id for an idempotent producer. Ids are drawn at random from a space large
enough never to meet twice (as sparklog's own producers draw theirs), so no broker needs to
coordinate with another; the log keeps a Kafka producer's id and epoch together
(:func:`sparklog.kafka.handlers.produce.log_producer_id`), so a producer that bumps its epoch
starts its sequences afresh. Transactional ids are refused: transactions are not supported."""

from __future__ import annotations

import secrets

from kafka.protocol.producer import InitProducerIdRequest, InitProducerIdResponse

from sparklog.kafka import error_codes
from sparklog.kafka.api import ApiSpec, Message, RequestContext
from sparklog.kafka.handlers.produce import EPOCH_BITS, MAX_PRODUCER_ID

API = ApiSpec(InitProducerIdRequest, InitProducerIdResponse, 0, 5)

MAX_EPOCH = (1 << EPOCH_BITS) - 1


def handle(request: Message, ctx: RequestContext) -> Message:
    if request.transactional_id is not None:
        return ctx.response(
            API,
            throttle_time_ms=0,
            error_code=error_codes.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
            producer_id=-1,
            producer_epoch=-1,
        )
    producer_id, epoch = request.producer_id, request.producer_epoch
    if ctx.api_version >= 3 and 0 <= producer_id < MAX_PRODUCER_ID and 0 <= epoch < MAX_EPOCH:
        epoch += 1  # a producer bumping its epoch (after a timed-out batch) keeps its id
    else:
        producer_id, epoch = secrets.randbelow(MAX_PRODUCER_ID), 0
    return ctx.response(
        API, throttle_time_ms=0, error_code=error_codes.NONE, producer_id=producer_id, producer_epoch=epoch
    )
