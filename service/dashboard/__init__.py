"""The web dashboard: read-only pages of tuning history, served by the app itself at ``/ui``.

Server-side Jinja2 templates for the tables (filtered, sorted and paginated in SQL by
``db.dashboard``), Plotly for the charts, fed by JSON endpoints under ``/ui/api``. Everything a
page loads comes from the app: its own CSS and scripts (``static/``) and Plotly's bundled
``plotly.min.js``, served from the installed ``plotly`` package (a dependency; the file is not
copied into this repository). The only write is the jobs page's cancel button, which calls
``POST /v1/jobs/{id}/cancel`` like any client, with the user token pasted on that page (kept in
the browser's localStorage) as its bearer. ``KS_DASHBOARD=false`` turns it off.
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from fastapi.responses import RedirectResponse
from fastapi.staticfiles import StaticFiles

from service.dashboard import api, pages
from service.dashboard.views import STATIC

__all__ = ["install"]


def install(app: FastAPI, read_auth: Any) -> None:
    """Mount the dashboard's pages, data endpoints and files on ``app``; ``/`` redirects.
    ``read_auth`` guards the pages and their data like the API's reads (``KS_PUBLIC_READS``);
    the static files are public."""

    @app.get("/", include_in_schema=False)
    def root() -> RedirectResponse:
        return RedirectResponse("/ui", status_code=307)

    app.include_router(api.router, dependencies=[read_auth])
    app.include_router(pages.router, dependencies=[read_auth])
    app.mount("/ui/static", StaticFiles(directory=STATIC), name="ui-static")
