"""The HTTP service (tornado, as Jupyter's own server): a learner's check, the upload page, the instructor's table.

    POST check/<assignment>     the notebook as the body; `Authorization: Bearer <token>`; `?html=1` adds the page
    GET  ./                     the upload page (no script: a form)
    POST upload                 the form's notebook (and token); answers a page with the verdicts as text
    GET  instructor/checks.csv  per learner and assignment: how many checks, first and last (an instructor's token)

Standalone, the token is the roster's; as a JupyterHub service (`--hub`, under the hub's prefix) it is the hub
user's API token (in their server's kernel, JUPYTERHUB_API_TOKEN) and the upload page logs in through the hub (OAuth).
The port is bound first; until the graders are ready every check answers 503 "warming up" with Retry-After.
Refusals say why, before the body is read: 401 no token, 403 a token of no learner or a closed assignment, 413 a
notebook over the size cap, 429 over the rate limit, 503 with Retry-After when the learner's or the service's checks
waiting, the bytes they hold or the open connections are at their cap (autograder.service.fair). After it: 400 not
a notebook and 422 a notebook whose grading it made fail (each counted), 503 the grader failed (not counted)."""
from __future__ import annotations

import asyncio
import csv
import datetime as dt
import errno
import html
import io
import os
import re
import signal
import socket
import threading
import time
import traceback
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING

import tornado.httputil
import tornado.web
from tornado.httpserver import HTTPServer
from tornado.iostream import StreamClosedError

from autograder.classroom.report import csv_cell
from autograder.service.fair import Admission, FairQueue, Refusal, Ticket, busy
from autograder.service.grading import GRADER_FAILED, Checker, NotANotebook, Refused, on_worker
from autograder.service.roster import Roster

if TYPE_CHECKING:
    from distributed import Client as DaskClient
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


FORM_MARGIN = 64 << 10              # what the upload form holds besides the notebook (its fields, the boundaries)
WARMING = "the check service is warming up (its graders are being prepared): try again in a minute"


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
        self.pool = ThreadPoolExecutor(max_workers=roster.max_concurrent)
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

    def admit_held(self, ticket: Ticket, learner: str, assignment: str, size: int):
        """Admit `learner`'s check of `assignment` (`size` bytes) whose bytes `ticket` holds (a form read whole before
        its learner is known), or Refusal."""
        why = self.roster.closed(assignment)
        if why:
            raise Refusal(403, why)
        if size > self.roster.max_bytes:
            raise Refusal(413, f"the notebook is {size} bytes, more than the {self.roster.max_bytes} a check takes")
        self.admission.enter(ticket, learner)

    async def check(self, ticket: Ticket, assignment: str, body: bytes, want_html: bool) -> tuple[int, dict]:
        """Grade an admitted check in its turn; its ticket is given back when it is answered, its rate-limit slot
        too when the grader failed for a reason the notebook did not cause."""
        learner, charged = ticket.learner, True
        queued = time.monotonic()
        try:
            await self.queue.turn(learner)
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

    def refuse(self, r: Refusal):
        for k, v in r.headers.items():
            self.set_header(k, v)
        self.set_status(r.status)
        self.finish({"error": r.why})


class Streamed(Base):
    """A POST whose body is read only once it is admitted, into the bytes its ticket holds; the ticket is given back
    when the check is answered, or here when the request ends before its check started (refused, cut off)."""

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
            self.ticket = await self.admit(int(length) if length and length.isdigit() else None)
        except Refusal as r:
            self.refuse(r)

    async def admit(self, size: int | None) -> Ticket:
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

    async def admit(self, size: int | None) -> Ticket:
        learner = await self.service.who(self.bearer())
        return self.service.admit(learner, self.path_kwargs["assignment"], size)

    async def post(self, assignment: str):
        if self._finished:
            return
        body, self.body_parts = b"".join(self.body_parts), []
        status, answer = await self.checked(assignment, body, self.get_argument("html", "") == "1")
        self.set_status(status)
        answer["text"] = text_of(answer)
        self.finish(answer)


