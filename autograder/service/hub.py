"""The service as a JupyterHub service: the hub starts it (`c.JupyterHub.services`, docs/instructors.md) and says
who is asking. A learner's kernel sends its server's API token (JUPYTERHUB_API_TOKEN, with the scope
`access:services!service=<name>` that the hub's `server` role grants); a browser logs in through the hub (OAuth).
Everything here is jupyterhub's own (`HubOAuth`, `HubOAuthenticated`, `HubOAuthCallbackHandler`)."""
from __future__ import annotations

import os
from urllib.parse import urlparse

import tornado.web
from jupyterhub.services.auth import HubOAuth, HubOAuthCallbackHandler, HubOAuthenticated

from autograder.service.fair import Refusal

CALLBACK = HubOAuthCallbackHandler            # where the hub's OAuth sends the browser back (at <prefix>oauth_callback)


def hub_auth() -> HubOAuth:
    """The hub's client, set up from what the hub gives its service's environment (its API token and address, the
    OAuth client and the scopes that reach the service), caching each token's user for a minute."""
    return HubOAuth.instance(cache_max_age=60)          # the instance HubOAuthCallbackHandler uses


def where() -> tuple[str, int, str]:
    """Host, port and URL prefix the hub assigned the service."""
    if "JUPYTERHUB_SERVICE_URL" not in os.environ:
        raise SystemExit("--hub: the service is started by JupyterHub, which says where it listens "
                         "(see examples/jupyterhub_config.py)")
    url = urlparse(os.environ["JUPYTERHUB_SERVICE_URL"])
    prefix = os.environ.get("JUPYTERHUB_SERVICE_PREFIX", "/")
    return url.hostname or "127.0.0.1", url.port or 80, prefix if prefix.endswith("/") else prefix + "/"


def login_page(page: type) -> type:
    """The upload page (or its check's page) behind the hub's login: the learner is the hub user whose browser it is,
    known from the hub's cookie (asked of the hub without blocking) before the form's body is read; the form's XSRF
    field once it is."""

    class HubPage(HubOAuthenticated, page):
        def initialize(self, service):
            super().initialize(service)
            self.hub_auth = service.hub

        def check_xsrf_cookie(self):
            if self.body_read:               # the form's `_xsrf` is in its body, read after its headers
                HubOAuthenticated.check_xsrf_cookie(self)

        @tornado.web.authenticated
        def get(self, *args, **kwargs):
            return super().get(*args, **kwargs)

        async def identify(self) -> str:
            user = await self.hub_auth.get_user(self, sync=False)
            if not user:
                raise Refusal(403, "log in through the hub first: open the check service's page")
            name = self.service.hub_learner(user)
            self.current_user = user
            return name

        @tornado.web.authenticated
        async def post(self):
            return await super().post()

    return HubPage
