"""``python -m scripts.mutation run|report``: mutation testing of the decision loop and the
worker's ``execute`` with mutmut (the ``mutation`` extra; ``[tool.mutmut]`` in pyproject.toml
says what is mutated and which tests must kill the mutants).

    python -m scripts.mutation run --max-children 2                  # everything configured
    python -m scripts.mutation run "search.decision.*"               # a subset, by mutant name
    python -m scripts.mutation report                                # the last run's report

``run`` starts from a clean ``mutants/`` (mutmut's working copy, git-ignored) unless
``--resume``, and passes the names (globs of mutmut's mutant names) to ``mutmut run``.
``report`` counts mutmut's verdicts per file (killed, survived, timeout, no tests, not
checked) and writes ``<out>/mutation_<date>.md`` and ``.json`` with the diff of each surviving
mutant. A periodic job or a documented command, not part of every CI run: on two busy cores
``search.decision`` (about 2,100 mutants) takes half an hour, and each mutant of
``workers/execute.py`` about half a minute (its tests run Triton's interpreter).
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Sequence
from datetime import UTC, datetime
from importlib.metadata import version
from pathlib import Path
from typing import Any

MUTANTS = Path("mutants")
#: mutmut's exit codes of a mutant's test run, as its ``stats.status_by_exit_code`` reads them
STATUS = {1: "killed", 3: "killed", 0: "survived", 5: "no tests", 33: "no tests",
          34: "skipped", 36: "timeout", -24: "timeout", 24: "timeout", 152: "timeout",
          255: "timeout", 37: "caught by type check", -11: "segfault", -9: "segfault",
          None: "not checked"}


_COUNTED = ("killed", "survived", "timeout", "no tests", "not checked")


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m scripts.mutation",
                                 description=(__doc__ or "").strip().splitlines()[0])
    sub = ap.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="mutmut run from a clean mutants/, then the report")
    run.add_argument("--max-children", type=int, default=2)
    run.add_argument("--resume", action="store_true", help="keep mutants/ and its verdicts")
    run.add_argument("names", nargs="*", help="globs of mutant names (default: all)")
    for p in (run, sub.add_parser("report", help="the report of the last run")):
        p.add_argument("--out", type=Path, default=Path("docs/benchmarks"))
        p.add_argument("--wall-s", type=float, default=None, help=argparse.SUPPRESS)
        p.add_argument("--diffs", type=int, default=60, help="survivors shown with their diff")
    args = ap.parse_args(argv)
    if args.command == "run":
        if not args.resume:
            shutil.rmtree(MUTANTS, ignore_errors=True)
        t0 = time.monotonic()
        subprocess.run(["mutmut", "run", "--max-children", str(args.max_children),
                        *args.names], check=False)
        args.wall_s = time.monotonic() - t0
    return report(args)


def verdicts() -> dict[str, str]:
    """Every mutant's verdict, by mutmut's name for it, from the ``.meta`` files it keeps."""
    out: dict[str, str] = {}
    for meta in sorted(MUTANTS.rglob("*.py.meta")):
        data = json.loads(meta.read_text())
        for name, code in data.get("exit_code_by_key", {}).items():
            out[name] = STATUS.get(code, "suspicious")
    return out


def report(args: argparse.Namespace) -> int:
    found = verdicts()
    if not found:
        print("no mutmut results under mutants/: run first", file=sys.stderr)
        return 1
    per_file: dict[str, Counter[str]] = {}
    for name, status in found.items():
        per_file.setdefault(_module(name), Counter())[status] += 1
    totals: Counter[str] = sum(per_file.values(), Counter())
    survivors = sorted(n for n, s in found.items() if s == "survived")
    diffs = {n: _show(n) for n in survivors[:args.diffs]}
    killed, tested = totals["killed"], totals["killed"] + totals["survived"] + totals["timeout"]
    now = datetime.now(UTC).replace(microsecond=0)
    data = {"date": now.isoformat(), "mutmut": version("mutmut"), "wall_s": args.wall_s,
            "totals": dict(totals), "score": round(killed / tested, 3) if tested else None,
            "per_file": {f: dict(c) for f, c in sorted(per_file.items())},
            "survived": survivors, "diffs": diffs}
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / f"mutation_{now.date().isoformat()}.json"
    path.write_text(json.dumps(data, indent=1) + "\n")
    path.with_suffix(".md").write_text(_markdown(data))
    print(f"score {data['score']} ({dict(totals)}); wrote {path}")
    return 0


def _module(name: str) -> str:
    """``search.decision.verdicts.x_range__mutmut_1`` -> ``search/decision/verdicts.py``."""
    parts = name.split(".")
    for i in range(len(parts), 0, -1):
        path = Path(*parts[:i]).with_suffix(".py")
        if path.exists():
            return str(path)
    return name


def _show(name: str) -> str:
    try:
        out = subprocess.run(["mutmut", "show", name], capture_output=True, text=True,
                             timeout=60, check=False).stdout
    except (OSError, subprocess.SubprocessError):
        return ""
    return "\n".join(line for line in out.splitlines()
                     if line.startswith(("+", "-")) and not line.startswith(("+++", "---")))


def _markdown(data: dict[str, Any]) -> str:
    t = data["totals"]
    wall = f"{data['wall_s'] / 60:.0f} min" if data["wall_s"] else "not recorded"
    other = sum(v for k, v in t.items() if k not in _COUNTED)
    lines = [
        f"# Mutation testing: search/decision and workers/execute.py, {data['date'][:10]}", "",
        f"mutmut {data['mutmut']} (`python -m scripts.mutation run --max-children 2`; what it "
        "mutates and the tests it runs: `[tool.mutmut]` in pyproject.toml). Wall time: "
        f"{wall}.", "",
        f"Score (killed / (killed + survived + timeout)): **{data['score']}**. Killed "
        f"{t.get('killed', 0)}, survived {t.get('survived', 0)}, timeout "
        f"{t.get('timeout', 0)}, no tests {t.get('no tests', 0)} (code no selected test "
        f"reaches), not checked {t.get('not checked', 0)}, other {other}.",
        "", "| file | killed | survived | timeout | no tests | not checked |",
        "| --- | ---: | ---: | ---: | ---: | ---: |"]
    for f, c in data["per_file"].items():
        lines.append(f"| {f} | {c.get('killed', 0)} | {c.get('survived', 0)} | "
                     f"{c.get('timeout', 0)} | {c.get('no tests', 0)} | "
                     f"{c.get('not checked', 0)} |")
    if data["diffs"]:
        lines += ["", f"## Surviving mutants with their diff (the first {len(data['diffs'])})",
                  ""]
    for name, diff in data["diffs"].items():
        lines += [f"- `{name}`", "", "  ```diff", *[f"  {d}" for d in diff.splitlines()],
                  "  ```"]
    by_function = Counter(n.rsplit("__mutmut_", 1)[0] for n in data["survived"])
    lines += ["", "## Survivors per function", "", "| function | survived |", "| --- | ---: |"]
    lines += [f"| `{f}` | {n} |" for f, n in sorted(by_function.items(), key=lambda x: -x[1])]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
