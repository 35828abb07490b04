"""The watchdog that stops queries past their deadline (``sqlweave.db.watchdog``)."""

from __future__ import annotations

import threading
import time

from sqlweave.db.watchdog import WATCHDOG


def test_a_blocked_callback_delays_no_other_deadline_and_no_arm_or_disarm() -> None:
    """A cancel request to a server that does not answer blocked every query of the process
    (psycopg's cancel waits 30 s) while the watchdog held its lock."""
    release = threading.Event()
    fired_at: dict[str, float] = {}
    start = time.monotonic()

    def stuck() -> None:
        fired_at["stuck"] = time.monotonic() - start
        release.wait(5)

    WATCHDOG.arm(start + 0.05, stuck)
    time.sleep(0.2)  # the stuck callback is running now
    assert "stuck" in fired_at
    other = WATCHDOG.arm(time.monotonic() + 0.05, lambda: fired_at.update(other=time.time()))
    t0 = time.monotonic()
    quick = WATCHDOG.arm(time.monotonic() + 60, lambda: None)
    assert WATCHDOG.disarm(quick) is False  # never fired
    assert time.monotonic() - t0 < 0.5  # arm and disarm did not wait for the stuck one
    time.sleep(0.3)
    assert "other" in fired_at  # its deadline came and went on time
    assert WATCHDOG.disarm(other) is True
    release.set()


def test_disarm_waits_for_its_own_running_callback() -> None:
    """Once disarm returns, the callback is over: it cannot reach the connection's next query."""
    done = threading.Event()

    def slow() -> None:
        time.sleep(0.4)
        done.set()

    token = WATCHDOG.arm(time.monotonic() + 0.01, slow)
    time.sleep(0.1)  # firing
    assert WATCHDOG.disarm(token) is True
    assert done.is_set()
