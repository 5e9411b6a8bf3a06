"""labextension/: the course's JupyterLab extension as pip installs it. JupyterLab finds it in the environment, enabled,
and its compatibility check passes on the dependencies it declares (and flags ones JupyterLab does not provide); it
declares every package it imports; a wheel of it alone installs it into a fresh environment, and none is built before
the extension is. Its button, in a real JupyterLab in Chromium against a real check service: the learner sees at once
that the check was received, its place in the queue and the seconds so far, keeps working (and running cells)
meanwhile, and then sees the answer; a notebook of an earlier release is checked as then."""
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import sysconfig
import time
import tomllib
from pathlib import Path

import nbformat
import pytest
from helpers import ROOT, first_check

from autograder.authoring import criteria, variants
from autograder.notebooks import CHECK_CELL
from autograder.service.local import LocalService, free_port, wait_for
from autograder.service.roster import new_roster

EXT = ROOT / "labextension"
NAME = "course-check"
ANSI = re.compile(r"\x1b\[[0-9;]*m")


def package() -> dict:
    return json.loads((EXT / "package.json").read_text())


def listed(python: Path, tmp_path: Path, **env) -> str:
    """What `jupyter labextension list --verbose` prints, run by `python`, with no user-level extensions."""
    env = {**{k: v for k, v in os.environ.items() if k != "JUPYTER_PATH"}, **env,
           "JUPYTER_DATA_DIR": str(tmp_path / "data"), "JUPYTER_CONFIG_DIR": str(tmp_path / "config")}
    run = subprocess.run([str(python), "-m", "jupyterlab.labextensions", "list", "--verbose"], env=env,
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    return ANSI.sub("", run.stdout + run.stderr)


def entry(output: str, folder: Path) -> str:
    """The line `labextension list` prints for the extension under `folder` (its labextensions folder), its words
    separated by one space."""
    section = output.split(f"{folder}\n", 1)[1].split("\n\n", 1)[0]
    return next((" ".join(line.split()) for line in section.splitlines() if line.split()[:1] == [NAME]), "")


def imported(source: str) -> set[str]:
    """The npm packages a TypeScript module imports (`@scope/name` or `name`; relative imports are its own)."""
    found = set()
    for spec in re.findall(r"""^\s*import\s+(?:[^'";]*?\s+from\s+)?['"]([^'"]+)['"]""", source, re.MULTILINE):
        if not spec.startswith("."):
            found.add("/".join(spec.split("/")[:2 if spec.startswith("@") else 1]))
    return found


def test_jupyterlab_finds_the_extension_pip_installed_enabled_and_compatible(tmp_path):
    version = tomllib.loads((EXT / "pyproject.toml").read_text())["project"]["version"]
    assert package()["version"] == version
    labextensions = Path(sys.prefix) / "share" / "jupyter" / "labextensions"
    output = listed(Path(sys.executable), tmp_path)
    assert entry(output, labextensions) == f"{NAME} v{version} enabled OK (python, {NAME})", output
    installed = json.loads((labextensions / NAME / "package.json").read_text())
    assert installed["dependencies"] == package()["dependencies"], "the installed build is not the source's"


def test_jupyterlab_flags_an_extension_that_needs_another_jupyterlab(tmp_path):
    """The check the test above relies on: a dependency JupyterLab does not provide is named."""
    share = tmp_path / "share" / "jupyter"
    copy = share / "labextensions" / NAME
    shutil.copytree(Path(sys.prefix) / "share" / "jupyter" / "labextensions" / NAME, copy)
    old = json.loads((copy / "package.json").read_text())
    old["dependencies"]["@jupyterlab/notebook"] = "^3.6.0"
    (copy / "package.json").write_text(json.dumps(old))
    output = listed(Path(sys.executable), tmp_path, JUPYTER_PATH=str(share))
    assert entry(output, share / "labextensions") == f"{NAME} v{old['version']} enabled X (python, {NAME})", output
    assert re.search(r">=3\.6\.0 <4\.0\.0\s+@jupyterlab/notebook", output), output


def test_the_extension_declares_every_package_it_imports():
    declared = package()["dependencies"]
    sources = sorted((EXT / "src").glob("*.ts"))
    assert sources
    used = set().union(*(imported(p.read_text()) for p in sources))
    assert {"@jupyterlab/application", "@jupyterlab/notebook", "@jupyterlab/apputils"} <= used
    assert used - set(declared) == set(), f"imported but not in package.json's dependencies: {used - set(declared)}"
    assert set(declared) - used == set(), f"declared but never imported: {set(declared) - used}"
    # and the reading sees an import that is not declared
    extra = "import { IMainMenu } from '@jupyterlab/mainmenu';\nimport { a } from './local';\n"
    assert imported(extra) - set(declared) == {"@jupyterlab/mainmenu"}


def source_copy(tmp_path: Path, built: bool = True) -> Path:
    """The distribution's own files, without node_modules: what `pip install labextension/` reads."""
    src = tmp_path / "src"
    src.mkdir()
    for name in ("pyproject.toml", "install.json"):
        shutil.copy(EXT / name, src / name)
    if built:
        shutil.copytree(EXT / "dist", src / "dist")
    return src


def wheel(src: Path, out: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
                           "--no-index", "-w", str(out), str(src)], capture_output=True, text=True, timeout=120)


