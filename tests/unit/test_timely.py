"""The peers' event loop (node/transport/timely.py): timers fire on time, and I/O still wakes a timed wait."""

from __future__ import annotations

import asyncio
import socket
import statistics
import threading
import time

from node.transport import timely

TIMERS = 200
AHEAD_S = 0.0003


async def lateness() -> float:
    """Median lateness (s) of ``TIMERS`` timers set ``AHEAD_S`` ahead, one after the other."""
    loop, late = asyncio.get_running_loop(), []
    for _ in range(TIMERS):
        due = loop.time() + AHEAD_S
        fired = loop.create_future()
        loop.call_at(due, fired.set_result, None)
        await fired
        late.append(loop.time() - due)
    return statistics.median(late)


def run(factory, coro):
    with asyncio.Runner(loop_factory=factory) as runner:
        return runner.run(coro)


def test_a_timer_fires_within_a_fraction_of_a_millisecond():
    # asyncio's epoll loop rounds the wait up to a whole millisecond: about 0.7 ms late here.
    default, timely_late = run(None, lateness()), run(timely.new_event_loop, lateness())
    assert default > 0.0006, default
    assert timely_late < 0.0005, timely_late


def test_io_wakes_a_wait_for_a_distant_timer():
    async def wait_for_data() -> float:
        loop = asyncio.get_running_loop()
        a, b = socket.socketpair()
        arrived = loop.create_future()
        loop.add_reader(a, lambda: arrived.done() or arrived.set_result(time.monotonic()))
        loop.call_later(10.0, lambda: None)  # the loop's next timer is 10 s away
        sent_at = time.monotonic() + 0.05
        threading.Timer(0.05, b.send, (b"x",)).start()
        got = await asyncio.wait_for(arrived, 5.0)
        loop.remove_reader(a)
        a.close()
        b.close()
        return got - sent_at

    assert run(timely.new_event_loop, wait_for_data()) < 0.5
