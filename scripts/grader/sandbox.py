"""Where a submission's code runs: a bubblewrap sandbox when the machine has a working one, else as today.

:class:`Sandbox` starts one process (the notebook runner or the check runner) for one submission:

* ``bwrap`` (Linux, https://github.com/containers/bubblewrap): a new PID namespace (the sandbox sees its own
  processes only, so no parent's ``/proc/<pid>/environ``; every process left behind dies with it), no network
  (a loopback of its own only), a private ``/tmp`` and a private working folder (both small ``tmpfs``), read-only
  views of ``/usr``, a few files of ``/etc``, the Python environment, the course's package (the withheld build)
  and the grader's own scripts; nothing else of the machine (no home folder, no other submission). When the grader
  runs as root the sandboxed process also drops to a user of its own (``60000 + slot``, no capabilities), which is
  what makes the process limit count (Linux never applies ``RLIMIT_NPROC`` to root).
* ``none`` (no ``bwrap``, or one that cannot create namespaces, e.g. in some containers or on macOS): the process
  runs as your user in a temporary folder, with the same resource limits; the grader says so on its first line.

In both, the process starts under resource limits (:class:`Limits`: address space, processes, file size, CPU
time), set by a tiny launcher before anything else runs, and :func:`sweep` kills whatever is left after each
submission: every process of the sandbox's user, in the submission's session, or carrying its token.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

BWRAP_VARIABLE = "ATTENTION_COURSE_BWRAP"  # a path to bwrap; "none" (or a path that does not exist): no sandbox
TOKEN_VARIABLE = "ATTENTION_COURSE_GRADE_TOKEN"
ETC_FILES = ("ld.so.cache", "ld.so.conf", "ld.so.conf.d", "passwd", "group", "nsswitch.conf", "localtime",
             "hosts", "fonts", "mime.types", "alternatives", "ssl")
INSIDE_WORK, INSIDE_COURSE, INSIDE_GRADER = "/submission", "/course", "/grader"
FIRST_UID = 60000

# The launcher: sets the limits, then becomes the real command (no shell, nothing else runs first).
_LAUNCHER = """
import json, os, resource, sys
limits = json.loads(sys.argv[1])
for name, value in limits.items():
    which = getattr(resource, name)
    soft, hard = resource.getrlimit(which)
    value = value if hard == resource.RLIM_INFINITY else min(value, hard)
    resource.setrlimit(which, (value, value))
