"""What the sandbox costs a HumanEval problem at each isolation level this machine allows, against the same
programs run by the bare interpreter with no isolation at all; and why the other levels cannot be had.

Every canonical solution is run once per level, one program at a time (so each figure is a program's own), then
once more graded as HumanEval grades it (`checked`: the checks in the judge, the program in a child of its own),
and the wall and CPU seconds per program are printed as median and 90th percentile. Wall time runs from launch to
the moment nothing of the program
runs and its files are gone; CPU time is its cgroup's (launcher, harness, program), where it has one.

    python bench/sandbox_cost.py            # all 164 problems
    python bench/sandbox_cost.py --limit 40
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from sparknb import sandbox as sb  # noqa: E402
from sparknb.studies import humaneval as h  # noqa: E402


def bare(program: str) -> tuple[float, float]:
    """The program in the bare interpreter, as this user, no limits: the floor any sandbox adds to."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    subprocess.run([sb.PYTHON, "-I", "-B", "-c", program], check=True, capture_output=True, env={}, cwd="/tmp")
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def row(name: str, walls: list[float], cpus: list[float]) -> str:
    def q(xs: list[float], at: float) -> float:
        return 1000 * sorted(xs)[min(len(xs) - 1, int(at * len(xs)))]

    return (f"{name:<12} {len(walls):>8} {1000 * statistics.median(walls):>10.1f} {q(walls, 0.9):>10.1f} "
            f"{1000 * statistics.median(cpus):>10.1f} {q(cpus, 0.9):>10.1f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--limit", type=int, default=0, help="the first N problems (0: all 164)")
    args = parser.parse_args()
    problems = h.select(h.load(), limit=args.limit)
    programs = [h.program(p, p.prompt + p.canonical) for p in problems]
    allowed = sb.allowed()
    print(f"{os.uname().nodename}: kernel {os.uname().release}, euid {os.geteuid()}, {os.cpu_count()} CPUs")
    for level, why in allowed.items():
        print(f"  {level:<11} {'allowed' if why is None else 'NOT allowed: ' + why.splitlines()[0]}")
    print(f"\n{'level':<12} {'programs':>8} {'wall ms':>10} {'wall p90':>10} {'CPU ms':>10} {'CPU p90':>10}")
    walls, cpus = zip(*(bare(p) for p in programs))
    print(row("bare", list(walls), list(cpus)))
    for level in (lv for lv, why in allowed.items() if why is None):
        box = sb.Sandbox.open(level)
        print(f"  {box.describe()}")
        print(line(level, [box.run(p) for p in programs]))
        print(line("  checked", [h.grading.checked(q, q.prompt + q.canonical, box) for q in problems]))
    print("\nwall: from launch to the moment nothing of the program runs (its cgroup empty) and its files are gone; "
          "CPU: the sandbox's whole process tree (launcher, harness, program).")


def line(name: str, results: list[sb.Result]) -> str:
    failed = [r for r in results if not r.passed]
    suspect = [r for r in results if r.suspect]
    return (row(name, [r.wall_s for r in results], [r.cpu_s for r in results if r.cpu_s is not None])
            + (f"   {len(failed)} FAILED: {failed[0].status} {failed[0].detail}" if failed else "")
            + (f"   {len(suspect)} suspect: {suspect[0].suspect}" if suspect else ""))


if __name__ == "__main__":
    main()
