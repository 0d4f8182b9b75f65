"""``kernelsearch``: tune a problem locally, serve the API, run a worker, submit and query jobs.

Also reachable as ``python3 -m service.cli``. The commands share their options
(:mod:`~service.cli.options`: the problem's, derived from the registered kinds, the job's, and
``--json``/``--url``), print tables by default (:mod:`~service.cli.show`), and run here
(:mod:`~service.cli.here`: ``tune``, ``serve``, ``worker``, ``migrate``) or against a service
(:mod:`~service.cli.remote`: ``submit``, ``status``, ``best``, ``jobs``, ``cancel``).
"""

from __future__ import annotations

import sys

import typer

from search import kinds
from service.settings import get_settings


def _load_plugins() -> None:
    """The kinds named in ``KS_PLUGINS`` (their fields become options too); one that fails to
    import is reported, and the built-in kinds still work."""
    try:
        kinds.load_plugins(get_settings().plugin_modules)
    except Exception as exc:  # noqa: BLE001 - any import error: the CLI must still start
        print(f"kernelsearch: KS_PLUGINS could not be imported: {exc!r}", file=sys.stderr)


_load_plugins()

from service.cli import here, remote  # noqa: E402 - after the plug-ins: options derive from kinds

__all__ = ["app", "main"]

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  rich_markup_mode="rich",
                  help="Autotuning kernel search: library kernels vs generated Triton kernels "
                       "(GEMM, attention), every measurement in a database.")
app.command(rich_help_panel="Here")(here.tune)
app.command(rich_help_panel="Here")(here.serve)
app.command("worker", rich_help_panel="Here")(here.worker_cmd)
app.command("planner", rich_help_panel="Here")(here.planner_cmd)
app.command(rich_help_panel="Here")(here.migrate)
for _command in (remote.submit, remote.status, remote.best, remote.jobs, remote.cancel):
    app.command(rich_help_panel="Against a service (--url)")(_command)


def main() -> None:
    from service.client import KernelSearchError

    try:
        app()
    except KernelSearchError as exc:
        # The embedded service refused the request or cannot be reached: its message names the
        # field and the rule; a traceback would only hide it.
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(2)
