"""The service on this machine, for the tests and `make bench`: started as `python -m autograder.service` on a free
loopback port and waited for until it is ready, a plain HTTP client for it (checks answered once graded, or at once
and then asked after), and checks over raw sockets (`RawCheck`: headers first, the body when asked, as clients
arriving at once do)."""
from __future__ import annotations

import csv
import io
import json
import os
import select
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import nbformat


def free_port() -> int:
    """A loopback port no one listens on now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(url: str, proc: subprocess.Popen, log: Path, timeout: float = 180):
    """Return once `url` answers, while the server `proc` starts; its output (`log`) is the error if it ends first
    or does not answer within `timeout` seconds."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            urllib.request.urlopen(url, timeout=2)
            return
        except OSError:
            assert proc.poll() is None, log.read_text()
            time.sleep(0.5)
    raise AssertionError(f"{url} did not answer within {timeout:g} s: " + log.read_text())


def wait_ready(url: str, proc: subprocess.Popen, log: Path, timeout: float = 300) -> dict:
    """Return once the service at `url` checks (a check without a token is refused 401, not 503 "warming up"), while
    it starts: the seconds to its first answer and its status, and the seconds until it was ready."""
    t0 = time.monotonic()
    first: dict = {}
    while time.monotonic() < t0 + timeout:
        try:
            status, _, headers = _post(url + "/check/x", b"", {}, timeout=5)
        except OSError:
            assert proc.poll() is None, log.read_text()
            time.sleep(0.1)
            continue
        first = first or {"first_answer_s": round(time.monotonic() - t0, 2), "first_status": status,
                          "first_retry_after": headers.get("Retry-After")}
        if status != 503:
            return {**first, "ready_s": round(time.monotonic() - t0, 2)}
        time.sleep(0.5)
    raise AssertionError(f"{url} was not ready within {timeout:g} s: " + log.read_text())


def _post(url: str, body: bytes, headers: dict, timeout: float = 600) -> tuple[int, Any, Any]:
    req = urllib.request.Request(url, data=body, method="POST", headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, json.load(r), r.headers
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"{}"), e.headers


class LocalService:
    """`python -m autograder.service` on a free loopback port with the given roster (the tests and `make bench`
    run it so), and a client for it."""

    def __init__(self, tmp: Path, roster: dict, env: dict | None = None, args: tuple = ()):
        self.roster = roster
        tmp.mkdir(parents=True, exist_ok=True)
        self.roster_path = tmp / "roster.json"
        self.roster_path.write_text(json.dumps(roster))
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.state = tmp / "state"
        self.log = open(tmp / "server.log", "w")
        self.proc = subprocess.Popen([sys.executable, "-m", "autograder.service", "--roster", str(self.roster_path),
                                      "--state", str(self.state), "--port", str(self.port), *args],
                                     stdout=self.log, stderr=subprocess.STDOUT, env={**os.environ, **(env or {})})
        self.started = wait_ready(self.url, self.proc, tmp / "server.log")

    def post(self, path: str, body: bytes, token: str | None, headers: dict | None = None) -> tuple[int, dict, Any]:
        return _post(self.url + path, body, {**({"Authorization": f"Bearer {token}"} if token else {}),
                                             **(headers or {})})

    def table(self) -> list[dict]:
        """The instructor's table (`/instructor/checks.csv`), as rows."""
        token = next(iter(self.roster["instructors"].values()))
        req = urllib.request.Request(self.url + "/instructor/checks.csv", headers={"Authorization": f"Bearer {token}"})
        with urllib.request.urlopen(req, timeout=60) as r:
            return list(csv.DictReader(io.StringIO(r.read().decode())))

    def check(self, learner: str, nb, asg: str) -> tuple[int, dict]:
        status, answer, _ = self.post(f"/check/{asg}", nbformat.writes(nb).encode(), self.roster["learners"][learner])
        return status, answer

    def send(self, learner: str, nb, asg: str) -> tuple[int, dict, Any]:
        """`learner`'s check of `nb`, answered at once (`Prefer: respond-async`): 202 with its id when received."""
        return self.post(f"/check/{asg}", nbformat.writes(nb).encode(), self.roster["learners"][learner],
                         {"Prefer": "respond-async"})

    def ask(self, check_id: str, token: str | None) -> tuple[int, dict, Any]:
        """How the check `check_id` goes (`GET checks/<id>` with `token`): 202 while it waits, then its answer."""
        req = urllib.request.Request(f"{self.url}/checks/{check_id}",
                                     headers={"Authorization": f"Bearer {token}"} if token else {})
        try:
            with urllib.request.urlopen(req, timeout=60) as r:
                return r.status, json.load(r), r.headers
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read() or b"{}"), e.headers

    def answer(self, learner: str, check_id: str, timeout: float = 600) -> tuple[int, dict]:
        """The answer to `learner`'s check `check_id`, asked for every half second until it comes."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            status, answer, _ = self.ask(check_id, self.roster["learners"][learner])
            if status != 202:
                return status, answer
            time.sleep(0.5)
        raise AssertionError(f"{learner}'s check {check_id} was not answered within {timeout:g} s")

    def close(self):
        self.proc.terminate()
        self.proc.wait(10)
        self.log.close()


class RawCheck:
    """One request over its own loopback socket: its headers sent at once, its body when asked (`send_body`), its
    answer read whole (`answer`); `answered()` says whether the answer came before the body was sent."""

    def __init__(self, port: int, path: str, token: str | None, body: bytes, chunked: bool = False):
        self.body, self.chunked = body, chunked
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=900)
        length = "Transfer-Encoding: chunked" if chunked else f"Content-Length: {len(body)}"
        auth = f"Authorization: Bearer {token}\r\n" if token else ""
        self._send(f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n{auth}{length}\r\nConnection: close\r\n\r\n".encode())

    def _send(self, data: bytes):
        try:
            self.sock.sendall(data)
        except OSError:                       # the server answered and closed: the answer says why
            pass

    def answered(self, timeout: float = 0.0) -> bool:
        return bool(select.select([self.sock], [], [], timeout)[0])

    def send_body(self):
        """The body, at once or (chunked) a chunk at a time until the server answers."""
        if not self.chunked:
            return self._send(self.body)
        for i in range(0, len(self.body), 65536):
            if self.answered():
                return
            part = self.body[i:i + 65536]
            self._send(b"%x\r\n%s\r\n" % (len(part), part))
        self._send(b"0\r\n\r\n")

    def answer(self) -> tuple[int, dict, dict]:
        """Status, headers and JSON body of the answer (0 when there was none); the socket is closed."""
        data = b""
        try:
            while chunk := self.sock.recv(65536):
                data += chunk
        except OSError:
            pass
        self.sock.close()
        head, _, body = data.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        if not lines[0].startswith("HTTP/"):
            return 0, {}, {}
        headers = dict(line.split(": ", 1) for line in lines[1:] if ": " in line)
        try:
            answer = json.loads(body) if body else {}
        except ValueError:
            answer = {}
        return int(lines[0].split()[1]), headers, answer

