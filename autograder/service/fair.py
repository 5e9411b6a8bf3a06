"""A per-learner rate limit and a queue fair across learners: gradings start in turn, one learner's at a time, so
that no learner's check waits behind more than one check of each other learner, and at most `slots` run at once."""
from __future__ import annotations

import asyncio
import collections
import time


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

    def take(self, learner: str, now: float | None = None):
        self.seen[learner].append(time.monotonic() if now is None else now)

    def give_back(self, learner: str):
        """A check the grader failed costs the learner nothing."""
        if self.seen[learner]:
            self.seen[learner].pop()


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
        ready = asyncio.get_running_loop().create_future()
        self.waiting.setdefault(learner, collections.deque()).append(ready)
        self._start()
        await ready

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
