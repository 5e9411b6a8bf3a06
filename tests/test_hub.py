"""The check service as a JupyterHub service, behind a real hub (jupyterhub and its configurable-http-proxy, from
npm), configured by the course's own examples/jupyterhub_config.py: the hub starts the service; a learner's kernel
checks with its server's token; a browser logs in through the hub's OAuth and uploads; the hub's identity decides
who is a learner and who the instructor."""
import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import nbformat
import pytest
from helpers import run_check_cell

from autograder import ROOT
from autograder.authoring import variants
from autograder.service.local import free_port
from autograder.service.roster import new_roster

ASG = "positional_encoding"
PROXY = ROOT / "node_modules" / ".bin" / "configurable-http-proxy"
PASSWORD = "course-hub-test"
pytestmark = pytest.mark.xdist_group("service")
HUB_CONFIG = """
c = get_config()
load_subconfig({example!r})
c.JupyterHub.bind_url = {url!r}
c.JupyterHub.hub_port = {hub_port}
c.JupyterHub.db_url = "sqlite:///" + {tmp!r} + "/hub.sqlite"
c.JupyterHub.cookie_secret_file = {tmp!r} + "/cookie_secret"
c.JupyterHub.pid_file = {tmp!r} + "/hub.pid"
c.ConfigurableHTTPProxy.command = [{proxy!r}]
c.ConfigurableHTTPProxy.pid_file = {tmp!r} + "/proxy.pid"
c.ConfigurableHTTPProxy.api_url = "http://127.0.0.1:{proxy_api_port}"
c.JupyterHub.authenticator_class = "dummy"
c.DummyAuthenticator.password = {password!r}
c.Authenticator.allowed_users = {{"ada", "ben", "prof", "zed"}}
c.JupyterHub.services.append({{"name": "course-admin", "api_token": {admin!r}}})
c.JupyterHub.load_roles.append({{"name": "course-admin", "scopes": ["admin:users", "tokens"],
                                 "services": ["course-admin"]}})
"""


class Hub:
    def __init__(self, tmp: Path):
        self.url = f"http://127.0.0.1:{free_port()}"
        self.admin = "admin-" + os.urandom(16).hex()
        service_port = free_port()
        roster = new_roster(["ada", "ben"], [ASG])                   # by hub name; their tokens are not used
        roster.update(instructors=["prof"], max_concurrent=1)
        (tmp / "roster.json").write_text(json.dumps(roster))
        (tmp / "jupyterhub_config.py").write_text(HUB_CONFIG.format(
            example=str(ROOT / "examples" / "jupyterhub_config.py"), url=self.url, hub_port=free_port(),
            tmp=str(tmp), proxy=str(PROXY), proxy_api_port=free_port(), password=PASSWORD, admin=self.admin))
        self.service = f"{self.url}/services/check-my-work"
        self.log = open(tmp / "hub.log", "w")
        env = {**os.environ, "COURSE_HUB_URL": self.url, "COURSE_CHECK_PORT": str(service_port),
               "COURSE_ROSTER": str(tmp / "roster.json"), "COURSE_CHECK_STATE": str(tmp / "state")}
        self.proc = subprocess.Popen([str(Path(sys.executable).parent / "jupyterhub"), "-f",
                                      str(tmp / "jupyterhub_config.py")], cwd=tmp, env=env, stdout=self.log,
                                     stderr=subprocess.STDOUT)
        deadline = time.time() + 240
        while time.time() < deadline:        # up when the service answers through the proxy (it prepares first)
            assert self.proc.poll() is None, (tmp / "hub.log").read_text()[-5000:]
            if self.request(self.service + "/check/" + ASG, method="POST", body=b"{}")[0] == 401:
                return
            time.sleep(1)
        raise AssertionError("the hub's check service did not start:\n" + (tmp / "hub.log").read_text()[-5000:])

    def request(self, url: str, token: str | None = None, method: str = "GET", body: bytes | None = None,
                scheme: str = "token"):
        req = urllib.request.Request(url, data=body, method=method,
                                     headers={"Authorization": f"{scheme} {token}"} if token else {})
        try:
            with urllib.request.urlopen(req, timeout=600) as r:
                return r.status, r.read()
        except urllib.error.HTTPError as e:
            return e.code, e.read()
        except OSError:
            return None, b""

    def token(self, user: str, scopes: list[str]) -> str:
        """A token of `user`'s with `scopes`, made by the hub (as it makes each server's)."""
        status, body = self.request(f"{self.url}/hub/api/users/{user}/tokens", self.admin, "POST",
                                    json.dumps({"scopes": scopes, "note": "test"}).encode())
        assert status == 201, (status, body)
        return json.loads(body)["token"]

    def close(self):
        self.proc.terminate()
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self.log.close()


