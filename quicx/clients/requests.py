"""
What the clients send and read, in either protocol version (sans-I/O).

What the clients send and read, in either protocol version: sans-I/O, shared
by the blocking client, the Twisted client and the worker runner.

A client speaks version 2 unless told otherwise.  It opens each connection
with HELLO: a daemon that answers ERROR in a version-1 header speaks only
version 1 (the protocol page's daemon, or one with C{[protocol] versions =
1}), and the connection goes on in version 1 -- the daemon ignored the
version-2 frame, so nothing else changes.  Calls that need version 2
(queues, priorities, keys, delays, retries, cancel, introspection, dead
letters, schedules, results, shared data, groups) then raise
L{NeedsVersion2}.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

from attrs import field, frozen

import quicx
from quicx.clients import timing
from quicx.clients.address import as_bytes, payload_bytes
from quicx.protocol import admin, codec, link, registry, shared_data, start_options, taskflow, wire
from quicx.protocol.errors import NeedsVersion2, PayloadTooLarge
from quicx.protocol.parents import POLICY_NAMES

CLIENT_NAME = "quicx-python"
HELLO = link.encode_hello(CLIENT_NAME, quicx.__version__)


def _optional_ttl(value: float | str | None) -> int | None:
    return None if value is None else timing.ttl_seconds(value)


def _optional_ids(value: Iterable[int] | None) -> tuple[int, ...] | None:
    return None if value is None else tuple(value)


def _policy(name: str | None) -> int | None:
    """@raise ValueError: not C{"fail"}, C{"ignore"} or C{"continue"}."""
    if name is None:
        return None
    policy = POLICY_NAMES.get(name)
    if policy is None:
        raise ValueError(f"on_parent_failure is 'fail', 'ignore' or 'continue', not {name!r}")
    return policy


@frozen(cache_hash=True)
class Options:
    """
    A SUBMIT's version-2 options, as the client API takes them (seconds,
    times, text), every one C{None} meaning none; L{wire} makes them the
    L{taskflow.SubmitOptions} the codec encodes.

    @ivar delay: run it this many seconds from now; C{run_at}: at this time
        (a C{datetime} with its zone, or Unix seconds).  At most one of the two.
    @ivar retries: how many times a failure is retried (default: the queue's).
    @ivar backoff: the wait before each retry: a L{taskflow.Backoff}, or given as
        C{"fixed:10s"} or C{"exponential:1s:5m"}, either optionally ending
        in C{":20%"} of jitter (see L{timing.parse_backoff}); default: the queue's.
    @ivar keep_result: keep the task's outcome and result after it finishes,
        for any connection to ask (L{quicx.clients.blocking.QuicxClient.result}),
        C{result_ttl} (seconds, or text such as C{"1h"}; rounded up to whole
        seconds) or the daemon's C{[results] ttl}; a C{result_ttl} alone keeps
        it too.  Default: as the queue says (C{keep_results}).
    @ivar progress: forward the task's progress reports to this connection.
    @ivar group: the group the task joins (see C{open_group}).
    @ivar after: the tasks it waits for (their ids, at most 63): it runs once
        each has finished, their outcomes in its handler's C{context.parents}.
    @ivar on_parent_failure: what a parent that did not finish done does to
        it: C{"fail"} it (the default), C{"ignore"} that parent, or
        C{"continue"} with that parent's failure listed in C{context.parents}.
    @ivar after_group: the group it is the callback of: it runs once the
        group finishes (closed, every member finished; as Celery's chord),
        with its counts and members' results.
    @ivar debounce: with a C{key}: its task waits this window, and a later
        submit of the key folds into it while it waits: a
        L{start_options.Debounce}, or given as C{"replace:2s"}, C{"extend:5s"},
        C{"drop:1m"} (see docs/protocol.md, "Version 2: debounce and expiry").
    @ivar expires_in: seconds from now it must start by, or it ends expired
        (L{quicx.protocol.errors.TaskExpired}); C{expires_at}: the time it
        must start by (a C{datetime} with its zone, or Unix seconds).  At
        most one of the two; default: the queue's C{expires}.
    """

    queue: str | None = None
    priority: int | None = None
    key: str | bytes | None = None
    fairness_key: str | bytes | None = None
    delay: float | None = None
    run_at: datetime | float | None = None
    retries: int | None = None
    backoff: taskflow.Backoff | None = field(default=None, converter=timing.as_backoff)
    keep_result: bool = False
    result_ttl: int | None = field(default=None, converter=_optional_ttl)
    progress: bool = False
    group: int | None = None
    after: tuple[int, ...] | None = field(default=None, converter=_optional_ids)
    on_parent_failure: str | None = None
    after_group: int | None = None
    debounce: start_options.Debounce | None = field(default=None, converter=timing.as_debounce)
    expires_in: float | None = None
    expires_at: datetime | float | None = None

    @property
    def any(self) -> bool:
        return not (self.queue is None and self.priority is None and self._at_most_queue)

    @property
    def _at_most_queue(self) -> bool:
        """Whether it has no option but, maybe, a queue and a priority."""
        return (
            self.key is None
            and self.fairness_key is None
            and self.delay is None
            and self.run_at is None
            and self.retries is None
            and self.backoff is None
            and self._result_ttl is None
            and not self.progress
            and self.group is None
            and self.after is None
            and self.on_parent_failure is None
            and self.after_group is None
            and self.debounce is None
            and self.expires_in is None
            and self.expires_at is None
        )

    @property
    def _result_ttl(self) -> int | None:
        """The result option's value: 0 keeps the result for the daemon's TTL."""
        if self.result_ttl is not None:
            return self.result_ttl
        return 0 if self.keep_result else None

    def encode(self) -> bytes:
        """
        The options field.

        @raise ValueError: an option is out of range (a naive C{datetime} included).
        """
        if self._at_most_queue:
            return _common_options(self.queue, self.priority)
        return self.wire().encode()

    def wire(self) -> taskflow.SubmitOptions:
        """
        These options as the wire carries them, the value the codec encodes.

        @raise ValueError: a naive C{datetime}.
        """
        run_at = None if self.run_at is None else timing.unix_seconds(self.run_at)
        return taskflow.SubmitOptions(
            queue=self.queue,
            priority=self.priority,
            key=None if self.key is None else as_bytes(self.key),
            fairness=None if self.fairness_key is None else as_bytes(self.fairness_key),
            delay_ms=None if self.delay is None else timing.milliseconds(self.delay),
            run_at_ms=None if run_at is None else timing.milliseconds(run_at),
            retries=self.retries,
            backoff=self.backoff,
            result_ttl=self._result_ttl,
            progress=self.progress,
            group=self.group,
            after=self.after,
            on_parent_failure=_policy(self.on_parent_failure),
            after_group=self.after_group,
            debounce=self.debounce,
            expires=timing.expiry(self.expires_in, self.expires_at),
        )


@functools.lru_cache(maxsize=1024)
def _common_options(queue: str | None, priority: int | None) -> bytes:
    """Options without keys: few combinations, each encoded once."""
    return taskflow.SubmitOptions(queue=queue, priority=priority).encode()


NONE = taskflow.DEFAULT_OPTIONS
"""No options, as the wire carries them."""

Task = tuple[str | bytes, str | bytes] | tuple[str | bytes, str | bytes, Options]
"""A task to submit: C{(type, payload)}, or with L{Options}."""

AnyTask = Task | tuple[str | bytes, str | bytes, taskflow.SubmitOptions]
"""A L{Task}, or one whose options the client API has made a L{taskflow.SubmitOptions} already."""


OPTIONS_NEED_VERSION_2 = (
    "queue, priority, keys, delays, retries, results, progress, groups, debounce and expiry"
    " need protocol version 2"
)
"""Why a SUBMIT with options cannot go to a version-1 daemon."""


def has_options(task: AnyTask) -> bool:
    """Whether C{task} (as L{submit_frames} takes it) has options, which only version 2 sends."""
    return len(task) == 3 and _any(task[2])


def _any(options: Options | taskflow.SubmitOptions) -> bool:
    return options.any if type(options) is Options else options != NONE


def options_field(options: Options | taskflow.SubmitOptions) -> bytes:
    """
    The options field of a SUBMIT (empty: none); options without keys,
    few combinations, encoded once each.

    @raise ValueError: an option is out of range (a naive C{datetime} included).
    """
    if type(options) is Options:
        return options.encode() if options.any else b""
    if options is common_options(options.queue, options.priority):
        return _common_options(options.queue, options.priority)
    return options.encode()


@functools.lru_cache(maxsize=1024)
def common_options(queue: str | None, priority: int | None) -> taskflow.SubmitOptions:
    """Options of a queue and a priority alone: few combinations, each made once."""
    return taskflow.SubmitOptions(queue=queue, priority=priority)


def encode_submit(
    version: int,
    task_type: str | bytes,
    payload: str | bytes,
    options: Options | taskflow.SubmitOptions = NONE,
) -> bytes:
    """
    A SUBMIT in C{version}.

    @raise NeedsVersion2: options were given and the connection speaks version 1.
    @raise ValueError: a bad option (queue name, priority, key length, delay...).
    """
    if version == 1:
        if _any(options):
            raise NeedsVersion2(f"{OPTIONS_NEED_VERSION_2}; the daemon speaks version 1")
        return wire.encode_submit(as_bytes(task_type), payload_bytes(payload))
    return taskflow.encode_submit(
        as_bytes(task_type), payload_bytes(payload), options_field(options)
    )


def submit_frames(version: int, tasks: Iterable[AnyTask]) -> bytes:
    """One SUBMIT per C{(type, payload)} or C{(type, payload, options)}, joined."""
    plain = wire.encode_submit if version == 1 else taskflow.encode_submit
    pack, submit = codec.HEADER.pack, int(codec.MessageType.SUBMIT)
    frames: list[bytes] = []
    # Tasks of a batch mostly share a type, and a few Options: each is encoded once.
    heads: dict[str | bytes, bytes] = {}
    encoded: dict[Options | taskflow.SubmitOptions, bytes] = {}
    for task in tasks:
        if len(task) == 2:  # the common case, without a call to sort out options
            task_type, payload = task
            if type(payload) is not bytes:
                payload = payload_bytes(payload)
            head = heads.get(task_type)
            if head is None:
                # What a SUBMIT carries before its payload: that of an empty one.
                head = heads[task_type] = plain(as_bytes(task_type), b"")[codec.HEADER_SIZE :]
            # encode_submit's frame, its header, head and payload joined once with the rest.
            frames += (pack(version, submit, len(head) + len(payload)), head, payload)
        elif version == 1:
            frames.append(encode_submit(version, *task))
        else:
            task_type, payload, options = task
            field = encoded.get(options)
            if field is None:
                field = encoded[options] = options_field(options)
            frames.append(
                taskflow.encode_submit(as_bytes(task_type), payload_bytes(payload), field)
            )
    return b"".join(frames)


OK_TYPES = (wire.Ok, taskflow.Ok)
"""What answers a SUBMIT that was accepted, in either version."""


def needs_version_2(version: int, what: str) -> None:
    """@raise NeedsVersion2: C{version} is 1."""
    if version != codec.VERSION:
        raise NeedsVersion2(f"{what} needs protocol version 2; the daemon speaks version 1 only")


def decode(version: int | None, message_type: int, payload: bytes) -> Any:
    """A frame of C{version} (the parser's), decoded: any message of either version."""
    return registry.decode(message_type, payload, version or wire.PROTOCOL_VERSION)


def refuses_version_2(version: int | None, message: object) -> bool:
    """Whether C{message}, the answer to HELLO, says the daemon speaks only version 1."""
    return version == wire.PROTOCOL_VERSION and isinstance(message, wire.Error)


QUEUE_ACTIONS = {
    "pause": codec.MessageType.PAUSE,
    "resume": codec.MessageType.RESUME,
    "purge": codec.MessageType.PURGE,
}


def encode_schedule(
    name: str,
    task_type: str | bytes,
    payload: str | bytes = b"",
    *,
    cron: str | None = None,
    every: float | None = None,
    timezone: str = "UTC",
    queue: str | None = None,
    priority: int | None = None,
    missed: str | admin.Missed = admin.Missed.ONCE,
    catch_up: int = 100,
) -> bytes:
    """
    SCHEDULE: a task of C{task_type} with C{payload} into C{queue}, on C{cron}
    (a 5-field expression in C{timezone}) or C{every} so many seconds.

    @param missed: C{"skip"}, C{"once"} or C{"all"} (at most C{catch_up} of
        them): what to fire for the times the daemon was down.
    @raise ValueError: not exactly one of C{cron} and C{every}, an interval
        that is not whole seconds, an unknown C{missed}, a field out of range.
    """
    if (cron is None) == (every is None):
        raise ValueError("a schedule has a cron expression or an interval (every=), not both")
    interval = 0
    if every is not None:
        interval = int(every) if math.isfinite(every) else 0
        if interval != every or interval < 1:
            raise ValueError(f"a schedule's interval is whole seconds, 1 or more, not {every}")
    if isinstance(missed, str):
        try:
            missed = admin.Missed[missed.upper()]
        except KeyError:
            raise ValueError(f"missed is skip, once or all, not {missed!r}") from None
    return admin.encode_schedule(
        admin.Schedule(
            name,
            as_bytes(task_type),
            payload_bytes(payload),
            cron or "",
            interval,
            timezone,
            queue,
            priority,
            missed,
            catch_up,
        )
    )


def encode_publish(server: Mapping[str, object], name: str, data: bytes) -> bytes:
    """
    PUBLISH of C{data} as C{name}, refused here when the daemon's answer to
    HELLO (C{server}) says it is more than the daemon takes: it would only
    refuse the whole frame, in words about frames.

    @raise PayloadTooLarge: C{data} is longer than the daemon's C{[shared] max_size}.
    @raise ValueError: a bad name.
    """
    limits = server.get("limits")
    limit = limits.get("max_shared_size") if isinstance(limits, dict) else None
    if isinstance(limit, int) and len(data) > limit:
        raise PayloadTooLarge(
            f"shared data of {len(data):,} bytes exceeds the daemon's [shared] max_size ({limit:,})"
        )
    return shared_data.encode_publish(name, data)
