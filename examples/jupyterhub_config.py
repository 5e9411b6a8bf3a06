"""The check service (autograder.service) as a service of the course's JupyterHub.

Load it from the hub's own jupyterhub_config.py:    load_subconfig("/path/to/course/examples/jupyterhub_config.py")
(the hub's Python must be the course's, where autograder is installed). The hub then starts the service, shows its
upload page at <hub>/services/check-my-work/ behind the hub's login, and gives every learner's server what
`check()` needs: the service's address (COURSE_CHECK_URL) and a token that may reach it (the server's own
JUPYTERHUB_API_TOKEN, by the `server` role below). The roster says who may check (its "learners", by hub name; every
user who may reach the service when it names none) and who reads the checks table (its "instructors").

From the environment the hub starts with: COURSE_HUB_URL (the hub's public address, default http://127.0.0.1:8000),
COURSE_CHECK_PORT (the service's own port, default 10101), COURSE_ROSTER (default: the service's own,
~/.config/course-check/roster.json of the user the hub runs as), COURSE_CHECK_STATE (default _build/checks in the
course folder).
"""
import os
import sys

c = get_config()  # noqa: F821  (provided by traitlets when the hub loads this file)

course = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
hub_url = os.environ.get("COURSE_HUB_URL", "http://127.0.0.1:8000").rstrip("/")
port = int(os.environ.get("COURSE_CHECK_PORT", "10101"))
name = "check-my-work"
roster = os.environ.get("COURSE_ROSTER")
access = f"access:services!service={name}"

c.JupyterHub.services.append({
    "name": name,
    "url": f"http://127.0.0.1:{port}",
    "cwd": course,
    "oauth_no_confirm": True,
    "command": [sys.executable, "-m", "autograder.service", "--hub", *(["--roster", roster] if roster else []),
                "--state", os.environ.get("COURSE_CHECK_STATE", os.path.join(course, "_build", "checks"))],
})
c.JupyterHub.load_roles.extend([
    {"name": "user", "scopes": ["self", access]},                                 # a learner's browser
    {"name": "server", "scopes": ["users:activity!user", "access:servers!server", access]},   # a learner's kernel
])
c.Spawner.environment.update({"COURSE_CHECK_URL": f"{hub_url}/services/{name}"})
