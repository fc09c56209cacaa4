"""
The dependencies workloads: how fast one daemon's kernel resolves the
edges between tasks, and what a group callback's fan-in costs per member
outcome as the group grows (it must stay flat).

Both run the daemon's own kernel (L{QueueService}, its admission and its
dependencies) in this process, on sessions that drop what they are sent:
what is measured is the kernel's work per outcome, which a real daemon adds
to the same network cost as any task's (see C{python -m tools.bench e2e}).
"""

from __future__ import annotations

import gc
import random
import statistics
import time
from collections.abc import Callable
from typing import Any

from zope.interface import implementer

from quicx.daemon.queue import pmad
from quicx.daemon.queue.admission import Admission
from quicx.daemon.queue.core import QueueService
from quicx.daemon.queue.model import Session
from quicx.daemon.queue.policy import DependencyLimits, QueueLimits
from quicx.daemon.speakers import SPEAKERS
from quicx.protocol.session import IPeer, Role
from quicx.protocol.taskflow import SubmitOptions

PARENTS_PER_CHILD = 32
"""Each child of the edges workload waits for this many parents."""
FANIN_SIZES = (1_000, 10_000, 100_000)


@implementer(IPeer)
class _Sink:
    """A connection that drops what it is sent."""

    peer_name = "bench"

    def sendFrame(self, data: bytes) -> None:
        pass

    def disconnect(self) -> None:
        pass


def _kernel(tasks: int) -> QueueService:
    from twisted.internet.task import Clock

    limits = QueueLimits(dependencies=DependencyLimits(max_waiting=tasks + 1))
    pool = pmad.Pmad(max(64 << 20, tasks * 160), pmad.default_classes())
    return QueueService(pool, scheduler=Clock(), limits=limits)


def _session(kernel: QueueService) -> Session:
    return kernel.open_session(_Sink(), SPEAKERS[2])


def _run_all(kernel: QueueService, worker: Session) -> float:
    """Hand every task of queue C{work} to C{worker} and finish each: the seconds it took."""
    kernel.claim_role(worker, Role.WORKER)
    kernel.subscribe(worker, ("work",))
    started = time.perf_counter()
    kernel.ready(worker, 1000)
    while worker.tasks:
        for task_id in list(worker.tasks):
            kernel.done(worker, task_id)
    return time.perf_counter() - started


def edges_workload(parents: int, children: int, seed: int = 1) -> dict[str, Any]:
    """
    C{parents} tasks, then C{children} tasks each waiting for
    L{PARENTS_PER_CHILD} of them at random; every task then runs: the edges
    resolved per second is the edges over the time the run took beyond the
    same parents' and children's run without edges.
    """
    rng = random.Random(seed)
    timings = []
    for with_edges in (False, True):
        kernel = _kernel(parents + children)
        producer = _session(kernel)
        admission = Admission(kernel)
        for _ in range(parents):
            admission.submit(producer, b"t", b"x", SubmitOptions(queue="work"))
        for _ in range(children):
            after = tuple(rng.sample(range(1, parents + 1), PARENTS_PER_CHILD))
            options = SubmitOptions(queue="work", after=after if with_edges else None)
            admission.submit(producer, b"t", b"x", options)
        assert kernel.dependencies.waiters or not with_edges
        gc.collect()
        timings.append(_run_all(kernel, _session(kernel)))
        assert not kernel.dependencies.waiters and not kernel._live
    edges = children * PARENTS_PER_CHILD
    extra = max(timings[1] - timings[0], 1e-9)
    return {
        "parents": parents,
        "children": children,
        "edges": edges,
        "seconds_without_edges": round(timings[0], 3),
        "seconds_with_edges": round(timings[1], 3),
        "edges_per_s": round(edges / extra),
        "edges_per_s_all_in": round(edges / timings[1]),
    }


def fanin_cost_workload(members: int, rounds: int = 3) -> dict[str, Any]:
    """
    A group of C{members} tasks with a callback (a chord): the kernel's
    time per member outcome without the callback and with it (alternated,
    the median of C{rounds} each), and -- what the machine's noise does not
    blur -- the time spent in the dependencies' own hooks per member outcome.
    """
    times: dict[bool, list[float]] = {False: [], True: []}
    own: list[float] = []
    for callback in (False, True) * rounds:
        seconds, hooks = _fanin_round(members, callback)
        times[callback].append(seconds)
        if callback:
            own.append(hooks)
    plain, chord = (statistics.median(times[c]) for c in (False, True))
    return {
        "members": members,
        "rounds": rounds,
        "us_per_member_plain": round(plain * 1e6, 3),
        "us_per_member_with_callback": round(chord * 1e6, 3),
        "us_in_dependencies_per_member": round(statistics.median(own) * 1e6, 3),
    }


def _fanin_round(members: int, callback: bool) -> tuple[float, float]:
    """
    One run of L{fanin_cost_workload}: the seconds per member outcome, and
    those spent in the dependencies' hooks.
    """
    kernel = _kernel(members + 1)
    spent = [0.0]
    dependencies = kernel.dependencies
    for hook in ("settled", "group_finished"):
        setattr(dependencies, hook, _timed(getattr(dependencies, hook), spent))
    kernel.outcomes.finished_listeners[:] = [dependencies.group_finished]
    kernel._hear()
    producer = _session(kernel)
    admission = Admission(kernel)
    group = kernel.open_group(producer)["group"]
    if callback:
        admission.submit(producer, b"t", b"x", SubmitOptions(queue="cb", after_group=group))
    for _ in range(members):
        admission.submit(producer, b"t", b"x", SubmitOptions(queue="work", group=group))
    kernel.close_group(group)
    gc.collect()
    seconds = _run_all(kernel, _session(kernel))
    assert not dependencies.waiters
    return seconds / members, spent[0] / members


def _timed(function: Callable[..., None], spent: list[float]) -> Callable[..., None]:
    def timed(*args: Any) -> None:
        started = time.perf_counter()
        function(*args)
        spent[0] += time.perf_counter() - started

    return timed
