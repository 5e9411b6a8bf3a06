"""The HTTP service (tornado, as Jupyter's own server): a learner's check, the upload page, the instructor's table.

    POST check/<assignment>     the notebook as the body; `Authorization: Bearer <token>`; `?html=1` adds the page
    GET  ./                     the upload page (no script: a form)
    POST upload                 the form's notebook (and token); answers a page with the verdicts as text
    GET  instructor/checks.csv  per learner and assignment: how many checks, first and last (an instructor's token)

Standalone, the token is the roster's; as a JupyterHub service (`--hub`, under the hub's prefix) it is the hub
user's API token (in their server's kernel, JUPYTERHUB_API_TOKEN) and the upload page logs in through the hub (OAuth).
Refusals say why, before any grading: 401 no token, 403 a token of no learner or a closed assignment, 413 a
notebook over the size cap, 429 over the rate limit (with Retry-After), 400 not a notebook, 503 the grader failed
(not counted against the learner)."""
from __future__ import annotations

import asyncio
import csv
import datetime as dt
import html
import io
import os
import re
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING

import tornado.web

from autograder.service.fair import FairQueue, RateLimit
from autograder.service.grading import Checker, NotANotebook, Refused, on_worker
from autograder.service.roster import Roster

if TYPE_CHECKING:
    from jupyterhub.services.auth import HubOAuth

