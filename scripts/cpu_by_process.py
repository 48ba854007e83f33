"""Where the CPU time of a command goes: run it, look at every process on the machine once a second, and print the
CPU-seconds of the processes it started, grouped by kind (kernels of each stack, Chromium, pytest workers, pip, ...),
with how busy the cores were in each 30 s of the run. Linux only (reads /proc); standard library only.

    python3 scripts/cpu_by_process.py -- make test
    python3 scripts/cpu_by_process.py --json build/cpu.json -- make test
    python3 scripts/cpu_by_process.py --total "make test" -- make suite     # one line (what `make test` prints)

By kind: processes that start and end between two looks (under a second) are missed, so the total is a little low;
processes that were running before the command are left out, but every process that starts while it runs is
counted, whoever started it: measure with nothing else running. On a machine whose speed varies, compare CPU-seconds
of the same group across runs, not one run's total.

``--total NAME`` prints one line instead: the wall time, and the CPU-seconds (user + system) of exactly the processes
the command started, from the kernel's own accounting of every process that ended (no sampling, nobody else's
processes). On Linux this script becomes the "subreaper" of what it starts, so a process left behind by its parent
(a shell's ``( ... &)``) is handed to it and counted when it ends; elsewhere such processes are not counted.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import re
import subprocess
import sys
import time

HZ = os.sysconf("SC_CLK_TCK")
# (group, pattern searched in the command line), first match wins.
GROUPS = [
    ("kernel, Colab-like stack", r"colab-stack\S*python.* -m ipykernel_launcher"),
    ("kernel", r"-m ipykernel_launcher"),
    ("Chromium", r"^(\S*chrom\S*|/proc/self/exe) "),
    ("JupyterLab server", r"jupyter-lab|jupyter lab"),
    ("classic Notebook server", r"jupyter-notebook|jupyter notebook"),
    ("Playwright driver", r"playwright/driver|^\S*node "),
    ("pytest worker, Colab-like stack", r"colab-stack\S*python .*exec\(eval"),
    ("pytest worker", r"exec\(eval\(sys\.stdin"),
    ("pytest", r"pytest"),
    ("pip", r"\bpip\b"),
]


def _busy_and_total() -> tuple[int, int]:
    with open("/proc/stat") as stat:
        values = [int(v) for v in stat.readline().split()[1:]]
    idle = values[3] + values[4]
    return sum(values) - idle, sum(values)


def _look(seen: dict) -> None:
    """Record the CPU-seconds and command line of every process now running (pid and start time as the key)."""
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/stat") as stat:
                text = stat.read()
            fields = text[text.rfind(")") + 2:].split()
            key, cpu = (pid, fields[19]), (int(fields[11]) + int(fields[12])) / HZ
            if key not in seen:
                with open(f"/proc/{pid}/cmdline", "rb") as cmdline:
                    command = cmdline.read().replace(b"\0", b" ").decode(errors="replace").strip()
                seen[key] = [command, cpu]
            else:
                seen[key][1] = cpu
        except (OSError, IndexError, ValueError):
            pass  # the process ended meanwhile


def group_of(command: str) -> str:
    for name, pattern in GROUPS:
        if re.search(pattern, command):
            return name
    return "other: " + (command.split(" ")[0].rsplit("/", 1)[-1] or "?")


def _become_subreaper() -> bool:
    """Linux: orphaned descendants are re-parented to this process (so it can reap and count them)."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        import ctypes
        pr_set_child_subreaper = 36
        return ctypes.CDLL(None, use_errno=True).prctl(pr_set_child_subreaper, 1, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def run_and_total(command: list[str], name: str) -> int:
    """Run ``command``; print one line: its wall time and the CPU-seconds of every process it started."""
    import resource
    import signal

    _become_subreaper()
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.monotonic()
    child = subprocess.Popen(command)
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl+C reaches the command; we wait for it
    status = None
    try:
        while status is None:
            try:
                pid, wait_status = os.waitpid(-1, 0)  # the command, or an orphan handed to us
            except ChildProcessError:
                break
            if pid == child.pid:
                status = os.waitstatus_to_exitcode(wait_status)
        while True:  # orphans that have ended by now; the ones still running are not waited for
            try:
                if os.waitpid(-1, os.WNOHANG)[0] == 0:
                    break
            except ChildProcessError:
                break
    finally:
        signal.signal(signal.SIGINT, previous)
    child.returncode = status if status is not None else 1
    wall = time.monotonic() - started
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = usage.ru_utime + usage.ru_stime - before.ru_utime - before.ru_stime
    print(f"[{name}] exit {child.returncode}, {wall:,.0f} s, {cpu:,.0f} CPU-s "
          f"({cpu / max(wall, 1e-9):.2f} cores busy on average), every process it started included", flush=True)
    return child.returncode if child.returncode >= 0 else 128 - child.returncode


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", help="also write every process's CPU-seconds and command line here")
    parser.add_argument("--total", metavar="NAME", help="print one line only: NAME, the wall time and the "
                        "CPU-seconds of every process the command started (the kernel's accounting)")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="the command to run, after --")
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("no command given (put it after --)")
    if args.total:
        return run_and_total(command, args.total)
    before: dict = {}
    _look(before)
    seen: dict = {}
    busy_windows: list[float] = []
    started, (busy0, total0) = time.monotonic(), _busy_and_total()
    process = subprocess.Popen(command)
    while process.poll() is None:
        time.sleep(1)
        _look(seen)
        busy, total = _busy_and_total()
        busy_windows.append((busy - busy0) / max(1, total - total0))
        busy0, total0 = busy, total
    wall = time.monotonic() - started
    mine = {key: value for key, value in seen.items() if key not in before}
    groups: dict[str, float] = collections.defaultdict(float)
    counts: collections.Counter = collections.Counter()
    for command_line, cpu in mine.values():
        groups[group_of(command_line)] += cpu
        counts[group_of(command_line)] += 1
    print(f"\n[cpu] {' '.join(command)}: exit {process.returncode}, {wall:.0f} s, "
          f"{sum(groups.values()):.0f} CPU-s in the processes it started")
    for name, cpu in sorted(groups.items(), key=lambda item: -item[1]):
        if cpu >= 0.5:
            print(f"[cpu] {cpu:8.1f} CPU-s  {counts[name]:4d} processes  {name}")
    windows = [busy_windows[i:i + 30] for i in range(0, len(busy_windows), 30)]
    print("[cpu] cores busy per 30 s: " + " ".join(f"{sum(w) / len(w):.2f}" for w in windows if w))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as out:
            json.dump({"command": command, "exit": process.returncode, "wall_s": round(wall, 1),
                       "processes": [{"cpu_s": cpu, "command": c} for c, cpu in mine.values()]}, out, indent=1)
    return process.returncode


if __name__ == "__main__":
    sys.exit(main())
