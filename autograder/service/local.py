"""The service on this machine, for the tests and `make bench`: started as `python -m autograder.service` on a free
loopback port, and a plain HTTP client for it."""
from __future__ import annotations

import json
import os
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


class LocalService:
    """`python -m autograder.service` on a free loopback port with the given roster (the tests and `make bench`
    run it so), and a client for it."""

    def __init__(self, tmp: Path, roster: dict, env: dict | None = None, args: tuple = ()):
        self.roster = roster
        tmp.mkdir(parents=True, exist_ok=True)
        (tmp / "roster.json").write_text(json.dumps(roster))
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.state = tmp / "state"
        self.log = open(tmp / "server.log", "w")
        self.proc = subprocess.Popen([sys.executable, "-m", "autograder.service", "--roster", str(tmp / "roster.json"),
                                      "--state", str(self.state), "--port", str(self.port), *args],
                                     stdout=self.log, stderr=subprocess.STDOUT, env={**os.environ, **(env or {})})
        wait_for(self.url + "/", self.proc, tmp / "server.log")

    def post(self, path: str, body: bytes, token: str | None, headers: dict | None = None) -> tuple[int, dict, Any]:
        h = {**({"Authorization": f"Bearer {token}"} if token else {}), **(headers or {})}
        req = urllib.request.Request(self.url + path, data=body, method="POST", headers=h)
        try:
            with urllib.request.urlopen(req, timeout=600) as r:
                return r.status, json.load(r), r.headers
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read() or b"{}"), e.headers

    def check(self, learner: str, nb, asg: str) -> tuple[int, dict]:
        status, answer, _ = self.post(f"/check/{asg}", nbformat.writes(nb).encode(), self.roster["learners"][learner])
        return status, answer

    def close(self):
        self.proc.terminate()
        self.proc.wait(10)
        self.log.close()