CSP = ("default-src 'none'; style-src 'unsafe-inline'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'")
PAGE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{title}</title>
<style>body{{font-family:system-ui,sans-serif;max-width:52em;margin:2em auto;padding:0 1em}}
pre{{white-space:pre-wrap;overflow-wrap:anywhere;background:#f6f6f6;padding:.6em}}label{{display:block;margin:.6em 0}}
</style></head><body><h1>{title}</h1>{body}</body></html>"""
FORM = """<p>Check your saved notebook against the hidden tests: you get what your feedback would say, in seconds.
Checks do not count as a submission and change no grade.</p>
<form method="post" action="upload" enctype="multipart/form-data">{xsrf}
<label>Assignment <select name="assignment">{options}</select></label>
<label>Your notebook <input type="file" name="notebook" accept=".ipynb" required></label>{token}
<button type="submit">Check my work</button></form>"""
TOKEN_FIELD = """
<label>Your check token <input type="password" name="token" required autocomplete="off"></label>"""
AUTHORIZATION = re.compile(r"(?:bearer|token)\s+(\S+)\s*$", re.IGNORECASE)


class Refusal(Exception):
    """A request refused before any grading: its HTTP status, why, and the headers that go with it."""

    def __init__(self, status: int, why: str, headers: dict | None = None):
        super().__init__(why)
        self.status, self.why, self.headers = status, why, headers or {}


class Service:
    """What the handlers share: the roster (or the hub), the rate limit, the fair queue, the graders, the check log."""

    def __init__(self, roster: Roster, state: Path, scheduler: str | None = None, hub: HubOAuth | None = None):
        self.roster, self.state = roster, Path(state)
        self.hub = hub                         # a jupyterhub HubOAuth when run as a hub service: the hub says who
        self.state.mkdir(parents=True, exist_ok=True)
        graders = 0 if scheduler else roster.max_concurrent      # with a scheduler, its workers keep their own
        self.checker = Checker(self.state, sorted(roster.assignments), graders)
        # With a Dask scheduler the gradings run on its workers (the state folder must be shared with them).
        self.client = None
        if scheduler:
            from distributed import Client

            self.client = Client(scheduler, timeout="60s")
        self.rate = RateLimit(*roster.rate)
        self.queue = FairQueue(roster.max_concurrent)
        self.pool = ThreadPoolExecutor(max_workers=roster.max_concurrent)
        self.log_path = self.state / "checks.csv"

    async def who(self, token: str | None) -> str:
        """The learner whose token this is (the roster's, or as a hub service the hub user's), or Refusal."""
        if not token:
            raise Refusal(401, "no check token: send it as `Authorization: Bearer <token>`",
                          {"WWW-Authenticate": "Bearer"})
        if self.hub is not None:
            return self.hub_learner(await self.hub.user_for_token(token, sync=False))
        learner = self.roster.learner(token)
        if learner is None:
            raise Refusal(403, "this check token belongs to no learner of the course")
        return learner

    def hub_user(self, user: dict | None) -> str:
        """The name of a hub user the hub lets reach this service, or Refusal."""
        assert self.hub is not None
        if not user or user.get("kind", "user") != "user":
            raise Refusal(403, "the hub knows no user by this token")
        if not self.hub.check_scopes(self.hub.access_scopes, user):
            raise Refusal(403, f"the hub does not let {user['name']} use the check service")
        return user["name"]

    def hub_learner(self, user: dict | None) -> str:
        """The learner a hub user is: one the hub lets reach this service, on the roster if it names any."""
        name = self.hub_user(user)
        if self.roster.names and name not in self.roster.names:
            raise Refusal(403, f"{name} is not a learner of this course")
        return name

    async def is_instructor(self, token: str | None) -> bool:
        if not token:
            return False
        if self.hub is None:
            return self.roster.is_instructor(token)
        try:
            return self.hub_user(await self.hub.user_for_token(token, sync=False)) in self.roster.instructors
        except Refusal:
            return False

    def admit(self, learner: str, assignment: str, size: int | None):
        """Refusal when `learner`'s check of `assignment` must be refused before any grading."""
        why = self.roster.closed(assignment)
        if why:
            raise Refusal(403, why)
        if size is not None and size > self.roster.max_bytes:
            raise Refusal(413, f"the notebook is {size} bytes, more than the {self.roster.max_bytes} a check takes")
        wait = self.rate.retry_after(learner)
        if wait:
            n, window = self.roster.rate
            when = f"{wait / 60:.0f} minutes" if wait >= 60 else f"{wait:.0f} s"
            raise Refusal(429, f"at most {n} checks in {window / 60:g} minutes: try again in {when}",
                          {"Retry-After": str(max(1, round(wait)))})

    async def check(self, learner: str, assignment: str, body: bytes, want_html: bool) -> tuple[int, dict]:
        self.rate.take(learner)
        queued = time.monotonic()
        await self.queue.turn(learner)
        started = time.monotonic()
        try:
            answer = await asyncio.get_running_loop().run_in_executor(
                self.pool, self.grade, assignment, learner, body, want_html)
            status, outcome = 200, f"{answer['total']:g}/{answer['points']:g}"
        except NotANotebook as e:             # counted: what a learner sends is theirs
            status, answer, outcome = 400, {"error": str(e)}, "not a notebook"
        except Refused as e:
            if e.grader:
                self.rate.give_back(learner)
            status, answer, outcome = (503 if e.grader else 422), {"error": str(e)}, str(e)[:60]
        finally:
            self.queue.done()
        answer["seconds"] = {"queued": round(started - queued, 2), "graded": round(time.monotonic() - started, 2)}
        self.record(learner, assignment, status, outcome, time.monotonic() - queued,
                    answer.pop("graded_by", "here"))
        return status, answer

    def grade(self, assignment: str, learner: str, body: bytes, want_html: bool) -> dict:
        """One check, graded here or, with a scheduler, on a Dask worker (blocks: run in the graders' threads)."""
        if self.client is None:
            return self.checker.check(assignment, learner, body, want_html)
        return self.client.submit(on_worker, str(self.state.resolve()), assignment, learner, body, want_html,
                                  pure=False).result()

    def record(self, learner: str, assignment: str, status: int, outcome: str, seconds: float, where: str):
        new = not self.log_path.exists()
        with open(self.log_path, "a", newline="") as f:
            w = csv.writer(f)
            if new:
                w.writerow(["time", "learner", "assignment", "status", "outcome", "seconds", "graded by"])
            w.writerow([dt.datetime.now(dt.UTC).isoformat(timespec="seconds"), learner, assignment, status,
                        outcome, f"{seconds:.1f}", where])

    def summary(self) -> str:
        """Per learner and assignment: how many checks were made, the first and the last."""
        seen: dict[tuple[str, str], list[str]] = {}
        if self.log_path.exists():
            with open(self.log_path, newline="") as f:
                for row in csv.DictReader(f):
                    seen.setdefault((row["learner"], row["assignment"]), []).append(row["time"])
        out = io.StringIO()
        w = csv.writer(out)
        w.writerow(["learner", "assignment", "checks", "first", "last"])
        for (learner, asg), times in sorted(seen.items()):
            w.writerow([learner, asg, len(times), times[0], times[-1]])
        return out.getvalue()


def text_of(answer: dict) -> str:
    """The answer as the learner reads it in the notebook: the score, the notes, each graded cell's verdict."""
    if "error" in answer:
        return f"Check failed: {answer['error']}"
    lines = [f"{answer['assignment']}: {answer['total']:g} / {answer['points']:g} points (a check: no grade changed)"]
    lines += [n.replace("**", "") for n in answer.get("notes", [])]
    lines += [c["text"] for c in answer["cells"]]
    return "\n".join(lines)


class Base(tornado.web.RequestHandler):
    service: Service

    def initialize(self, service: Service):
        self.service = service

    def set_default_headers(self):
        self.set_header("Content-Security-Policy", CSP)
        self.set_header("X-Content-Type-Options", "nosniff")
        self.set_header("Cache-Control", "no-store")

    def bearer(self) -> str | None:
        """The token in the Authorization header (`Bearer <token>`, or `token <token>` as JupyterHub writes it)."""
        m = AUTHORIZATION.match(self.request.headers.get("Authorization", ""))
        return m.group(1) if m else None

    def refuse(self, r: Refusal):
        for k, v in r.headers.items():
            self.set_header(k, v)
        self.set_status(r.status)
        self.finish({"error": r.why})


@tornado.web.stream_request_body
class CheckHandler(Base):
    """POST check/<assignment>: refused from its headers alone when it must be; the body read up to the cap."""

    def check_xsrf_cookie(self):
        """No cookie is read here: the token is in the header, which another site cannot make a browser send."""

    async def prepare(self):
        self.body_parts: list[bytes] = []
        self.size = 0
        length = self.request.headers.get("Content-Length")
        try:
            self.learner = await self.service.who(self.bearer())
            self.service.admit(self.learner, self.path_kwargs["assignment"],
                               int(length) if length and length.isdigit() else None)
        except Refusal as r:
            self.refuse(r)

    def data_received(self, chunk: bytes):
        self.size += len(chunk)
        if self.size > self.service.roster.max_bytes:
            if not self._finished:
                self.refuse(Refusal(413, f"the notebook is more than the {self.service.roster.max_bytes} bytes a "
                                         "check takes"))
            return
        self.body_parts.append(chunk)

    async def post(self, assignment: str):
        if self._finished:
            return
        status, answer = await self.service.check(self.learner, assignment, b"".join(self.body_parts),
                                                  self.get_argument("html", "") == "1")
        self.set_status(status)
        answer["text"] = text_of(answer)
        self.finish(answer)


class UploadPage(Base):
    """The form: the learner's notebook and, standalone, their token (as a hub service the hub's login says who)."""

    def get(self):
        options = "".join(f'<option value="{html.escape(a)}">{html.escape(a)}</option>'
                          for a in sorted(self.service.roster.assignments))
        token = "" if self.service.hub else TOKEN_FIELD
        self.finish(PAGE.format(title="Check my work", body=FORM.format(
            options=options, token=token, xsrf=self.xsrf_form_html())))

    async def learner(self) -> str:
        return await self.service.who(self.get_body_argument("token", ""))

    async def post(self):
        files = self.request.files.get("notebook") or [{}]
        assignment = self.get_body_argument("assignment", "")
        body = files[0].get("body", b"")
        try:
            learner = await self.learner()
            self.service.admit(learner, assignment, len(body))
        except Refusal as r:
            status, text = r.status, f"Check refused: {r.why}"
            for k, v in r.headers.items():
                self.set_header(k, v)
        else:
            status, answer = await self.service.check(learner, assignment, body, False)
            text = text_of(answer)
        self.set_status(status)
        self.finish(PAGE.format(title="Check my work", body=f'<pre id="answer">{html.escape(text)}</pre>'
                                                             '<p><a href="./">Check again</a></p>'))


class Instructor(Base):
    async def get(self):
        if not await self.service.is_instructor(self.bearer()):
            return self.refuse(Refusal(403, "the instructor's token is needed"))
        self.set_header("Content-Type", "text/csv; charset=utf-8")
        self.finish(self.service.summary())


def app(service: Service, prefix: str = "/") -> tornado.web.Application:
    """The service's routes under `prefix` (a hub service's is the hub's /services/<name>/)."""
    kw = {"service": service}
    page: type[UploadPage] = UploadPage
    routes: list = []
    if service.hub is not None:
        from autograder.service.hub import CALLBACK, login_page

        page = login_page(UploadPage)
        routes.append((prefix + "oauth_callback", CALLBACK))
    routes += [
        (prefix + r"check/(?P<assignment>[A-Za-z0-9_]+)", CheckHandler, kw),
        (prefix + "upload", page, kw),
        (prefix + r"instructor/checks\.csv", Instructor, kw),
        (prefix, page, kw),
    ]
    return tornado.web.Application(routes, max_body_size=64 * 1024 * 1024, xsrf_cookies=True,
                                   cookie_secret=os.urandom(32))


def serve(roster_path: Path, state: Path, host: str = "127.0.0.1", port: int = 8765, scheduler: str | None = None,
          hub: bool = False):
    """Run the service until interrupted (every assignment of the roster prepared first); as a hub service, where
    and under which prefix the hub says (JUPYTERHUB_SERVICE_URL, JUPYTERHUB_SERVICE_PREFIX)."""
    import tornado.ioloop

    prefix = "/"
    auth = None
    if hub:
        from autograder.service.hub import hub_auth, where

        auth = hub_auth()
        host, port, prefix = where()
    service = Service(Roster.load(roster_path), state, scheduler, auth)
    app(service, prefix).listen(port, host, max_buffer_size=service.roster.max_bytes + 1024 * 1024)
    print(f"checking {', '.join(sorted(service.roster.assignments))} at http://{host}:{port}{prefix}", flush=True)
    tornado.ioloop.IOLoop.current().start()
