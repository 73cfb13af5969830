"""Serve a class from several lab processes behind HAProxy, each browser kept on its own process.

A Streamlit session lives in the memory of the one process that opened it: its websocket, its
uploads (`/_stcore/upload_file`) and its downloads (`/media/...`) must all reach that process, and
so must the websocket when it reconnects after a dropped connection. One Python process uses
about one core, so a class on a bigger machine needs several processes and something in front
that remembers who goes where. HAProxy (Debian's `haproxy`) sends each new browser to the next
process in turn and pins it there with a cookie it sets on the first answer (LAB_PROCESS=p0,
p1, ...); every later request, the websocket's included, carries the cookie back.

    python -m tools.classroom --processes 2                          # http://127.0.0.1:8501
    python -m tools.classroom --processes 4 --address 0.0.0.0        # open to the classroom's network

Budgets: every process holds each of its sessions to lab/budgets.py's limits, and sweeps and A/B
runs are counted per process (LAB_HEAVY_JOBS): --heavy-jobs is shared out among the processes,
at least one each, so the whole server runs at most max(--heavy-jobs, --processes) at once.
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
COOKIE = "LAB_PROCESS"

# The balancer's whole configuration. Timeouts: a lesson's websocket stays open for an hour of
# quiet (Streamlit pings it, so a longer silence is a tab that is gone); plain requests get a minute.
BALANCER = """\
global
    maxconn 4096
    stats socket {stats} mode 600 level user
defaults
    mode http
    option forwardfor
    timeout connect 5s
    timeout client 60s
    timeout server 60s
    timeout tunnel 1h
frontend lab
    bind {address}:{port}
    default_backend processes
backend processes
    balance roundrobin
    cookie {cookie} insert indirect nocache httponly
    option httpchk GET /_stcore/health
{servers}
"""


def free_port() -> int:
    """A port nothing listens on now, on 127.0.0.1."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_healthy(url: str, proc: subprocess.Popen, log: Path | None) -> None:
    """Until url answers its health check; RuntimeError, quoting the log's end, if the process
    exits or two minutes pass."""
    deadline = time.monotonic() + 120
    while True:
        try:
            urllib.request.urlopen(f"{url}/_stcore/health", timeout=2)
            return
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                said = log.read_text()[-3000:] if log else ""
                raise RuntimeError(f"{url} did not start\n{said}") from None
            time.sleep(0.5)


def _stop(proc: subprocess.Popen) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=15)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


@contextmanager
def lab_server(env: dict[str, str] | None = None, log: Path | None = None,
               port: int | None = None) -> Iterator[tuple[subprocess.Popen, str]]:
    """`streamlit run app.py` on 127.0.0.1 only (never every interface: issue 32), on port (a free
    one if None), and its URL; env is added to this process's, the output goes to log (or nowhere);
    stopped on exit."""
    port = port or free_port()
    with log.open("w") if log else open(os.devnull, "w") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "streamlit", "run", "app.py", "--server.headless", "true", "--server.port",
             str(port), "--server.address", "127.0.0.1", "--browser.gatherUsageStats", "false"],
            cwd=ROOT, env={**os.environ, **(env or {})}, stdout=out, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_healthy(url, proc, log)
        yield proc, url
    finally:
        _stop(proc)


def balancer_config(ports: list[int], port: int, address: str, stats: Path) -> str:
    servers = "\n".join(f"    server p{i} 127.0.0.1:{p} check cookie p{i}" for i, p in enumerate(ports))
    return BALANCER.format(stats=stats, address=address, port=port, cookie=COOKIE, servers=servers)


