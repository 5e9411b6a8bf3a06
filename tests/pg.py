"""A throwaway PostgreSQL server for the tests: its own cluster in a temporary folder, on a free port.

`PostgresServer` runs Debian's server binaries (`/usr/lib/postgresql/<version>/bin`, from the
`postgresql` package: `make postgres` installs it) directly, not the machine's own service: `initdb`
into a fresh folder, `pg_ctl start` listening on 127.0.0.1 and a private socket folder, and
`pg_ctl stop` + removal of the folder at the end.  PostgreSQL refuses to run as root, so as root
the server runs as the `postgres` user the package creates.
"""
from __future__ import annotations

import glob
import os
import pwd
import shutil
import subprocess
import tempfile
from pathlib import Path

from autograder.service.local import free_port

INSTALL_HINT = ("PostgreSQL's server binaries (initdb, pg_ctl) were not found under /usr/lib/postgresql/*/bin: "
                "run `make postgres` (it runs `apt-get install -y postgresql`)")


def server_bin() -> Path | None:
    """The newest installed server's bin folder, or None."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"),
                   key=lambda p: int(Path(p).parent.parent.name) if Path(p).parent.parent.name.isdigit() else 0)
    env = os.environ.get("PG_BIN")
    if env and (Path(env) / "initdb").exists():
        return Path(env)
    return Path(found[-1]).parent if found else None


class PostgresServer:
    def __init__(self, database: str = "gradebook"):
        self.bin = server_bin()
        if self.bin is None:
            raise FileNotFoundError(INSTALL_HINT)
        self.database = database
        self.port = free_port()
        self.user = "postgres"
        self.home = Path(tempfile.mkdtemp(prefix="pg-"))
        self.data = self.home / "data"
        self.log = self.home / "server.log"
        self._as = []
        if os.geteuid() == 0:
            pw = pwd.getpwnam("postgres")
            os.chown(self.home, pw.pw_uid, pw.pw_gid)
            self._as = ["runuser", "-u", "postgres", "--"]

    @property
    def url(self) -> str:
        return f"postgresql+psycopg2://{self.user}@127.0.0.1:{self.port}/{self.database}"

    def _run(self, *cmd: str, timeout: float = 120):
        r = subprocess.run([*self._as, *cmd], capture_output=True, text=True, timeout=timeout, cwd=self.home,
                           stdin=subprocess.DEVNULL)
        if r.returncode != 0:
            log = self.log.read_text(errors="replace")[-3000:] if self.log.exists() else ""
            raise RuntimeError(f"{' '.join(cmd)} failed ({r.returncode}):\n{r.stdout}{r.stderr}\n{log}")
        return r

    def start(self) -> PostgresServer:
        self._run(str(self.bin / "initdb"), "-D", str(self.data), "-U", self.user, "--auth=trust",
                  "--encoding=UTF8", "--no-sync")
        opts = (f"-k {self.home} -p {self.port} -c listen_addresses=127.0.0.1 -c fsync=off "
                "-c max_connections=200")
        self._run(str(self.bin / "pg_ctl"), "-D", str(self.data), "-l", str(self.log), "-o", opts, "-w",
                  "-t", "60", "start")
        self._run(str(self.bin / "createdb"), "-h", "127.0.0.1", "-p", str(self.port), "-U", self.user,
                  self.database)
        return self

    def stop(self):
        try:
            if (self.data / "postmaster.pid").exists():
                self._run(str(self.bin / "pg_ctl"), "-D", str(self.data), "-m", "fast", "-w", "-t", "60", "stop")
        finally:
            shutil.rmtree(self.home, ignore_errors=True)

    def __enter__(self):
        try:
            return self.start()
        except BaseException:
            self.stop()
            raise

    def __exit__(self, *exc):
        self.stop()

