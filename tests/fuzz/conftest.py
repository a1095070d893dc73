"""Options of the fuzz suite: ``--fuzz-cases N`` (and ``--fuzz-seed S``, ``--fuzz-brokers B``) run the
long profile; ``SPARKLOG_FUZZ_CASES`` / ``SPARKLOG_FUZZ_SEED`` / ``SPARKLOG_FUZZ_BROKERS`` do the same
when pytest is started from the repository root (an option is only known when this file is loaded
before the command line is parsed, i.e. with ``tests/fuzz`` on the command line).
``SPARKLOG_FUZZ_KAFKA=1`` runs the long profile of the Kafka mode too (``test_fuzz_kafka.py``)."""

from __future__ import annotations

import os

import pytest


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("sparklog fuzz")
    group.addoption("--fuzz-cases", type=int, default=None, help="run the long fuzz profile with this many cases")
    group.addoption("--fuzz-seed", type=int, default=None, help="seed of the long fuzz profile (default 15)")
    group.addoption("--fuzz-brokers", type=int, default=None, help="brokers of the long fuzz profile (default 1)")


def fuzz_option(config: pytest.Config, name: str) -> int | None:
    """``--fuzz-<name>`` or ``SPARKLOG_FUZZ_<NAME>``; None if neither is set."""
    value = config.getoption(f"fuzz_{name}", default=None)
    if value is None:
        raw = os.environ.get(f"SPARKLOG_FUZZ_{name.upper()}")
        value = int(raw) if raw else None
    return value


@pytest.fixture
def fuzz_options(request: pytest.FixtureRequest) -> dict[str, int | None]:
    return {name: fuzz_option(request.config, name) for name in ("cases", "seed", "brokers")}
