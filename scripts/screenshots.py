"""Screenshots of every dashboard page from a database, in headless Chromium.

    python scripts/screenshots.py DB_URL OUTDIR [--width 1440]

Serves the app over ``DB_URL`` (migrated to the current schema first) on a loopback port and
writes ``overview.png``, ``overview-filtered.png``, ``problem.png`` (the decided problem with
the most trials among those where a custom kernel won, else any), ``jobs.png``,
``workers.png``, ``shapes.png`` and, where attention problems were tuned,
``shapes-attention.png`` to ``OUTDIR``, each once its charts are drawn.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from urllib.parse import quote

if __package__ in (None, ""):  # run as a file: the repository root is the import root
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import httpx  # noqa: E402

from scripts.dashboard.browser import CHARTS_DRAWN, chromium, missing  # noqa: E402
from service.embedded import EmbeddedServer  # noqa: E402
from service.settings import ServiceSettings  # noqa: E402


def pages(base: str) -> list[tuple[str, str]]:
    """``(file name, path)`` of each page to photograph, chosen from what the database holds."""
    def rows(query: str) -> list[dict]:
        return httpx.get(f"{base}/ui/api/overview?{query}", timeout=30).json()["rows"]

    pick = (rows("verdict=custom_wins&sort=trials&order=desc&per_page=10")
            or rows("sort=trials&order=desc&per_page=10"))
    out = [("overview.png", "/ui"),
           ("overview-filtered.png", "/ui?kind=gemm&verdict=custom_wins&sort=speedup&order=desc")]
    if pick:
        out.append(("problem.png", f"/ui/problems/{pick[0]['problem_id']}?gpu="
                                   f"{quote(pick[0]['gpu_model'])}"))
    out += [("jobs.png", "/ui/jobs"), ("workers.png", "/ui/workers"),
            ("shapes.png", "/ui/shapes?kind=gemm")]
    if rows("kind=attention&per_page=10"):
        out.append(("shapes-attention.png", "/ui/shapes?kind=attention"))
    return out


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").strip().splitlines()[0])
    ap.add_argument("db_url")
    ap.add_argument("outdir", type=Path)
    ap.add_argument("--width", type=int, default=1440)
    args = ap.parse_args(argv)
    why = missing()
    if why:
        ap.error(why)
    args.outdir.mkdir(parents=True, exist_ok=True)
    with EmbeddedServer(ServiceSettings(database_url=args.db_url)) as server, \
            chromium() as browser:
        page = browser.new_page(viewport={"width": args.width, "height": 900})
        errors: list[str] = []
        page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
        for name, path in pages(server.url):
            page.goto(server.url + path, wait_until="networkidle")
            page.wait_for_function(CHARTS_DRAWN, timeout=60_000)
            page.wait_for_timeout(300)  # Plotly's transitions
            page.screenshot(path=str(args.outdir / name), full_page=True)
            print(f"{args.outdir / name}  <- {path}")
        if errors:
            print("console errors:\n" + "\n".join(errors), file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
