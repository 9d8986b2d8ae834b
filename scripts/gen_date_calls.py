"""Writes the generated date-guard calls (clean, bad and stale twins) as JSON Lines.

The same calls ``voice-agent eval dates`` scores; see voice_agent/harness/evaluation/date_calls.py for
what a call holds and where its labels come from.

    .venv/bin/python scripts/gen_date_calls.py OUT.jsonl [--n 60] [--seed 0]
"""

from __future__ import annotations

import argparse

from voice_agent.harness.evaluation.date_calls import write_calls


def main() -> None:
    """Parses the command line and writes the file."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", help="The JSON Lines file to write.")
    parser.add_argument("--n", type=int, default=60, help="Calls to generate (each with its twins).")
    parser.add_argument("--seed", type=int, default=0, help="The generator's seed.")
    args = parser.parse_args()
    written = write_calls(args.out, args.n, args.seed)
    print(f"{written} call records ({args.n} calls with their twins, seed {args.seed}) written to {args.out}")


if __name__ == "__main__":
    main()