os.execv(sys.argv[2], sys.argv[2:])
"""


@dataclass
class Limits:
    """Resource limits on every process of a submission (each process has its own, except ``processes``)."""

    memory_mb: int = 2048       # RLIMIT_AS: address space of one process (a Python kernel with torch needs ~1.2 GB)
    processes: int = max(96, 8 * (os.cpu_count() or 1))  # RLIMIT_NPROC: processes and threads at once (torch
    #                                                           starts a thread per core)
    file_mb: int = 64           # RLIMIT_FSIZE: the largest file one process may write
    cpu_s: int = 600            # RLIMIT_CPU: CPU seconds of one process

    def rlimits(self, running_now: int = 0) -> dict[str, int]:
        return {"RLIMIT_AS": self.memory_mb << 20, "RLIMIT_NPROC": running_now + self.processes,
                "RLIMIT_FSIZE": self.file_mb << 20, "RLIMIT_CPU": self.cpu_s}


def _processes_of(uid: int) -> int:
    """How many processes and threads ``uid`` runs now (RLIMIT_NPROC counts them all, machine-wide)."""
    count = 0
    for entry in _pids():
        try:
            status = Path(f"/proc/{entry}/status").read_text()
        except OSError:
            continue
        fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
        if int(fields.get("Uid", "-1").split()[0]) == uid:
            count += int(fields.get("Threads", "1").strip())
    return count


def _pids() -> list[int]:
    try:
        return [int(name) for name in os.listdir("/proc") if name.isdigit()]
    except OSError:  # no /proc (macOS)
        return []


class Sandbox:
    """The kind of confinement this machine gives (``kind``: "bwrap" or "none"; ``reason`` when none)."""

    def __init__(self, kind: str, bwrap: str | None, reason: str = ""):
        self.kind, self.bwrap, self.reason = kind, bwrap, reason
        self.root = os.geteuid() == 0 if hasattr(os, "geteuid") else False

    @classmethod
    def detect(cls, wanted: str = "auto") -> Sandbox:
        """``auto``: bwrap if it works here, else none; ``bwrap``: bwrap or an error; ``none``: none."""
        if wanted == "none":
            return cls("none", None, "turned off (--sandbox none)")
        setting = os.environ.get(BWRAP_VARIABLE, "")
        path = (None if setting.lower() == "none" else setting) if setting else shutil.which("bwrap")
        if setting.lower() == "none":
            reason = f"{BWRAP_VARIABLE}=none"
        elif not sys.platform.startswith("linux"):
            reason = f"bubblewrap needs Linux, this is {sys.platform}"
        elif not path or not os.access(path, os.X_OK):
            reason = f"no bubblewrap at {path}" if path else "no bubblewrap (bwrap) on this machine"
        else:
            sandbox = cls("bwrap", path)
            problem = sandbox._probe()
            if problem is None:
                return sandbox
            reason = f"bubblewrap cannot create its namespaces here ({problem})"
        if wanted == "bwrap":
            raise SystemExit(f"--sandbox bwrap: {reason}")
        return cls("none", None, reason)

    def _probe(self) -> str | None:
        argv = self._bwrap_argv(slot=0, ro={}, files={}) + [sys.executable, "-S", "-c", "pass"]
        try:
            done = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, timeout=60)
        except (OSError, subprocess.TimeoutExpired) as error:
            return f"{type(error).__name__}: {error}"
        if done.returncode != 0:
            return (done.stderr.decode(errors="replace").strip().splitlines() or [f"exit {done.returncode}"])[-1]
        return None

    def uid(self, slot: int) -> int | None:
        """The user a sandboxed process runs as (root only: a user of its own per slot), else None (yours)."""
        return FIRST_UID + slot if self.kind == "bwrap" and self.root else None

    # --- the command line ----------------------------------------------------------------------------------
    def _bwrap_argv(self, slot: int, ro: dict[str, Path], files: dict[str, Path]) -> list[str]:
        argv = [self.bwrap, "--unshare-pid", "--unshare-net", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try",
                "--die-with-parent", "--new-session"]
        mounted: list[str] = []
        made: list[str] = []

        def parents(inside: str) -> None:  # bwrap would make them 0700: unreadable for the sandbox's user
            for parent in reversed(Path(inside).parents):
                name = str(parent)
                if name != "/" and name not in made and not any(name.startswith(m + "/") for m in mounted):
                    argv.extend(["--perms", "0755", "--dir", name])
                    made.append(name)

        def bind(host: Path, inside: str) -> None:
            if any(inside == m or inside.startswith(m + "/") for m in mounted):
                return
            parents(inside)
            argv.extend(["--ro-bind", str(host), inside])
            mounted.append(inside)

        bind(Path("/usr"), "/usr")
        for name in ("bin", "lib", "lib64", "lib32", "sbin"):
            path = Path("/") / name
            if path.is_symlink():
                argv.extend(["--symlink", os.readlink(path), str(path)])
            elif path.is_dir():
                bind(path, str(path))
        argv.extend(["--perms", "0755", "--dir", "/etc"])
        for name in ETC_FILES:
            if (Path("/etc") / name).exists():
                argv.extend(["--ro-bind", f"/etc/{name}", f"/etc/{name}"])
        python = Path(os.path.realpath(sys.executable)).parent.parent
        for path in sorted({Path(sys.prefix).resolve(), Path(sys.base_prefix).resolve(), python}, key=str):
            bind(path, str(path))
        if Path(sys.prefix) != Path(sys.prefix).resolve():  # a venv reached through a symlink
            bind(Path(sys.prefix).resolve(), str(Path(sys.prefix)))
        for inside, host in ro.items():
            bind(host, inside)
        argv.extend(["--proc", "/proc", "--dev", "/dev",
                     "--perms", "1777", "--size", str(256 << 20), "--tmpfs", "/tmp",
                     "--perms", "1777", "--size", str(256 << 20), "--tmpfs", INSIDE_WORK])
        for inside, host in files.items():
            argv.extend(["--ro-bind", str(host), inside])
        argv.extend(["--chdir", INSIDE_WORK])
        uid = self.uid(slot)
        if uid is not None:
            setpriv = shutil.which("setpriv") or "/usr/bin/setpriv"
            argv.extend(["--", setpriv, f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "--inh-caps=-all",
                         "--bounding-set=-all", "--no-new-privs", "--"])
        else:
            argv.append("--")
        return argv

    def paths(self, work: Path, course: Path, grader: Path) -> dict[str, str]:
        """How the sandboxed process reaches its working folder, the course package and the grader's scripts."""
        if self.kind == "bwrap":
            return {"work": INSIDE_WORK, "course": INSIDE_COURSE, "grader": INSIDE_GRADER}
        return {"work": str(work), "course": str(course), "grader": str(grader)}

    def start(self, command: list[str], *, slot: int, work: Path, course: Path, grader: Path,
              files: dict[str, Path], env: dict[str, str], limits: Limits, stdin, stdout,
              pass_fds: tuple[int, ...]) -> subprocess.Popen:
        """Start ``command`` (its paths as :meth:`paths` gives them) confined, under ``limits``.

        ``files`` are read-only files placed in the working folder (``{"submission.ipynb": host path}``); without a
        sandbox they are copied into ``work`` (a fresh temporary folder of the grader's).
        """
        uid = self.uid(slot)
        if uid is None and hasattr(os, "getuid"):
            uid = os.getuid()  # the limit counts all of your processes: allow those running now, plus the limit
        running = _processes_of(uid) if uid is not None else 0
        if self.kind == "bwrap":
            inside = {f"{INSIDE_WORK}/{name}": host for name, host in files.items()}
            argv = self._bwrap_argv(slot, {INSIDE_COURSE: course, INSIDE_GRADER: grader}, inside) + command
            cwd = work
        else:
            for name, host in files.items():
                shutil.copyfile(host, work / name)
            argv, cwd = command, work
        launcher = [sys.executable, "-S", "-E", "-c", _LAUNCHER, json.dumps(limits.rlimits(running))]
        executable = argv[0] if os.path.isabs(argv[0]) else shutil.which(argv[0]) or argv[0]
        return subprocess.Popen(launcher + [executable, *argv[1:]], cwd=cwd, env=env, stdin=stdin, stdout=stdout,
                                stderr=stdout, pass_fds=pass_fds, start_new_session=True)


