"""``StopSignal``: SIGTERM/SIGINT set a flag the main thread polls, and a signal that arrives while
the handler of another one runs (a second SIGTERM) is taken too, instead of deadlocking."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
import time

from sparklog.stop_signal import StopSignal


def test_a_signal_sets_it_and_restore_puts_the_previous_handlers_back() -> None:
    before = signal.getsignal(signal.SIGUSR2)
    stop = StopSignal((signal.SIGUSR2,))
    try:
        assert not stop.is_set()
        assert stop.wait(0.05) is False
        signal.raise_signal(signal.SIGUSR2)
        began = time.monotonic()
        assert stop.wait(30) is True and stop.is_set()
        assert time.monotonic() - began < 5  # it did not wait for the timeout
    finally:
        stop.restore()
    assert signal.getsignal(signal.SIGUSR2) is before


# In a child process (a deadlock there fails the test by its timeout instead of hanging the run): a
# trace function raises the signal again at every line run inside the handler, so that a second
# signal arrives wherever the handler is. A handler that sets a threading.Event hangs here, in
# Event.set() (its nested run waits for the lock the outer run holds): what hung brokers that were
# sent SIGTERM twice.
SIGNAL_INSIDE_THE_HANDLER = textwrap.dedent(
    """
    import signal, sys
    from sparklog.stop_signal import StopSignal

    stop = StopSignal((signal.SIGUSR2,))
    handler = StopSignal._handle.__code__
    raised = inside = 0

    def again(frame, event, arg):
        global raised, inside
        if event == "call" and frame.f_code is handler:
            inside += 1
        if inside and raised < 100:
            raised += 1
            signal.raise_signal(signal.SIGUSR2)
        return again

    sys.settrace(again)
    signal.raise_signal(signal.SIGUSR2)
    sys.settrace(None)
    assert raised > 0, "no signal was raised inside the handler"
    assert stop.wait(5)
    print("stopped")
    """
)


def test_a_signal_that_arrives_while_the_handler_runs_does_not_deadlock_it() -> None:
    done = subprocess.run([sys.executable, "-c", SIGNAL_INSIDE_THE_HANDLER], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stdout.strip() == "stopped", done.stderr