@tornado.web.stream_request_body
class UploadPage(Streamed):
    """The form: the learner's notebook and, standalone, their token (as a hub service the hub's login says who).
    Its bytes are held from its headers; the learner, known once the form is read, is admitted then."""

    body_read = False

    def get(self):
        options = "".join(f'<option value="{html.escape(a)}">{html.escape(a)}</option>'
                          for a in sorted(self.service.roster.assignments))
        token = "" if self.service.hub else TOKEN_FIELD
        self.finish(PAGE.format(title="Check my work", body=FORM.format(
            options=options, token=token, xsrf=self.xsrf_form_html())))

    def check_xsrf_cookie(self):
        """The form's `_xsrf` field is in its body: checked once the body is read."""
        if self.body_read:
            super().check_xsrf_cookie()

    def cap(self) -> int:
        return self.service.roster.max_bytes + FORM_MARGIN

    async def admit(self, size: int | None) -> Ticket:
        if size is not None and size > self.cap():
            raise Refusal(413, f"the notebook is more than the {self.service.roster.max_bytes} bytes a check takes")
        return self.service.admission.hold(self.cap() if size is None else size)

    async def learner(self) -> str:
        return await self.service.who(self.get_body_argument("token", ""))

    def refuse(self, r: Refusal):
        for k, v in r.headers.items():
            self.set_header(k, v)
        self.answer(r.status, f"Check refused: {r.why}")

    def answer(self, status: int, text: str):
        self.set_status(status)
        self.finish(PAGE.format(title="Check my work", body=f'<pre id="answer">{html.escape(text)}</pre>'
                                                             '<p><a href="./">Check again</a></p>'))

    async def post(self):
        if self._finished:
            return
        tornado.httputil.parse_body_arguments(self.request.headers.get("Content-Type", ""), b"".join(self.body_parts),
                                              self.request.body_arguments, self.request.files, self.request.headers)
        for k, v in self.request.body_arguments.items():
            self.request.arguments.setdefault(k, []).extend(v)
        self.body_parts = []
        self.body_read = True
        self.check_xsrf_cookie()
        files = self.request.files.get("notebook") or []
        assignment = self.get_body_argument("assignment", "")
        body = files[0].get("body", b"") if files else b""
        assert self.ticket is not None
        try:
            learner = await self.learner()
            self.service.admit_held(self.ticket, learner, assignment, len(body))
        except Refusal as r:
            return self.refuse(r)
        status, answer = await self.checked(assignment, body, False)
        self.answer(status, text_of(answer))


class Instructor(Base):
    async def get(self):
        if not await self.service.is_instructor(self.bearer()):
            return self.refuse(Refusal(403, "the instructor's token is needed"))
        self.set_header("Content-Type", "text/csv; charset=utf-8")
        self.finish(self.service.summary())


class CappedServer(HTTPServer):
    """tornado's HTTP server with at most `max_connections` open: past it, a connection is answered 503 with
    Retry-After before anything of it is read (what it sends meanwhile is discarded, a little at most), and closed."""

    max_connections = 256
    FULL = b'{"error": "the check service has as many connections open as it takes: try again shortly"}'

    def handle_stream(self, stream, address):
        if len(self._connections) >= self.max_connections:
            asyncio.ensure_future(self._refuse(stream))
            return
        super().handle_stream(stream, address)

    async def _refuse(self, stream):
        try:
            await stream.write(b"HTTP/1.1 503 Service Unavailable\r\nRetry-After: 5\r\nConnection: close\r\n"
                               b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
                               % (len(self.FULL), self.FULL))
            stream.socket.shutdown(socket.SHUT_WR)
            deadline, left = time.monotonic() + 2, 1 << 20
            while left > 0 and time.monotonic() < deadline:
                left -= len(await asyncio.wait_for(stream.read_bytes(65536, partial=True),
                                                   deadline - time.monotonic()))
        except (TimeoutError, OSError, StreamClosedError):
            pass
        finally:
            stream.close()


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
    return tornado.web.Application(routes, xsrf_cookies=True, cookie_secret=os.urandom(32))


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
    limit = service.roster.max_bytes + FORM_MARGIN
    server = CappedServer(app(service, prefix), max_body_size=limit, max_buffer_size=limit + (1 << 20),
                          idle_connection_timeout=120, body_timeout=120)
    server.max_connections = service.roster.max_connections
    try:
        server.listen(port, host)
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
    if failed:
        raise SystemExit(f"the check service could not prepare its graders: {type(failed[0]).__name__}: {failed[0]}")
