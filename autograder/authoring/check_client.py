"""The `check()` a released notebook holds (criteria.render writes this function's source into the notebook's
`check_my_work` cell): it runs in the learner's kernel, with nothing but the standard library. It asks the service
to answer at once (`Prefer: respond-async`: 202, the check received, with where to ask how it goes), then asks each
second until the answer comes; a first answer that is not 202 (a refusal; from a service that answers once it has
graded, the verdicts) is the answer."""
ASSIGNMENT = "assignment"                     # replaced by the notebook's own assignment in the released cell


def check(notebook=None, url=None, token=None, wait=True):
    """Check your work: send this notebook, as last saved (save it first), to the course's check service and print
    what the hidden tests say of it: your scores and their diagnoses. It changes no grade and is not a submission.
    While you wait it prints that your check was received, its place in the queue and the seconds so far.
    The service's address and your token come from your instructor: pass them, or set COURSE_CHECK_URL and
    COURSE_CHECK_TOKEN, or put {"url": ..., "token": ...} in ~/.course-check.json. On the course's JupyterHub
    nothing is needed: the hub gives your server both.
    check(wait=False) returns at once, with a function to call for how the check goes (JupyterLab's Check my work
    button uses it, and your kernel stays free meanwhile): each call returns the service's latest word, a dict whose
    "text" says it and whose "state" is "done" once it is the answer."""
    import json
    import os
    import pathlib
    import time
    import urllib.error
    import urllib.parse
    import urllib.request

    def ask(request):
        """The service's answer to `request`, a dict: its "state" is "done" unless the check still waits (202)."""
        try:
            with urllib.request.urlopen(request, timeout=900) as r:
                status, answer = r.status, json.load(r)
        except urllib.error.HTTPError as e:
            status = e.code
            try:
                answer = json.loads(e.read() or b"{}")
            except ValueError:
                answer = {}
            answer.setdefault("text", f"Check refused ({e.code}): {answer.get('error', e.reason)}")
        except OSError as e:
            status, answer = 0, {"text": f"The check service could not be reached ({getattr(e, 'reason', e)}): try "
                                         "again later."}
        except ValueError:
            status, answer = 0, {"text": f"{request.full_url} answered something that is not the check service's "
                                         "answer: is the address right?"}
        if status != 202:
            answer["state"] = "done"
        return answer

    saved = {}
    conf = pathlib.Path.home() / ".course-check.json"
    if conf.exists():
        saved = json.loads(conf.read_text())
    url = url or os.environ.get("COURSE_CHECK_URL") or saved.get("url")
    token = (token or os.environ.get("COURSE_CHECK_TOKEN") or saved.get("token")
             or os.environ.get("JUPYTERHUB_API_TOKEN"))
    headers = {"Authorization": f"Bearer {token}"}
    sent = f"{(url or '').rstrip('/')}/check/{ASSIGNMENT}"
    if not url or not token:
        latest = {"state": "done", "text": "No check service is set up: ask your instructor for its address and your "
                                           "token."}
    else:
        path = pathlib.Path(notebook or f"{ASSIGNMENT}.ipynb")
        latest = ask(urllib.request.Request(sent, data=path.read_bytes(), method="POST",
                                            headers={**headers, "Prefer": "respond-async"}))
    where = urllib.parse.urljoin(sent, latest.get("poll", ""))
    asked = False

    def follow():
        """The service's latest word on this check: the first call, its answer to the notebook; each later call asks
        it again while the check waits."""
        nonlocal latest, asked
        if asked and latest["state"] != "done":
            latest = ask(urllib.request.Request(where, headers=headers))
        asked = True
        return latest

    if not wait:
        return follow
    answer, shown, said, deadline = follow(), None, 0.0, time.monotonic() + 900
    while answer["state"] != "done" and time.monotonic() < deadline:
        if (answer["state"], answer.get("position")) != shown or time.monotonic() - said >= 5:
            print(answer["text"], flush=True)
            shown, said = (answer["state"], answer.get("position")), time.monotonic()
        time.sleep(1)
        answer = follow()
    if answer["state"] != "done":
        answer = {"text": "No answer came within 15 minutes: check again later."}
    print(answer.get("text", ""))
    return answer.get("total")
