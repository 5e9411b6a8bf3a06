"""The HTTP service (tornado, as Jupyter's own server): a learner's check, the upload page, the instructor's table.

    POST check/<assignment>     the notebook as the body; `Authorization: Bearer <token>`; `?html=1` adds the page;
                                answered once graded or, `Prefer: respond-async`, at once: 202, the check's id
    GET  checks/<id>            that check (same token): 202 with its place in the queue and seconds, then its answer
    GET  ./                     the upload page (no script: a form), or standalone the token's form until logged in
    POST login                  standalone: the token's form; sets the login cookie the upload is known by
    POST upload                 the form's notebook (its learner known by the login cookie, or the hub's): at once to
    GET  upload/<id>            its check's page, as checks/<id> says, reloaded every REFRESH s; then the verdicts
    GET  instructor/checks.csv  per learner and assignment: how many checks, first and last (an instructor's token)
Standalone, the token is the roster's; as a JupyterHub service (`--hub`, under the hub's prefix) it is the hub
user's API token (in their server's kernel, JUPYTERHUB_API_TOKEN) and the upload page logs in through the hub (OAuth).
The port is bound first; until the graders are ready every check answers 503 "warming up" with Retry-After.
Who sends a check is known from its headers, before anything is taken for it: a connection is anonymous until then,
and anonymous connections are few and short (autograder.service.gate). Refusals say why, before the body is read:
401 no token (no login), 403 a token of no learner or a closed assignment, 413 a notebook over the size cap, 429
over the rate limit, 503 with Retry-After when the learner's or the service's checks waiting, the bytes they hold or
the open connections are at their cap (autograder.service.fair). After it: 400 not a notebook and 422 a notebook
whose grading it made fail (each counted), 503 the grader failed (not counted); a check answered at once holds all
that a waiting one holds until it is answered (autograder.service.pending)."""
from __future__ import annotations

import asyncio
import csv
import datetime as dt
import errno
import gc
import html
import io
import os
import re
import signal
import threading
import time
import traceback
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING

import tornado.httputil
import tornado.web
from tornado.http1connection import HTTP1Connection

from autograder.classroom.report import csv_cell
from autograder.service.fair import Admission, FairQueue, Refusal, Ticket, busy
from autograder.service.gate import Gate, GatedServer
from autograder.service.grading import GRADER_FAILED, Checker, NotANotebook, Refused, on_worker
from autograder.service.pending import KEPT, Checks, Pending
from autograder.service.roster import Roster

if TYPE_CHECKING:
    from distributed import Client as DaskClient
    from jupyterhub.services.auth import HubOAuth

