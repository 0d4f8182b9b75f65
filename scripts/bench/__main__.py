"""``python -m scripts.bench <command> ...``: one command per benchmark (``--help`` lists them)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from scripts.bench import (
    agent,
    attention,
    attention_sweep,
    cutlass_cache,
    fp8_error,
    gemm,
    lowered,
    precision,
    quant,
    rerun,
)

COMMANDS = {"gemm": gemm, "agent": agent, "attention": attention,
            "attention-sweep": attention_sweep, "precision": precision,
            "fp8-error": fp8_error, "cutlass-cache": cutlass_cache, "quant": quant,
            "lowered": lowered, "rerun": rerun}


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m scripts.bench",
                                 description="Benchmarks of kernelsearch (run on a GPU host).")
    sub = ap.add_subparsers(dest="command", required=True)
    for name, module in COMMANDS.items():
        doc = (module.__doc__ or name).strip().splitlines()[0]
        module.add_arguments(sub.add_parser(name, help=doc, description=doc))
    args = ap.parse_args(argv)
    return COMMANDS[args.command].run(args)


if __name__ == "__main__":
    sys.exit(main())
