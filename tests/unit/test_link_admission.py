"""The probe server's admission policy on a clock the test moves (gputui/link/admission.py): who may
connect, how many at once, how fast, and for how long. No sockets, no waiting."""

from __future__ import annotations

from clocks import MovableClock

from gputui.link import protocol
from gputui.link.admission import EVICT_GRACE, Admission, Entry

ME = (100, 0, 0)  # (pid, uid, gid): root, whom a probe always answers


def admission(**limits) -> tuple[Admission, MovableClock, list[str]]:
    clock, notes = MovableClock(running=False), []
    return Admission(clock=clock, note=notes.append, **limits), clock, notes


def test_another_users_connection_is_refused_and_noted():
    policy, _, notes = admission()
    assert policy.entry((4321, 4242, 4242)) == Entry(
        refused=(protocol.REFUSED, "this probe only answers its own user (or root)"))
    assert notes == ["refused a connection from uid 4242 (pid 4321)"]
    assert policy.entry(ME) == Entry() and policy.entry(None) == Entry()


def test_accepts_beyond_the_burst_rest_the_listener_until_the_budget_refills():
    policy, clock, notes = admission(accept_rate=10.0, accept_burst=3.0)
    assert [policy.may_accept() for _ in range(4)] == [True, True, True, False]
    assert policy.may_accept() is False and policy.accepts_deferred == 1  # one rest, counted once
    assert notes == ["asked faster than 10 connections/s: accepting at that rate "
                     "(something keeps connecting to the probe's socket)"]
    assert policy.timeout() == 0.1 and not policy.listen_again()
    clock.advance(0.1)
    assert policy.listen_again() and not policy.listen_again()
    assert policy.may_accept() and policy.timeout() is None


def test_an_accept_that_found_nobody_is_not_spent():
    policy, _, _ = admission(accept_rate=10.0, accept_burst=1.0)
    assert policy.may_accept()
    policy.nobody_came()
    assert policy.may_accept() and not policy.may_accept()


def test_a_silent_connection_is_overdue_at_the_silent_limit_and_one_that_asks_at_the_idle_limit():
    policy, clock, _ = admission(silent_timeout=5.0, idle_timeout=60.0)
    policy.admit(7)
    policy.admit(8)
    assert policy.timeout() == 5.0
    clock.advance(2.0)
    policy.asked(8)  # due 60 s from now
    clock.advance(2.5)
    assert policy.overdue() == [] and policy.timeout() == 0.5
    clock.advance(0.5)
    assert policy.overdue() == [7] and policy.dropped_idle == 1
    policy.leave(7)
    assert policy.timeout() == 57.0
    clock.advance(50.0)
    policy.took_reply(8, clock())  # taking its replies counts as life too
    clock.advance(59.0)
    assert policy.overdue() == []
    clock.advance(1.0)
    assert policy.overdue() == [8] and policy.dropped_idle == 2


def test_a_full_table_makes_room_for_a_newcomer_only_past_the_grace_the_silent_first():
    policy, clock, _ = admission(max_clients=3, idle_timeout=60.0, silent_timeout=600.0)
    for key in (1, 2, 3):
        policy.admit(key)
        clock.advance(0.1)
    policy.asked(1)
    assert policy.entry(ME) == Entry(refused=(protocol.BUSY, "too many clients (limit 3)"))
    clock.advance(EVICT_GRACE)
    assert policy.entry(ME) == Entry(evict=2) and policy.evicted == 1  # silent and the oldest of those
    policy.leave(2)
    policy.admit(4)
    clock.advance(EVICT_GRACE)
    assert policy.entry(ME) == Entry(evict=3)
    policy.leave(3)
    policy.admit(5)
    policy.asked(1)
    clock.advance(1.0)
    policy.asked(4)
    policy.asked(5)
    clock.advance(13.9)  # a quarter of the idle limit spares those that ask
    assert policy.entry(ME).refused == (protocol.BUSY, "too many clients (limit 3)")
    clock.advance(0.1)
    assert policy.entry(ME) == Entry(evict=1) and policy.evicted == 3  # quiet the longest


def test_requests_beyond_the_budget_wait_in_order_until_it_refills():
    policy, clock, notes = admission(request_rate=2.0, request_burst=2.0)
    for key in (1, 2, 3):
        policy.admit(key)
    assert policy.may_answer(1) and policy.may_answer(2)
    assert not policy.may_answer(3) and not policy.may_answer(1)
    assert policy.waits(3) and policy.waits(1) and not policy.waits(2)
    assert policy.requests_deferred == 2
    assert notes == ["asked faster than 2 requests/s: answering at that rate "
                     "(monitors polling it very often, or many at once)"]
    assert policy.answer_now() == [] and policy.timeout() == 0.5
    clock.advance(0.5)
    assert policy.answer_now() == [3, 1] and not policy.waits(3) and policy.answer_now() == []


def test_a_connection_that_leaves_no_longer_waits():
    policy, _, _ = admission(request_rate=1.0, request_burst=1.0)
    policy.admit(1)
    assert policy.may_answer(1) and not policy.may_answer(1)
    policy.leave(1)
    assert not policy.waits(1) and policy.timeout() is None