def test_a_wheel_of_the_extension_installs_it_into_a_fresh_environment(tmp_path):
    assert wheel(source_copy(tmp_path), tmp_path / "wheels").returncode == 0
    [whl] = (tmp_path / "wheels").glob("*.whl")
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=60)
    python = venv / "bin" / "python"
    subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "-q", "--no-deps", "--no-index",
                    str(whl)], check=True, timeout=120)
    # JupyterLab itself (not installed there: the wheel is all that was) comes from this environment's packages
    purelib = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             capture_output=True, text=True, check=True).stdout.strip()
    (Path(purelib) / "jupyterlab-from-course.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    labextensions = venv / "share" / "jupyter" / "labextensions"
    output = listed(python, tmp_path)
    assert entry(output, labextensions) == f"{NAME} v{package()['version']} enabled OK (python, {NAME})", output
    load = json.loads((labextensions / NAME / "package.json").read_text())["jupyterlab"]["_build"]["load"]
    assert (labextensions / NAME / load).is_file()
    assert (labextensions / NAME / "schemas" / NAME / "plugin.json").is_file()


def test_no_wheel_is_built_before_the_extension_is(tmp_path):
    run = wheel(source_copy(tmp_path, built=False), tmp_path / "wheels")
    assert run.returncode != 0 and "dist/package.json" in run.stdout + run.stderr, run.stdout + run.stderr
    assert not list((tmp_path / "wheels").glob("*.whl"))


ASG = "positional_encoding"
SHOTS = ROOT / "_build" / "screenshots"       # what the browser showed, for a person to see (as tests/test_site.py)
PROGRESS = re.compile(r"Check received: (?:waiting, number (\d+) in the queue|your notebook is being graded) "
                      r"\((\d+) s so far\)")


def _with_check_cell(nb, source: str):
    """`nb` with its check() cell's source `source`."""
    next(c for c in nb.cells if c.get("id") == CHECK_CELL).source = source
    return nb


@pytest.fixture(scope="module")
def lab_service(tmp_path_factory):
    """A check service that grades one check at a time."""
    roster = new_roster(["ada", "ben"], [ASG])
    roster.update(rate=[100, 3600], max_concurrent=1)
    s = LocalService(tmp_path_factory.mktemp("lab-service"), roster)
    yield s
    s.close()


@pytest.mark.full     # make test keeps the check's place and time in the service (test_service.py)
def test_the_button_says_at_once_the_check_s_place_and_time_and_the_learner_keeps_working(browser, lab_service,
                                                                                         tmp_path):
    """JupyterLab with the course's extension as `make install` installs it: while ben's slow check holds the grader,
    "Check my work" saves the open notebook and, within seconds, a notification says that the check was received, its
    place in the queue and the seconds so far, which grow; meanwhile the learner runs a cell of the same notebook and
    sees its output, and a second click is told the check is under way; then the notification gives the answer's
    first line, and its button the whole answer. The command is in the Run menu too; a notebook of an earlier release
    (its check() answers once graded) is checked as then, the notification counting the seconds; a notebook that is
    not the course's is told so. What the browser showed is in _build/screenshots/check-lab-*.png."""

    SHOTS.mkdir(parents=True, exist_ok=True)
    work = tmp_path / "work"
    work.mkdir()
    mine = _with_check_cell(variants.submission(ASG), criteria.check_cell_source(ASG))   # as `make criteria` writes
    scratch = nbformat.v4.new_code_cell("")
    mine.cells.insert(0, scratch)                                      # where the learner works while it waits
    nbformat.write(mine, str(work / "mine.ipynb"))                    # any name: the file open is checked
    nbformat.write(_with_check_cell(variants.submission(ASG), first_check(ASG)), str(work / "earlier.ipynb"))
    other = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("1 + 1")], metadata={
        "kernelspec": {"name": "python3", "display_name": "Python 3 (ipykernel)", "language": "python"}})
    nbformat.write(other, str(work / "other.ipynb"))
    slow = variants.submission(ASG)
    slow.cells.append(nbformat.v4.new_code_cell("import time\ntime.sleep(10)"))
    port, token = free_port(), "lab-" + os.urandom(8).hex()
    button = ".jp-NotebookPanel-toolbar [data-command='course-check:check']"
    toast = ".jp-toast-message"
    answer, close = ".jp-Dialog pre.course-check", ".jp-Dialog button:has-text('Close')"
    settings = tmp_path / "settings" / "@jupyterlab" / "apputils-extension"
    settings.mkdir(parents=True)
    (settings / "notification.jupyterlab-settings").write_text('{"fetchNews": "false"}')    # no question of news
    env = {**os.environ, "HOME": str(tmp_path), "JUPYTERLAB_SETTINGS_DIR": str(tmp_path / "settings"),
           "JUPYTER_CONFIG_DIR": str(tmp_path / "config"), "JUPYTER_DATA_DIR": str(tmp_path / "data"),
           "COURSE_CHECK_URL": lab_service.url, "COURSE_CHECK_TOKEN": lab_service.roster["learners"]["ada"]}
    log = open(tmp_path / "lab.log", "w")
    lab = subprocess.Popen([str(Path(sys.executable).parent / "jupyter-lab"), "--no-browser", "--allow-root",
                            f"--port={port}", "--ServerApp.ip=127.0.0.1", f"--IdentityProvider.token={token}",
                            f"--ServerApp.root_dir={work}"], env=env, stdout=log, stderr=subprocess.STDOUT,
                           start_new_session=True)

    def idle(page):
        page.wait_for_selector(".jp-Notebook-ExecutionIndicator[data-status='idle'] >> visible=true", timeout=120_000)

    try:
        page = browser.new_page(viewport={"width": 1400, "height": 900})
        wait_for(f"http://127.0.0.1:{port}/api/status?token={token}", lab, tmp_path / "lab.log", timeout=120)
        page.goto(f"http://127.0.0.1:{port}/lab/tree/mine.ipynb?token={token}")
        idle(page)
        assert lab_service.send("ben", slow, ASG)[0] == 202
        t = time.monotonic()
        page.locator(button).click()
        page.locator(f"{toast}:has-text('Check my work: saving'), {toast}:has-text('Check received')").first \
            .wait_for(timeout=60_000)
        noticed = time.monotonic() - t
        waiting = page.locator(f"{toast}:has-text('Check received')")
        waiting.wait_for(timeout=60_000)
        first, shown = waiting.inner_text(), time.monotonic() - t
        page.screenshot(path=SHOTS / "check-lab-waiting.png")
        print(f"\nafter the click: a notification in {noticed:.2f} s, the check received in {shown:.2f} s: "
              f"{first!r}")
        m = PROGRESS.fullmatch(first)
        assert m and m.group(1) == "1" and shown < 10, first
        assert page.locator(".Toastify__toast").filter(has=waiting).locator(".Toastify__spinner").count() == 1
        # the learner keeps working: a cell of the same notebook runs, and its output comes, while the check waits
        page.locator(".jp-Notebook .jp-Cell").first.locator(".cm-content").click()
        page.keyboard.type("6 * 7")
        page.keyboard.press("Shift+Enter")
        output = page.locator(".jp-Notebook .jp-Cell").first.locator(".jp-OutputArea-output")
        output.wait_for(timeout=60_000)
        still = waiting.inner_text()
        assert output.inner_text().strip() == "42" and PROGRESS.fullmatch(still), still
        deadline = time.monotonic() + 30                                                  # the seconds grow
        while still == first and time.monotonic() < deadline:
            time.sleep(0.2)
            still = waiting.inner_text()
        page.screenshot(path=SHOTS / "check-lab-working.png")
        assert int(PROGRESS.fullmatch(still).group(2)) > int(m.group(2)), (first, still)
        page.locator(button).click()                                       # again: one check a notebook at once
        page.locator(f"{toast}:has-text(\"this notebook's check is under way\")").wait_for(timeout=30_000)
        assert page.locator(f"{toast}:has-text('Check received')").count() == 1
        # the answer's first line, whatever the score (what a check scores is tested by tests/test_service.py)
        done = page.locator(f"{toast}:has-text('/ 11 points (a check: no grade changed)')")
        done.wait_for(timeout=300_000)
        page.screenshot(path=SHOTS / "check-lab-answered.png")
        box = page.locator(".Toastify__toast").filter(has=done)
        assert box.locator(".jp-toast-button").count() == 1, box.evaluate("e => e.outerHTML")
        assert box.locator(".Toastify__spinner").count() == 0, box.evaluate("e => e.outerHTML")
        page.locator(".jp-toast-button:has-text('Show the answer')").click()
        page.wait_for_selector(answer)
        text = page.inner_text(answer)
        assert text.startswith(done.inner_text()) and "rope_tests: " in text, text
        page.click(close)
        box.locator(".jp-Notification-Toast-Close").click()
        done.wait_for(state="detached")
        page.click(".lm-MenuBar-itemLabel:text-is('Run')")                 # the command is in the Run menu too
        assert page.locator(".lm-Menu-itemLabel:text-is('Check my work')").is_visible()
        page.keyboard.press("Escape")
        # A notebook of an earlier release: its check() runs whole, as then, the notification counting the seconds.
        page.goto(f"http://127.0.0.1:{port}/lab/tree/earlier.ipynb?token={token}")
        page.wait_for_selector(".lm-TabBar-tab.jp-mod-current >> text=earlier.ipynb")
        idle(page)
        page.locator(f"{button} >> visible=true").click()
        sent = page.locator(f"{toast}:has-text('Check sent: waiting for its answer')")
        sent.wait_for(timeout=60_000)
        assert re.fullmatch(r"Check sent: waiting for its answer \(\d+ s so far\)", sent.inner_text())
        done.wait_for(timeout=300_000)
        # A notebook that is not one of the course's: nothing is sent, and the learner is told why.
        page.goto(f"http://127.0.0.1:{port}/lab/tree/other.ipynb?token={token}")
        page.wait_for_selector(".lm-TabBar-tab.jp-mod-current >> text=other.ipynb")
        page.locator(f"{button} >> visible=true").click()
        page.wait_for_selector(answer, timeout=60_000)
        assert "has no check() cell" in page.inner_text(answer)
    finally:
        lab.terminate()                       # JupyterLab shuts its kernels down; past 30 s, it and they are killed
        try:
            lab.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(lab.pid, signal.SIGKILL)
            lab.wait()
        log.close()
    assert [r["learner"] for r in lab_service.table()] == ["ada", "ben"]
    assert {r["learner"]: r["checks"] for r in lab_service.table()} == {"ada": "2", "ben": "1"}
