"""The live monitor's samples are taken on one thread for the app's life (not a Textual thread worker a
sample, which cost a thread, a Worker and three state messages every second), one at a time, and that
thread ends with the app."""

from __future__ import annotations

import threading

from ui_data import make_app, settle


def sampler_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "gputui-sampler"]


async def test_every_sample_is_taken_on_the_same_thread_which_ends_with_the_app():
    app = make_app(interval=0.1)
    taken_on: list[int] = []
    sample = app.sampler.sample

    def counted():
        taken_on.append(threading.get_ident())
        return sample()

    app.sampler.sample = counted
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot, 5)
        assert len(sampler_threads()) == 1
    assert len(taken_on) >= 5 and len(set(taken_on)) == 1  # one thread, every sample
    assert taken_on[0] != threading.get_ident()  # never the UI thread
    for thread in sampler_threads():
        thread.join(timeout=5)
    assert sampler_threads() == []


async def test_asking_for_a_sample_while_one_is_in_flight_keeps_one_sample_at_a_time():
    """``r`` (sample now) pressed while a sample is being taken: the next follows it, never beside it,
    and the chained timer stays single (the rate does not double)."""
    app = make_app(interval=0.2)
    inside, most = [0], [0]
    sample = app.sampler.sample
    gate = threading.Lock()

    def slow():
        with gate:
            inside[0] += 1
            most[0] = max(most[0], inside[0])
        try:
            threading.Event().wait(0.05)
            return sample()
        finally:
            with gate:
                inside[0] -= 1

    app.sampler.sample = slow
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot, 1)
        for _ in range(5):
            app.sample_now()
        await pilot.pause(1.0)
        before = app.samples
        await pilot.pause(1.0)
        per_second = app.samples - before
    assert most[0] == 1
    assert 1 <= per_second <= 5  # every 0.2 s at most (less the 0.05 s sample), not twice that
