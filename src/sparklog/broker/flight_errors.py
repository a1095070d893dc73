"""How a request's errors leave the broker: as the typed Flight errors a client turns back into
sparklog's own (:mod:`sparklog.protocol.wire`). An error the broker did not expect is logged here with its
traceback and leaves as a short ``UNKNOWN_SERVER_ERROR`` (no source paths or internals on the
wire); running out of memory for one request is that request's RECORD_TOO_LARGE, not the broker's end."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pyarrow.flight as flight

from sparklog.errors import RecordTooLarge, SparklogError, UnknownServerError
from sparklog.protocol import wire

log = logging.getLogger(__name__)


@contextlib.contextmanager
def errors_as_flight(what: str) -> Iterator[None]:
    """Errors of a request as the Flight errors a client turns back into typed ones: sparklog's own
    as they are; running out of memory for a request as RECORD_TOO_LARGE; anything unexpected
    logged here (with its traceback) and sent as a short UNKNOWN_SERVER_ERROR."""
    try:
        yield
    except SparklogError as exc:
        raise wire.to_flight_error(exc) from None
    except flight.FlightError:
        raise  # gRPC's own (a cancelled call, a broken stream): nothing of ours in it
    except (MemoryError, pa.ArrowMemoryError):
        log.warning("%s needed more memory than the broker could allocate", what)
        raise wire.to_flight_error(RecordTooLarge(f"{what} needed more memory than the broker has")) from None
    except Exception as exc:
        log.exception("unexpected error in %s", what)
        error = UnknownServerError(f"the broker failed on {what} ({type(exc).__name__}); details are in its log")
        raise wire.to_flight_error(error) from None


def guarded(what: str, items: Iterator[Any]) -> Iterator[Any]:
    """A response generator whose errors leave as :func:`errors_as_flight` sends them."""
    with errors_as_flight(what):
        yield from items
