"""labextension/: the course's JupyterLab extension as pip installs it. JupyterLab finds it in the environment, enabled,
and its compatibility check passes on the dependencies it declares (and flags ones JupyterLab does not provide); it
declares every package it imports; a wheel of it alone installs it into a fresh environment, and none is built before
the extension is. The button itself is tested in a real JupyterLab by tests/test_service.py."""
import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tomllib
from pathlib import Path

from helpers import ROOT

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