@pytest.fixture(scope="module")
def hub(tmp_path_factory):
    h = Hub(tmp_path_factory.mktemp("hub"))
    yield h
    h.close()


ACCESS = ["access:services!service=check-my-work"]


@pytest.mark.full     # make test checks from a kernel with a token (test_service.py)
def test_a_learner_s_kernel_checks_with_its_server_s_token(hub, tmp_path, monkeypatch):
    """The released notebook's check() cell in a real kernel, with what the hub gives a learner's server: the
    service's address and a token with the server role's access to the service; nothing from the learner."""
    monkeypatch.setenv("HOME", str(tmp_path))                         # no ~/.course-check.json
    monkeypatch.delenv("COURSE_CHECK_TOKEN", raising=False)
    monkeypatch.setenv("COURSE_CHECK_URL", hub.service)              # what the hub config's Spawner.environment sets
    monkeypatch.setenv("JUPYTERHUB_API_TOKEN", hub.token("ada", ACCESS))
    printed = run_check_cell(ASG, tmp_path)
    assert f"{ASG}: 11 / 11 points (a check: no grade changed)" in printed, printed


def test_the_hub_decides_who_may_check_and_who_reads_the_table(hub):
    nb = nbformat.writes(variants.submission(ASG)).encode()
    check = f"{hub.service}/check/{ASG}"
    status, body = hub.request(check, None, "POST", nb)
    assert status == 401, body
    status, body = hub.request(check, "not-a-hub-token", "POST", nb)
    assert status == 403 and b"the hub knows no user by this token" in body, body
    status, body = hub.request(check, hub.token("zed", ACCESS), "POST", nb)           # a hub user, not a learner
    assert status == 403 and b"zed is not a learner of this course" in body, body
    status, body = hub.request(check, hub.token("ada", ["read:users:name!user=ada"]), "POST", nb)   # no access
    assert status == 403 and b"does not let ada use the check service" in body, body
    status, body = hub.request(check, hub.token("ben", ACCESS), "POST", nb, scheme="Bearer")
    assert status == 200 and json.loads(body)["total"] == 11, body
    table = f"{hub.service}/instructor/checks.csv"
    assert hub.request(table, hub.token("ben", ACCESS))[0] == 403
    status, body = hub.request(table, hub.token("prof", ACCESS))
    assert status == 200 and f"ben,{ASG},1," in body.decode(), body


@pytest.mark.full     # too long for make test (docs/testing.md)
def test_the_upload_page_logs_in_through_the_hub(browser, hub, tmp_path):
    """A browser: the page sends it to the hub's login, back by OAuth, and the form asks for no token: ben's check
    is his because the hub says the browser is his."""

    nb = tmp_path / f"{ASG}.ipynb"
    nbformat.write(variants.submission(ASG), str(nb))
    page = browser.new_page()
    page.goto(hub.service + "/")
    page.fill("input[name=username]", "ben")
    page.fill("input[name=password]", PASSWORD)
    page.click("input[type=submit], button[type=submit]")
    page.wait_for_selector("input[name=notebook]", timeout=60_000)
    assert page.url.startswith(hub.service + "/"), page.url
    assert page.locator("input[name=token]").count() == 0
    page.set_input_files("input[name=notebook]", str(nb))
    with page.expect_response(lambda r: r.url.endswith("/upload")) as answer:
        page.click("button[type=submit]")
    assert "default-src 'none'" in answer.value.headers["content-security-policy"]
    page.wait_for_selector("#answer", timeout=300_000)
    assert f"{ASG}: 11 / 11 points" in page.inner_text("#answer")
    status, body = hub.request(f"{hub.service}/instructor/checks.csv", hub.token("prof", ACCESS))
    assert f"ben,{ASG}," in body.decode(), body