CSP = ("default-src 'none'; style-src 'unsafe-inline'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'")
PAGE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">{head}<title>{title}</title>
<style>body{{font-family:system-ui,sans-serif;max-width:52em;margin:2em auto;padding:0 1em}}
pre{{white-space:pre-wrap;overflow-wrap:anywhere;background:#f6f6f6;padding:.6em}}label{{display:block;margin:.6em 0}}
</style></head><body><h1>{title}</h1>{body}</body></html>"""
FORM = """<p>Check your saved notebook against the hidden tests: you get what your feedback would say, in seconds.
Checks do not count as a submission and change no grade.</p>{who}
<form method="post" action="upload" enctype="multipart/form-data">{xsrf}
<label>Assignment <select name="assignment">{options}</select></label>
<label>Your notebook <input type="file" name="notebook" accept=".ipynb" required></label>
<button type="submit">Check my work</button></form>"""
LOGIN = """<p>Log in with the check token your instructor gave you; then upload your saved notebook.</p>
<form method="post" action="login">{xsrf}
<label>Your check token <input type="password" name="token" required autocomplete="off"></label>
<button type="submit">Log in</button></form>"""
WHO = """
<p>Checking as {learner} (<a href="login">another token</a>).</p>"""
AUTHORIZATION = re.compile(r"(?:bearer|token)\s+(\S+)\s*$", re.IGNORECASE)
COOKIE = "course-check-learner"      # standalone: the login cookie (signed, HttpOnly, SameSite=Strict): the learner
RESPOND_ASYNC = re.compile(r"(?:^|[\s,;])respond-async(?:$|[\s,;])", re.IGNORECASE)      # RFC 7240's preference
POLL = 1                             # seconds a client of checks/<id> is asked to wait before it asks again
REFRESH = 2                          # seconds between the reloads of a waiting check's page


FORM_MARGIN = 64 << 10              # what the upload form holds besides the notebook (its fields, the boundaries)
ANONYMOUS_BYTES = 16 << 10          # the most of a body read before its sender is known (the login form's)
HEADER_BYTES = 64 << 10             # the most of a request's headers
WARMING = "the check service is warming up (its graders are being prepared): try again in a minute"
FORGOTTEN = (f"no check of yours has this id: an answer is kept {KEPT / 60:g} minutes after it is given, and a check "
             "sent before the service last started is lost (check again)")


class Service:
    """What the handlers share: the roster (or the hub), what waits and in which order, the graders, the check log."""

    def __init__(self, roster: Roster, state: Path, scheduler: str | None = None, hub: HubOAuth | None = None):
        self.roster, self.state, self.scheduler = roster, Path(state), scheduler
        self.hub = hub                         # a jupyterhub HubOAuth when run as a hub service: the hub says who
        self.state.mkdir(parents=True, exist_ok=True)
        self.ready = False                     # set by warm_up(), once every assignment and grader is prepared
        self.checker: Checker | None = None
        self.client: DaskClient | None = None   # set by warm_up() with a Dask scheduler
        self.admission = Admission(roster.rate, roster.max_waiting_per_learner, roster.max_waiting,
                                   roster.max_bytes_held, roster.max_concurrent)
        self.queue = FairQueue(roster.max_concurrent)
        # as a hub service every connection comes from the hub's proxy (which reads each client's headers itself):
        # one peer for all, bounded by the cap on all anonymous connections
        self.gate = Gate(roster.max_connections, roster.max_anonymous,
                         roster.max_anonymous if hub is not None else roster.max_anonymous_per_peer)
        self.pool = ThreadPoolExecutor(max_workers=roster.max_concurrent)
        self.pending = Checks()                # the checks answered later, by id
        self.log_path = self.state / "checks.csv"

    def warm_up(self):
        """Prepare every assignment's grading folder and the warm graders (blocks: run beside the server, which
        meanwhile answers that it is warming up); with a Dask scheduler, connect to it: its workers keep their own
        graders, and the state folder must be shared with them."""
        graders = 0 if self.scheduler else self.roster.max_concurrent
        self.checker = Checker(self.state, sorted(self.roster.assignments), graders)
        if self.scheduler:
            from distributed import Client

            self.client = Client(self.scheduler, timeout="60s")
        self.ready = True

    def close(self):
        """Stop: checks still waiting are dropped, the idle graders killed (a check under way ends with its grading)."""
        self.pool.shutdown(wait=False, cancel_futures=True)
        if self.checker is not None:
            self.checker.close()
        if self.client is not None:
            self.client.close()

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

    def admit(self, learner: str, assignment: str, size: int | None) -> Ticket:
        """The ticket of `learner`'s check of `assignment` (a body of `size` bytes, None when not said: then the
        largest taken), or Refusal: every limit checked and taken in one step, before the body is read."""
        why = self.roster.closed(assignment)
        if why:
            raise Refusal(403, why)
        if size is not None and size > self.roster.max_bytes:
            raise Refusal(413, f"the notebook is {size} bytes, more than the {self.roster.max_bytes} a check takes")
        return self.admission.admit(learner, self.roster.max_bytes if size is None else size)

    def admit_form(self, learner: str, size: int | None) -> Ticket:
        """The ticket of `learner`'s upload (a form of `size` bytes, None when not said: then the largest taken), its
        assignment not yet known (it is in the form), or Refusal: every limit taken at once, before the body is read."""
        cap = self.roster.max_bytes + FORM_MARGIN
        if size is not None and size > cap:
            raise Refusal(413, f"the notebook is more than the {self.roster.max_bytes} bytes a check takes")
        return self.admission.admit(learner, cap if size is None else size)

    def form_refusal(self, assignment: str, size: int) -> Refusal | None:
        """Why an admitted upload's check of `assignment` (a notebook of `size` bytes) is refused, once its form is
        read; None when it is not."""
        why = self.roster.closed(assignment)
        if why:
            return Refusal(403, why)
        if size > self.roster.max_bytes:
            return Refusal(413, f"the notebook is {size} bytes, more than the {self.roster.max_bytes} a check takes")
        return None

    async def check(self, ticket: Ticket, assignment: str, body: bytes, want_html: bool,
                    turn: asyncio.Future | None = None) -> tuple[int, dict]:
        """Grade an admitted check in its turn (`turn`, its place in the queue, when it has one already); its ticket is
        given back when it is answered, its rate-limit slot too when the grader failed for a reason the notebook did
        not cause."""
        learner, charged = ticket.learner, True
        queued = time.monotonic()
        try:
            await (turn if turn is not None else self.queue.join(learner))
            started = time.monotonic()
            try:
                answer = await asyncio.get_running_loop().run_in_executor(
                    self.pool, self.grade, assignment, learner, body, want_html)
                status, outcome = 200, f"{answer['total']:g}/{answer['points']:g}"
            except NotANotebook as e:             # counted: what a learner sends is theirs
                status, answer, outcome = 400, {"error": str(e)}, "not a notebook"
            except Refused as e:
                charged = not e.grader
                status, answer, outcome = (503 if e.grader else 422), {"error": str(e)}, str(e)[:60]
            finally:
                self.queue.done()
        finally:
            ticket.release(charged)
        self.admission.answered(time.monotonic() - queued)
        answer["seconds"] = {"queued": round(started - queued, 2), "graded": round(time.monotonic() - started, 2)}
        self.record(learner, assignment, status, outcome, time.monotonic() - queued,
                    answer.pop("graded_by", "here"))
        return status, answer

    def receive(self, ticket: Ticket, assignment: str, body: bytes, want_html: bool) -> Pending:
        """An admitted check answered later: in the queue now, graded in its turn while its client goes on; how it
        goes, then its answer (with its text), kept under its id."""
        p = self.pending.new(ticket.learner, assignment)
        p.turn = self.queue.join(ticket.learner)

        async def graded():
            try:
                status, answer = await self.check(ticket, assignment, body, want_html, p.turn)
            except Exception:  # noqa: BLE001 - the service's own failure: logged, and the check answered 503
                traceback.print_exc()
                status, answer = 503, {"error": GRADER_FAILED}
            answer["text"] = text_of(answer)
            self.pending.done(p, status, answer)

        p.task = asyncio.ensure_future(graded())
        return p

    def progress(self, p: Pending) -> dict:
        """How a check answered later goes, while it waits: its id, state ("queued" or "grading"), place in the queue
        (1: the next to start), the checks waiting in all, and the seconds since it was received; as text too."""
        seconds = round(time.monotonic() - p.received)
        state = p.state()
        out = {"id": p.id, "assignment": p.assignment, "state": state, "seconds": seconds,
               "waiting": self.queue.count()}
        if state == "queued" and p.turn is not None:
            out["position"] = self.queue.position(p.turn)
            out["text"] = f"Check received: waiting, number {out['position']} in the queue ({seconds} s so far)"
        else:
            out["text"] = f"Check received: your notebook is being graded ({seconds} s so far)"
        return out

    def grade(self, assignment: str, learner: str, body: bytes, want_html: bool) -> dict:
        """One check, graded here or, with a scheduler, on a Dask worker (blocks: run in the graders' threads). Any
        failure but Refused and NotANotebook (a worker lost, a folder that could not be made) is the grader's."""
        try:
            if self.client is None:
                assert self.checker is not None
                return self.checker.check(assignment, learner, body, want_html)
            return self.client.submit(on_worker, str(self.state.resolve()), assignment, learner, body, want_html,
                                      pure=False).result()
        except (Refused, NotANotebook):
            raise
        except Exception:  # noqa: BLE001 - the grader's failure, not the notebook's: logged, answered 503
            traceback.print_exc()
            raise Refused(GRADER_FAILED, grader=True) from None

    def record(self, learner: str, assignment: str, status: int, outcome: str, seconds: float, where: str):
        new = not self.log_path.exists()
        with open(self.log_path, "a", newline="") as f:
            w = csv.writer(f)
            if new:
                w.writerow(["time", "learner", "assignment", "status", "outcome", "seconds", "graded by"])
            w.writerow([csv_cell(x) for x in (dt.datetime.now(dt.UTC).isoformat(timespec="seconds"), learner,
                                               assignment, status, outcome, f"{seconds:.1f}", where)])

    def summary(self) -> str:
        """Per learner and assignment: how many checks were counted, the first and the last, and how many more failed
        on the grader's side (not counted); every cell one a spreadsheet reads as text, never as a formula."""
        seen: dict[tuple[str, str], list[str]] = {}
        failed: dict[tuple[str, str], int] = {}
        if self.log_path.exists():
            with open(self.log_path, newline="") as f:
                for row in csv.DictReader(f):
                    key = (row["learner"], row["assignment"])
                    seen.setdefault(key, [])
                    if row["status"] == "503":
                        failed[key] = failed.get(key, 0) + 1
                    else:
                        seen[key].append(row["time"])
        out = io.StringIO()
        w = csv.writer(out)
        w.writerow(["learner", "assignment", "checks", "first", "last", "grader failures"])
        for (learner, asg), times in sorted(seen.items()):
            w.writerow([csv_cell(x) for x in (learner, asg, len(times), times[0] if times else "",
                                              times[-1] if times else "", failed.get((learner, asg), 0))])
        return out.getvalue()


def text_of(answer: dict) -> str:
    """The answer as the learner reads it in the notebook: the score, the notes, each graded cell's verdict."""
    if "error" in answer:
        return f"Check failed: {answer['error']}"
    lines = [f"{answer['assignment']}: {answer['total']:g} / {answer['points']:g} points (a check: no grade changed)"]
    lines += [f"Grader note: {n}" for n in answer.get("notes", [])]
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

    def warm(self):
        """Refusal while the graders are being prepared."""
        if not self.service.ready:
            raise busy(WARMING, 10)

    def pending_check(self, check_id: str, learner: str) -> Pending:
        """`learner`'s check of this id: anyone else's, or one whose answer was forgotten, is no check of theirs."""
        p = self.service.pending.get(check_id, learner)
        if p is None:
            raise Refusal(404, FORGOTTEN)
        return p

    def refuse(self, r: Refusal):
        for k, v in r.headers.items():
            self.set_header(k, v)
        self.set_status(r.status)
        self.finish({"error": r.why})


class Streamed(Base):
    """A POST whose sender is known from its headers (`identify`), and only then admitted (`admit`): its connection is
    no longer anonymous, and its body may be as large and take as long as a learner's notebook may. The body is read
    once admitted, into the bytes its ticket holds; the ticket is given back when the check is answered, or here when
    the request ends before its check started (refused, cut off)."""

    ticket: Ticket | None = None
    checking = False

    async def prepare(self):
        self.body_parts: list[bytes] = []
        self.size = 0
        if self.request.method != "POST":
            return
        length = self.request.headers.get("Content-Length")
        try:
            self.warm()
            learner = await self.identify()
            self.identified()
            self.ticket = await self.admit(learner, int(length) if length and length.isdigit() else None)
        except Refusal as r:
            self.refuse(r)

    async def identify(self) -> str:
        """The learner who sends this request, from its headers alone, or Refusal."""
        raise NotImplementedError

    def identified(self):
        """This request's sender is known: its connection leaves the anonymous ones, and its body may be a notebook
        (up to the cap, within `body_timeout`) rather than what the server reads from anyone (ANONYMOUS_BYTES, within
        `anonymous_timeout`)."""
        connection = self.request.connection
        if isinstance(connection, HTTP1Connection):
            self.service.gate.identified(connection.stream)
            connection.set_max_body_size(self.service.roster.max_bytes + FORM_MARGIN)
            connection.set_body_timeout(self.service.roster.body_timeout)

    async def admit(self, learner: str, size: int | None) -> Ticket:
        raise NotImplementedError

    def cap(self) -> int:
        return self.service.roster.max_bytes

    def data_received(self, chunk: bytes):
        self.size += len(chunk)
        if self.size > self.cap():          # a body longer than its headers said (chunked): the learner's, counted
            if not self._finished:
                self.refuse(Refusal(413, f"the notebook is more than the {self.service.roster.max_bytes} bytes a "
                                         "check takes"))
            return
        self.body_parts.append(chunk)

    async def checked(self, assignment: str, body: bytes, want_html: bool) -> tuple[int, dict]:
        assert self.ticket is not None
        self.checking = True
        return await self.service.check(self.ticket, assignment, body, want_html)

    def received(self, assignment: str, body: bytes, want_html: bool) -> Pending:
        """The check, answered later: its ticket is the check's now."""
        assert self.ticket is not None
        self.checking = True
        return self.service.receive(self.ticket, assignment, body, want_html)

    def on_finish(self):
        if self.ticket is not None and not self.checking:
            self.ticket.release()

    def on_connection_close(self):
        self.on_finish()


@tornado.web.stream_request_body
class CheckHandler(Streamed):
    """POST check/<assignment>: admitted or refused from its headers alone; the body read up to the cap."""

    def check_xsrf_cookie(self):
        """No cookie is read here: the token is in the header, which another site cannot make a browser send."""

    async def identify(self) -> str:
        return await self.service.who(self.bearer())

    async def admit(self, learner: str, size: int | None) -> Ticket:
        return self.service.admit(learner, self.path_kwargs["assignment"], size)

    async def post(self, assignment: str):
        if self._finished:
            return
        body, self.body_parts = b"".join(self.body_parts), []
        want_html = self.get_argument("html", "") == "1"
        if RESPOND_ASYNC.search(self.request.headers.get("Prefer", "")):
            p = self.received(assignment, body, want_html)
            where = f"../checks/{p.id}"           # relative to this request's URL, whatever prefix a proxy adds
            self.set_status(202)
            self.set_header("Preference-Applied", "respond-async")
            self.set_header("Location", where)
            self.set_header("Retry-After", str(POLL))
            return self.finish({**self.service.progress(p), "poll": where})
        status, answer = await self.checked(assignment, body, want_html)
        self.set_status(status)
        answer["text"] = text_of(answer)
        self.finish(answer)


class CheckStatus(Base):
    """GET checks/<id>: how a check sent with `Prefer: respond-async` goes, to the learner who sent it (the same token;
    anyone else is told there is no such check): 202 while it waits, then the check's own status and answer."""

    async def get(self, check_id: str):
        try:
            p = self.pending_check(check_id, await self.service.who(self.bearer()))
        except Refusal as r:
            return self.refuse(r)
        if p.answer is None:
            self.set_status(202)
            self.set_header("Retry-After", str(POLL))
            return self.finish(self.service.progress(p))
        self.set_status(p.status or 200)
        self.finish(p.answer)


def page(body: str, head: str = "") -> str:
    return PAGE.format(title="Check my work", body=body, head=head)


class Page(Base):
    """A page of the upload form's: its answers are pages, its refusals too."""

    home = "./"                          # the upload form, from this page
    body_read = False                    # a form's body, read: its XSRF field may be checked

    def refuse(self, r: Refusal):
        for k, v in r.headers.items():
            self.set_header(k, v)
        self.answer(r.status, f"Check refused: {r.why}")

    def answer(self, status: int, text: str):
        self.set_status(status)
        self.finish(page(f'<pre id="answer">{html.escape(text)}</pre><p><a href="{self.home}">Check again</a></p>'))

    async def identify(self) -> str:
        """The learner whose browser this is (standalone: the login cookie's), or Refusal."""
        learner = self.logged_in()
        if learner is None:
            raise Refusal(401, "log in with your check token first (the upload page asks for it)")
        return learner

    def logged_in(self) -> str | None:
        """Standalone: the learner of the login cookie (signed by this service, for a day at most), None for none."""
        value = self.get_signed_cookie(COOKIE, max_age_days=1)
        learner = value.decode() if value else None
        return learner if learner in self.service.roster.names else None


class Login(Page):
    """Standalone: the token's form, read whole (it is small: what the server reads of anyone's body) and checked by
    tornado's XSRF check; a learner's token sets the login cookie (their name, signed by the service: not the token)
    that the upload is known by from its headers."""

    def get(self):
        self.finish(page(LOGIN.format(xsrf=self.xsrf_form_html())))

    async def post(self):
        try:
            learner = await self.service.who(self.get_body_argument("token", ""))
        except Refusal as r:
            return self.refuse(r)
        self.set_signed_cookie(COOKIE, learner, expires_days=None, httponly=True, samesite="Strict",
                               secure=self.request.protocol == "https")
        self.redirect("./", status=303)


@tornado.web.stream_request_body
class UploadPage(Page, Streamed):
    """The form: the learner's notebook. Who sends it is known from its headers (standalone the login cookie; as a hub
    service the hub's login), and they are admitted then, as a check is; its assignment, in the form, is checked once
    the form is read, with its XSRF field (a form's check that refuses gives the learner's check back)."""

    async def get(self):
        options = "".join(f'<option value="{html.escape(a)}">{html.escape(a)}</option>'
                          for a in sorted(self.service.roster.assignments))
        if self.service.hub is not None:
            who = ""
        else:
            learner = self.logged_in()
            if learner is None:
                return self.finish(page(LOGIN.format(xsrf=self.xsrf_form_html())))
            who = WHO.format(learner=html.escape(learner))
        self.finish(page(FORM.format(options=options, who=who, xsrf=self.xsrf_form_html())))

    def check_xsrf_cookie(self):
        """The form's `_xsrf` field is in its body: checked once the body is read."""
        if self.body_read:
            super().check_xsrf_cookie()

    def cap(self) -> int:
        return self.service.roster.max_bytes + FORM_MARGIN

    async def admit(self, learner: str, size: int | None) -> Ticket:
        return self.service.admit_form(learner, size)

    async def post(self):
        if self._finished:
            return
        tornado.httputil.parse_body_arguments(self.request.headers.get("Content-Type", ""), b"".join(self.body_parts),
                                              self.request.body_arguments, self.request.files, self.request.headers)
        for k, v in self.request.body_arguments.items():
            self.request.arguments.setdefault(k, []).extend(v)
        self.body_parts = []
        self.body_read = True
        assert self.ticket is not None
        files = self.request.files.get("notebook") or []
        body = files[0].get("body", b"") if files else b""
        assignment = self.get_body_argument("assignment", "")
        try:
            self.check_xsrf_cookie()
            refusal = self.service.form_refusal(assignment, len(body))
        except tornado.web.HTTPError:
            self.ticket.release(charged=False)
            raise
        if refusal is not None:
            self.ticket.release(charged=False)
            return self.refuse(refusal)
        self.redirect(f"upload/{self.received(assignment, body, False).id}", status=303)


class UploadStatus(Page):
    """GET upload/<id>: an upload's check, to the learner whose browser sent it (anyone else is told there is no such
    check). While it waits, what it is doing and the seconds so far, in a page that reloads itself every REFRESH s (a
    meta refresh: the page runs no script); then its verdicts as text, as the check's own status."""

    home = "../"

    async def get(self, check_id: str):
        try:
            p = self.pending_check(check_id, await self.identify())
        except Refusal as r:
            return self.refuse(r)
        if p.answer is None:
            self.set_status(202)
            text = self.service.progress(p)["text"]
            return self.finish(page(f'<p id="progress" role="status">{html.escape(text)}</p><p>This page shows the '
                                    "answer when it comes: you may keep working meanwhile.</p>",
                                    head=f'<meta http-equiv="refresh" content="{REFRESH}">'))
        self.answer(p.status or 200, p.answer["text"])


class Instructor(Base):
    async def get(self):
        if not await self.service.is_instructor(self.bearer()):
            return self.refuse(Refusal(403, "the instructor's token is needed"))
        self.set_header("Content-Type", "text/csv; charset=utf-8")
        self.finish(self.service.summary())


def app(service: Service, prefix: str = "/") -> tornado.web.Application:
    """The service's routes under `prefix` (a hub service's is the hub's /services/<name>/)."""
    kw = {"service": service}
    upload: type[UploadPage] = UploadPage
    status: type[UploadStatus] = UploadStatus
    routes: list = []
    if service.hub is not None:
        from autograder.service.hub import CALLBACK, login_page

        upload, status = login_page(UploadPage), login_page(UploadStatus)
        routes.append((prefix + "oauth_callback", CALLBACK))
    else:
        routes.append((prefix + "login", Login, kw))
    routes += [
        (prefix + r"check/(?P<assignment>[A-Za-z0-9_]+)", CheckHandler, kw),
        (prefix + r"checks/(?P<check_id>[A-Za-z0-9_-]+)", CheckStatus, kw),
        (prefix + "upload", upload, kw),
        (prefix + r"upload/(?P<check_id>[A-Za-z0-9_-]+)", status, kw),
        (prefix + r"instructor/checks\.csv", Instructor, kw),
        (prefix, upload, kw),
    ]
    return tornado.web.Application(routes, xsrf_cookies=True, cookie_secret=os.urandom(32))


def server(service: Service, prefix: str = "/") -> GatedServer:
    """The service's HTTP server. What it reads of anyone: headers of at most HEADER_BYTES within
    `anonymous_timeout`, a body of at most ANONYMOUS_BYTES within it too; a request whose sender is known from its
    headers may send a notebook (`Streamed.identified`). One request a connection (none kept alive): a connection
    is anonymous only until its request says who sends it, and closes with its answer."""
    r = service.roster
    s = GatedServer(app(service, prefix), no_keep_alive=True, max_header_size=HEADER_BYTES,
                    idle_connection_timeout=r.anonymous_timeout, max_body_size=ANONYMOUS_BYTES,
                    body_timeout=r.anonymous_timeout, max_buffer_size=r.max_bytes + FORM_MARGIN + (1 << 20))
    s.gate = service.gate
    return s


def serve(roster_path: Path, state: Path, host: str = "127.0.0.1", port: int = 8765, scheduler: str | None = None,
          hub: bool = False):
    """Run the service until interrupted: bind the port first (a clear error when it is taken), then prepare every
    assignment of the roster and the graders while answering that it is warming up; as a hub service, where and
    under which prefix the hub says (JUPYTERHUB_SERVICE_URL, JUPYTERHUB_SERVICE_PREFIX)."""
    import tornado.ioloop

    prefix = "/"
    auth = None
    if hub:
        from autograder.service.hub import hub_auth, where

        auth = hub_auth()
        host, port, prefix = where()
    service = Service(Roster.load(roster_path), state, scheduler, auth)
    try:
        server(service, prefix).listen(port, host)
    except OSError as e:
        taken = e.errno == errno.EADDRINUSE
        raise SystemExit(f"the check service cannot listen on {host}:{port}: "
                         + ("the port is taken (is the service already running?); choose another with --port" if taken
                            else e.strerror or str(e))) from None
    url = f"http://{host}:{port}{prefix}"
    print(f"warming up at {url}", flush=True)
    loop = tornado.ioloop.IOLoop.current()
    # SIGINT (how a hub stops its services, before SIGTERM) and SIGTERM stop the service, whatever it inherited: a
    # process started with SIGINT ignored (a shell's background job) would otherwise wait for the hub's SIGTERM
    for sig in (signal.SIGINT, signal.SIGTERM):
        asyncio.get_event_loop().add_signal_handler(sig, loop.stop)

    failed: list[BaseException] = []

    def warmed(error: BaseException | None):
        if error is not None:
            failed.append(error)
            loop.stop()
        else:
            print(f"checking {', '.join(sorted(service.roster.assignments))} at {url}", flush=True)

    def warm_up():
        """Beside the loop, in a thread that does not hold the service up when it is stopped while warming up."""
        try:
            service.warm_up()
        except BaseException as e:     # noqa: BLE001 (said by the loop: the service cannot start)
            loop.add_callback(warmed, e)
        else:
            loop.add_callback(warmed, None)

    threading.Thread(target=warm_up, name="warm-up", daemon=True).start()
    loop.start()
    service.close()
    print("stopped", flush=True)
    # What is left is the interpreter's own end, whose collections would walk every object of the 1300 modules loaded
    # (a second or more): none of them holds anything to finish, the graders and their sandboxes are gone.
    gc.freeze()
    if failed:
        raise SystemExit(f"the check service could not prepare its graders: {type(failed[0]).__name__}: {failed[0]}")
