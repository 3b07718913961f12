"""`engram serve --workers N` (or `ENGRAM_WORKERS`): N server processes answering on one port (#54: the server
uses every core).

One process runs Python on one core at a time (the interpreter's lock): at 32 clients on 2 cores a single server
held the lock about half the wall while a fifth of the cores stayed idle. Each worker builds its own services from
the parent's settings — the environment, plus the flags, passed down as JSON — and keeps its own copy of the
contexts it serves, so memory grows with the workers (at a million memories ~1.4 GB each). They meet in the data
folder as any processes sharing it do (DESIGN §9): a write checked by its version, every process seeing the others'
writes on its next request, queued jobs leased by whichever runs them. What a process keeps for itself stays with
it: its recall cache (dropped when another process writes), the log level a key set with `logging/setLevel` (as on
AWS, where each function instance keeps its own). The fair share is of the machine: each worker shares its slots
between contexts knowing what the others run, from a table in shared memory (`engram.trust.peers`) — without it a
noisy tenant's calls on another worker were not held back (a quiet tenant's recall beside them took 1.84-2.17x its
time alone with two workers, 1.28-1.52x with one). Elsewhere than Linux the workers share no table.

On Linux each worker listens on a socket of its own bound to the port with `SO_REUSEPORT`, and the kernel spreads
new connections over them. Sharing one listening socket (uvicorn's own `workers`, used elsewhere) lets whichever
process wakes first take a whole burst of connections — asyncio accepts up to a hundred at a wake — so 32 clients
connecting at once all landed on one process and stayed there (bench/RESULTS.md, "Server processes"). The small
supervisor below is written here because uvicorn's binds that one socket in the parent: it starts the workers,
starts again one that dies, and stops them all on SIGTERM or SIGINT.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import signal
import socket
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from multiprocessing.process import BaseProcess
from pathlib import Path
from typing import Any

from engram.settings import Settings
from engram.trust import peers

OVERRIDES = "ENGRAM_SERVE_OVERRIDES"  # the flags' settings, for the workers (JSON)
CANNOT_START = 3  # a worker's exit code when it cannot bind or build (uvicorn's STARTUP_FAILURE): all stop
STOP_GRACE_S = 10.0


def serve_workers(settings: Settings, overrides: dict[str, Any], log_level: str) -> int:
    """Serve with `settings.workers` processes until SIGTERM or SIGINT; 1 if a worker could not start."""
    os.environ[OVERRIDES] = json.dumps(overrides, default=str)
    if not sys.platform.startswith("linux"):  # SO_REUSEPORT does not spread connections elsewhere
        return _shared_socket(settings, log_level)
    try:  # the port free, not only shared: another server's workers bound with SO_REUSEPORT would share it silently
        with socket.socket(_family(settings.host), socket.SOCK_STREAM) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            probe.bind((settings.host, settings.port))
    except OSError as exc:
        print(f"error: cannot listen on {settings.host}:{settings.port}: {exc}", file=sys.stderr)
        return 1
    spawn = multiprocessing.get_context("spawn")
    stopping = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stopping.set())

    go = spawn.Event()  # every first worker built: all start listening (a client's burst then finds them all)
    table = peers.table(settings.workers)  # what each worker runs, for the fair share of the machine

    def started(index: int) -> tuple[BaseProcess, Any]:
        peers.clear(table, index)  # a worker that ended runs nothing now
        built = spawn.Event()
        where = (settings.host, settings.port, log_level, os.getpid())
        proc = spawn.Process(target=_worker, args=(*where, built, go, table, index))
        proc.start()
        return proc, built

    first = [started(i) for i in range(settings.workers)]
    procs = [proc for proc, _ in first]
    failed = False
    try:
        while not all(built.is_set() for _, built in first):
            if stopping.wait(0.1) or any(not proc.is_alive() for proc in procs):
                break
        go.set()
        while not stopping.wait(0.5):
            for i, proc in enumerate(procs):
                if proc.is_alive():
                    continue
                if proc.exitcode == CANNOT_START:
                    failed = True
                    stopping.set()
                    break
                print(f"engram: worker {proc.pid} ended ({proc.exitcode}); starting another", file=sys.stderr)
                procs[i], _ = started(i)
    finally:
        for proc in procs:
            if proc.is_alive():
                proc.terminate()
        for proc in procs:
            proc.join(STOP_GRACE_S)
            if proc.is_alive():
                proc.kill()
                proc.join()
    return 1 if failed else 0


def _family(host: str) -> socket.AddressFamily:
    return socket.AF_INET6 if ":" in host else socket.AF_INET


def _worker(host: str, port: int, log_level: str, parent: int, built: Any, go: Any, table: Any, index: int) -> None:
    """One worker: its own services, then (once the supervisor says `go`) its own socket on the port, uvicorn serving
    until SIGTERM — sent by the supervisor, or by the worker itself once the supervisor is gone (killed: its workers
    must not hold the port)."""
    import uvicorn

    from engram.cli.process import http_options

    def orphaned() -> None:
        while os.getppid() == parent:
            threading.Event().wait(1.0)
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=orphaned, name="engram-parent", daemon=True).start()
    sock = socket.socket(_family(host), socket.SOCK_STREAM)
    peers.join(table, index)
    try:
        made = app()
        built.set()
        go.wait()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        sock.bind((host, port))
    except Exception as exc:  # a port in use, settings that cannot build: every worker would fail alike
        print(f"engram: a worker could not start: {exc}", file=sys.stderr)
        sys.exit(CANNOT_START)
    uvicorn.Server(uvicorn.Config(made, log_level=log_level, **http_options())).run(sockets=[sock])


def _shared_socket(settings: Settings, log_level: str) -> int:
    import uvicorn

    from engram.cli.process import http_options

    uvicorn.run(
        "engram.cli.workers:app",
        factory=True,
        workers=settings.workers,
        host=settings.host,
        port=settings.port,
        log_level=log_level,
        timeout_worker_healthcheck=60,  # the ping waits for the interpreter: a long load is not a hung worker
        **http_options(),
    )
    return 0


def app() -> Any:
    """A worker's application, built from the parent's settings (and uvicorn's factory where it supervises)."""
    from engram.api.app import create_app
    from engram.cli.process import settle
    from engram.wiring import build

    settings = Settings(**json.loads(os.environ.get(OVERRIDES, "{}")))
    with _one_at_a_time(settings):  # the first start of a data folder makes its databases once
        engram = build(settings)
    made = create_app(engram)
    settle()
    return made


@contextmanager
def _one_at_a_time(settings: Settings) -> Iterator[None]:
    """Workers of a local data folder build their services one after another (an exclusive lock on a file of the
    folder; ~0.6 s each); elsewhere (a deployed stack, a system without `fcntl`) at once."""
    try:
        import fcntl
    except ImportError:  # not POSIX
        yield
        return
    if settings.backend != "local":
        yield
        return
    folder = Path(settings.data_dir)
    folder.mkdir(parents=True, exist_ok=True)
    with (folder / "serve.lock").open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
