"""The heartbeats a supervisor asks its ready workers for, and keeps (:mod:`service.supervision.heartbeats`)."""

from __future__ import annotations

import asyncio
import json

from service.core.liveness import HEARTBEAT_S, IDLE_HEARTBEAT_S
from service.supervision.heartbeats import Heartbeats
from tests.supervision.fakes import FakeClock, FakeHeartbeat, until
from tests.supervision.worker_answers import answering


class TestHeartbeats:
    async def test_an_answer_becomes_the_beat_and_silence_leaves_the_last_one(self) -> None:
        clock, probe = FakeClock(), FakeHeartbeat()
        beats = Heartbeats(clock, probe)
        beats.watch({"i1": "http://w"}, busy={"http://w"})
        await until(lambda: probe.asked == 1 and not beats._out, what="the first question answered")
        assert beats.beats["i1"].seen_at == clock.mono
        probe.alive, probe.steps = False, 5
        clock.advance(HEARTBEAT_S)
        beats.watch({"i1": "http://w"}, busy={"http://w"})
        await until(lambda: probe.asked == 2 and not beats._out, what="the second question, unanswered")
        assert beats.beats["i1"].seen_at == clock.mono - HEARTBEAT_S and beats.beats["i1"].steps == 0

    async def test_a_worker_is_asked_once_a_heartbeat_and_forgotten_once_unwatched(self) -> None:
        clock, probe = FakeClock(), FakeHeartbeat()
        beats = Heartbeats(clock, probe)
        beats.watch({"i1": "http://w"}, busy={"http://w"})
        await until(lambda: not beats._out, what="the question answered")
        beats.watch({"i1": "http://w"}, busy={"http://w"})  # a planning pass within the same heartbeat asks nothing
        await asyncio.sleep(0)
        assert probe.asked == 1
        beats.watch({})
        assert beats.beats == {}
        await beats.close()

    async def test_an_idle_worker_is_asked_less_often_and_a_busy_one_each_heartbeat(self) -> None:
        clock, probe = FakeClock(), FakeHeartbeat()
        beats = Heartbeats(clock, probe)
        beats.watch({"i1": "http://w"})
        await until(lambda: probe.asked == 1 and not beats._out, what="the first question answered")
        clock.advance(HEARTBEAT_S)
        beats.watch({"i1": "http://w"})  # idle: not due yet
        await asyncio.sleep(0)
        assert probe.asked == 1
        beats.watch({"i1": "http://w"}, busy={"http://w"})  # a request in flight: due each heartbeat
        await until(lambda: probe.asked == 2 and not beats._out, what="the busy worker asked")
        clock.advance(IDLE_HEARTBEAT_S)
        beats.watch({"i1": "http://w"})
        await until(lambda: probe.asked == 3 and not beats._out, what="the idle worker asked again")
        await beats.close()


async def test_without_a_probe_the_worker_is_asked_over_http_and_a_bad_answer_is_silence() -> None:
    """The default probe: ``GET /engine/heartbeat`` on the worker's endpoint, a JSON object or nothing."""
    clock = FakeClock()
    beats = Heartbeats(clock)
    beat = json.dumps({"steps": 7, "step_s": 0.5, "waiting": 2}).encode()
    with answering({"/engine/heartbeat": (200, beat)}) as answers, answering({}) as silent:
        beats.watch({"i1": answers, "i2": silent}, busy={answers, silent})
        await until(lambda: beats.beats["i1"].steps == 7, what="the answer heard")
        await until(lambda: not beats._out, what="the 404 read as no answer")
    heard = beats.beats["i1"]
    assert (heard.step_s, heard.waiting, heard.seen_at) == (0.5, 2, clock.mono)
    assert beats.beats["i2"].steps == 0 and beats.beats["i2"].step_s is None  # still its first beat
    await beats.close()