def sweep(token: str, uid: int | None = None, session: int | None = None) -> int:
    """Kill every process left by a submission: of the sandbox's ``uid``, in its ``session``, or whose
    environment carries ``token``. Returns how many were killed. Repeats until none is found (a process that
    forks while being swept is caught on the next round)."""
    me, killed, marker = os.getpid(), set(), f"{TOKEN_VARIABLE}={token}".encode()
    if session is not None and not Path("/proc").is_dir():
        try:
            os.killpg(session, signal.SIGKILL)
        except OSError:
            pass
        return 0
    for _ in range(50):
        found = []
        for pid in _pids():
            if pid == me:
                continue
            try:
                if uid is not None:
                    status = Path(f"/proc/{pid}/status").read_text()
                    line = next(x for x in status.splitlines() if x.startswith("Uid:"))
                    if int(line.split()[1]) == uid:
                        found.append(pid)
                        continue
                if session is not None:
                    stat = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
                    if int(stat[2]) == session or int(stat[3]) == session:  # its process group or session
                        found.append(pid)
                        continue
                if marker in Path(f"/proc/{pid}/environ").read_bytes():
                    found.append(pid)
            except (OSError, StopIteration, ValueError, IndexError):
                continue
        found = [pid for pid in found if not _is_zombie(pid)]
        if not found:
            break
        for pid in found:
            try:
                os.kill(pid, signal.SIGKILL)
                killed.add(pid)
            except OSError:
                pass
        time.sleep(0.05)
    for pid in killed:  # ours to reap only if they were our children
        try:
            os.waitpid(pid, os.WNOHANG)
        except OSError:
            pass
    return len(killed)


def _is_zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except (OSError, IndexError):
        return True