def heavy_jobs_each(total: int, processes: int) -> int:
    """Each process's share of the sweeps and A/B runs the whole server may compute at once."""
    return max(1, total // processes)


@dataclass
class Classroom:
    url: str
    processes: list[subprocess.Popen]  # process pN is the backend HAProxy's cookie calls pN
    balancer: subprocess.Popen
    stats: Path  # HAProxy's stats socket

    def requests_per_process(self) -> dict[str, int]:
        """How many connections HAProxy has handed each process so far ('show stat', column stot)."""
        with socket.socket(socket.AF_UNIX) as s:
            s.connect(str(self.stats))
            s.sendall(b"show stat\n")
            text = b"".join(iter(lambda: s.recv(65536), b"")).decode()
        header, *rows = (line.split(",") for line in text.splitlines() if line)
        col = {name.lstrip("# "): i for i, name in enumerate(header)}
        return {row[col["svname"]]: int(row[col["stot"]]) for row in rows
                if row[col["pxname"]] == "processes" and row[col["svname"]].startswith("p")}


@contextmanager
def classroom(processes: int, port: int | None = None, address: str = "127.0.0.1", heavy_jobs: int = 2,
              env: dict[str, str] | None = None, logs: Path | None = None) -> Iterator[Classroom]:
    """N lab processes on free ports of 127.0.0.1 and HAProxy in front on address:port (a free port
    of 127.0.0.1 if None); each process's output goes to logs/pN.log (or nowhere); all stopped on exit."""
    haproxy = shutil.which("haproxy") or "/usr/sbin/haproxy"
    if not Path(haproxy).exists():
        raise RuntimeError("haproxy is missing: apt-get install haproxy")
    env = {**(env or {}), "LAB_HEAVY_JOBS": str(heavy_jobs_each(heavy_jobs, processes))}
    if logs:
        logs.mkdir(parents=True, exist_ok=True)
    with ExitStack() as stack:
        work = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="lab-classroom-")))
        procs = [stack.enter_context(lab_server(env, logs / f"p{i}.log" if logs else None))
                 for i in range(processes)]
        port = port or free_port()
        stats = work / "haproxy.sock"
        config = work / "haproxy.cfg"
        config.write_text(balancer_config([int(url.rsplit(":", 1)[1]) for _, url in procs], port, address, stats))
        checked = subprocess.run([haproxy, "-c", "-q", "-f", str(config)], capture_output=True, text=True)
        if checked.returncode:
            raise RuntimeError(f"haproxy refused its configuration:\n{checked.stdout}{checked.stderr}")
        balancer = subprocess.Popen([haproxy, "-db", "-f", str(config)], stdout=subprocess.DEVNULL,
                                    stderr=subprocess.STDOUT)
        stack.callback(_stop, balancer)
        url = f"http://{'127.0.0.1' if address in ('0.0.0.0', '::') else address}:{port}"
        _wait_healthy(url, balancer, None)
        yield Classroom(url, [proc for proc, _ in procs], balancer, stats)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--processes", type=int, default=2, help="lab processes (about one core each; default 2)")
    p.add_argument("--port", type=int, default=8501, help="the port the class opens (default 8501)")
    p.add_argument("--address", default="127.0.0.1",
                   help="where the balancer listens (default 127.0.0.1; 0.0.0.0 for the classroom's network)")
    p.add_argument("--heavy-jobs", type=int, default=2,
                   help="sweeps and A/B runs computing at once, shared out among the processes (default 2)")
    args = p.parse_args(argv)
    if not 1 <= args.processes <= 64:
        p.error(f"--processes {args.processes}: give 1 to 64")
    if args.heavy_jobs < 1:
        p.error(f"--heavy-jobs {args.heavy_jobs}: give at least 1")
    if not 1 <= args.port <= 65535:
        p.error(f"--port {args.port}: give 1 to 65535")
    try:
        with classroom(args.processes, args.port, args.address, args.heavy_jobs) as room:
            each = heavy_jobs_each(args.heavy_jobs, args.processes)
            print(f"The class opens {room.url} ({args.processes} lab processes behind HAProxy; "
                  f"{each} sweep or A/B run at once on each, {each * args.processes} in all). Ctrl-C stops it.")
            while all(proc.poll() is None for proc in [*room.processes, room.balancer]):
                time.sleep(1)
            print("a lab process or the balancer stopped; stopping the rest", file=sys.stderr)
    except RuntimeError as exc:
        raise SystemExit(str(exc)) from None
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
