"""What a check may hold while it waits, and the order it is graded in. `Admission` takes, in one step when a check's
headers arrive, its learner's rate-limit slot, its place among the checks waiting (per learner and in all) and the
bytes its body may hold; `FairQueue` starts gradings in turn, one learner's at a time, so that no learner's check
waits behind more than one check of each other learner, and at most `slots` run at once."""
from __future__ import annotations

import asyncio
import collections
import math
import time
from dataclasses import dataclass


class Refusal(Exception):
    """A request refused before any grading: its HTTP status, why, and the headers that go with it."""

    def __init__(self, status: int, why: str, headers: dict | None = None):
        super().__init__(why)
        self.status, self.why, self.headers = status, why, headers or {}


def busy(why: str, seconds: float) -> Refusal:
    """503 with when to try again: the service is full for now."""
    return Refusal(503, why, {"Retry-After": str(max(1, math.ceil(seconds)))})


class RateLimit:
    """At most `count` accepted checks per learner in any `window` seconds."""

    def __init__(self, count: int, window: float):
        self.count, self.window = count, window
        self.seen: dict[str, collections.deque] = collections.defaultdict(collections.deque)

    def retry_after(self, learner: str, now: float | None = None) -> float:
        """0 when the learner may check now, else the seconds until they may."""
        now = time.monotonic() if now is None else now
        q = self.seen[learner]
        while q and q[0] <= now - self.window:
            q.popleft()
        return 0.0 if len(q) < self.count else q[0] + self.window - now

    def take(self, learner: str, now: float | None = None) -> float:
        """Count a check now; the time it was counted at (what `give_back` takes)."""
        stamp = time.monotonic() if now is None else now
        self.seen[learner].append(stamp)
        return stamp

    def give_back(self, learner: str, stamp: float):
        """A check the grader failed costs the learner nothing."""
        if stamp in self.seen[learner]:
            self.seen[learner].remove(stamp)


@dataclass
class Ticket:
    """What one admitted check holds until it is answered: `size` bytes and, once its learner is known, a place
    among the checks waiting and the rate-limit slot counted at `stamp`, given back only when the grader failed
    (`release(charged=False)`)."""

    admission: Admission
    size: int
    learner: str = ""
    stamp: float | None = None
    released: bool = False

    def release(self, charged: bool = True):
        if self.released:
            return
        self.released = True
        a = self.admission
        a.held -= self.size
        if self.learner:
            a.waiting[self.learner] -= 1
            if not a.waiting[self.learner]:
                del a.waiting[self.learner]
        if not charged and self.stamp is not None:
            a.rate.give_back(self.learner, self.stamp)


class Admission:
    """The limits of what waits, each checked and taken in one step (called on the event loop with no await in
    between, so that checks arriving at once cannot all pass a limit that only one of them fits)."""

    def __init__(self, rate: tuple[int, float], per_learner: int, waiting: int, bytes_held: int, slots: int):
        self.rate = RateLimit(*rate)
        self.per_learner, self.most, self.bytes_held, self.slots = per_learner, waiting, bytes_held, slots
        self.waiting: collections.Counter[str] = collections.Counter()
        self.held = 0
        self.seconds = 10.0                    # a check's time, from request to answer (a running mean)

    def admit(self, learner: str, size: int) -> Ticket:
        """The ticket of `learner`'s check of `size` bytes (at most), or Refusal (429 over the rate limit, 503 with
        Retry-After when a cap of what waits is reached): `enter` and `hold` at once."""
        self._may_enter(learner)
        ticket = self.hold(size)
        self.enter(ticket, learner)
        return ticket

    def hold(self, size: int) -> Ticket:
        """A ticket for `size` bytes of a body not yet read, or 503 when the bytes held would pass their cap."""
        if self.held + size > self.bytes_held:
            raise busy("the checks waiting hold as many bytes as the service takes: try again shortly",
                       self.seconds * max(1, sum(self.waiting.values())) / self.slots)
        self.held += size
        return Ticket(self, size)

    def enter(self, ticket: Ticket, learner: str):
        """The learner's rate-limit slot and place among the checks waiting, taken for `ticket`, or Refusal."""
        self._may_enter(learner)
        self.waiting[learner] += 1
        ticket.learner, ticket.stamp = learner, self.rate.take(learner)

    def _may_enter(self, learner: str):
        wait = self.rate.retry_after(learner)
        if wait:
            n, window = self.rate.count, self.rate.window
            when = f"{wait / 60:.0f} minutes" if wait >= 60 else f"{wait:.0f} s"
            raise Refusal(429, f"at most {n} checks in {window / 60:g} minutes: try again in {when}",
                          {"Retry-After": str(max(1, round(wait)))})
        if self.waiting[learner] >= self.per_learner:
            raise busy(f"you have {self.waiting[learner]} checks waiting for their answer: send the next when one is "
                       "answered", self.seconds)
        total = sum(self.waiting.values())
        if total >= self.most:
            raise busy(f"the service has {total} checks waiting, as many as it takes: try again shortly",
                       self.seconds * total / self.slots)

    def answered(self, seconds: float):
        """A check took `seconds` from request to answer (what Retry-After estimates from)."""
        self.seconds = 0.8 * self.seconds + 0.2 * seconds


class FairQueue:
    """`slots` gradings at once; the next to start is the first waiting check of the learner served least recently
    (a learner never served before first), so a burst from one learner waits behind everyone else's next check."""

    def __init__(self, slots: int):
        self.slots = slots
        self.running = 0
        self.waiting: dict[str, collections.deque] = {}
        self.last_start: dict[str, float] = {}

    async def turn(self, learner: str):
        """Wait for this check's turn; the caller must call `done()` when its grading ends."""
        await self.join(learner)

    def join(self, learner: str) -> asyncio.Future:
        """Put a check of `learner`'s in the queue: the future is done when its turn comes (at once when a slot is
        free); the caller awaits it, then calls `done()` when its grading ends."""
        ready = asyncio.get_running_loop().create_future()
        self.waiting.setdefault(learner, collections.deque()).append(ready)
        self._start()
        return ready

    def position(self, ready: asyncio.Future) -> int | None:
        """The place of the check whose turn is `ready`, as the queue stands: 1 for the next to start, 2 for the one
        after it, ... (a check that arrives later from a learner served less recently may still go before it); None
        once its turn came. The order `_start` would give, played on a copy."""
        waiting = {name: list(q) for name, q in self.waiting.items()}
        last = dict(self.last_start)
        clock = max(last.values(), default=0.0)
        place = 0
        while waiting:
            learner = min(waiting, key=lambda name: last.get(name, -1.0))
            place += 1
            if waiting[learner].pop(0) is ready:
                return place
            if not waiting[learner]:
                del waiting[learner]
            clock += 1.0
            last[learner] = clock
        return None

    def count(self) -> int:
        """Checks waiting for their turn."""
        return sum(len(q) for q in self.waiting.values())

    def done(self):
        self.running -= 1
        self._start()

    def _start(self):
        while self.running < self.slots and self.waiting:
            learner = min(self.waiting, key=lambda name: self.last_start.get(name, -1.0))
            q = self.waiting[learner]
            ready = q.popleft()
            if not q:
                del self.waiting[learner]
            self.last_start[learner] = time.monotonic()
            self.running += 1
            ready.set_result(None)
