"""New Python processes without paying for ``import jax`` each time: forked from a warm server.

The docs pages and the examples each run in a process of their own, as a
reader or a user runs them. A fresh interpreter spends 2 to 3 seconds of CPU
importing jax, optax and flax before the first line of the page runs; over
the suite's 40-odd such processes that is a third of the default run.

:func:`run` gives the same process, minus the import: one server process per
pytest session imports those modules (nothing else: no JAX backend, no
thread, no compilation) and forks a child for each request. The child takes
the request's environment, working directory, ``sys.argv``, ``sys.path``
(what a fresh interpreter would have for that environment), standard input
and output files, runs the script as ``__main__``, and exits as Python
would (non-daemon threads joined, ``atexit`` handlers run). JAX's state
starts empty in every child: the server never initialized a backend.

The variables read when those modules are imported or the interpreter
starts (``JAX_*``, ``XLA_*``, ``TF_*``, ``PYTHON*``) are the server's own:
a request with other values of them (8 host devices, say) goes to a server
started with those. Where a server cannot start, or a module it preloaded
started a thread (a fork would not be safe), the request runs in a real
fresh interpreter (``subprocess.run``). A test about
what a first import does (which modules it loads, what it prints) uses a real
fresh interpreter itself (``helpers.run_in_fresh_python``).
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import threading
from collections.abc import Mapping, Sequence
from typing import Any

# The modules a child finds imported: the heavy ones every page and example
# needs. Not orbax or matplotlib (tests check when those are first imported,
# and matplotlib reads MPLBACKEND when it is imported).
PRELOAD = (
    "jax",
    "jax.numpy",
    "numpy",
    "optax",
    "optax.contrib",
    "chex",
    "optax_pytree",
    "optax_pytree.optax",
)
PRELOAD_IF_INSTALLED = ("flax.nnx", "equinox")

# Environment variables read when a preloaded module is imported (or the
# interpreter starts): a request that sets them otherwise than the server runs fresh.
_FIXED_PREFIXES = ("JAX_", "XLA_", "TF_", "PYTHON")


def on_the_cpu(env: Mapping[str, str]) -> dict[str, str]:
    """``env`` for a child process of the tests: JAX on the CPU, whatever the parent runs on.

    One process at a time can hold a TPU; the test process holds it while a
    child would start, so a child that opened the chip would fail. Every
    child the suite starts runs on the CPU (on a CPU machine, as before).
    """
    return {**env, "JAX_PLATFORMS": "cpu"}


def _fixed(env: Mapping[str, str]) -> dict[str, str]:
    return {k: v for k, v in env.items() if k.startswith(_FIXED_PREFIXES) and k != "PYTHONPATH"}


# ---------------------------------------------------------------------------
# The server (its own process).


def _base_path() -> list[str]:
    """The server's ``sys.path`` less its script directory and its PYTHONPATH entries."""
    ours = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    return [p for p in sys.path[1:] if p not in ours]


def _child(request: dict[str, Any], base_path: list[str], added: dict[str, str]) -> None:
    """In the forked child: become the requested process, run it, exit. Never returns."""
    code = 1
    try:
        os.setpgid(0, 0)  # its own process group: a timeout ends its children too
        for fd, name, flags in (
            (0, "stdin", os.O_RDONLY),
            (1, "stdout", os.O_WRONLY),
            (2, "stderr", os.O_WRONLY),
        ):
            target = os.open(request[name], flags)
            os.dup2(target, fd)
            os.close(target)
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        for name, value in added.items():  # what the preloaded imports set (TF_CPP_MIN_LOG_LEVEL)
            os.environ.setdefault(name, value)
        import tempfile as _tempfile

        _tempfile.tempdir = None  # TMPDIR is read again
        argv = request["argv"]
        extra = [p for p in request["env"].get("PYTHONPATH", "").split(os.pathsep) if p]
        if argv[0] == "-c":
            import types

            sys.argv = ["-c", *argv[2:]]
            sys.path[:] = ["", *extra, *base_path]
            main = types.ModuleType("__main__")  # a fresh __main__, as pickle looks names up there
            main.__dict__["__builtins__"] = __builtins__
            sys.modules["__main__"] = main
            exec(compile(argv[1], "<string>", "exec"), main.__dict__)
        else:
            import runpy

            sys.argv = list(argv)
            sys.path[:] = [os.path.dirname(os.path.abspath(argv[0])), *extra, *base_path]
            runpy.run_path(argv[0], run_name="__main__")
        code = 0
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        if e.code is not None and not isinstance(e.code, int):
            print(e.code, file=sys.stderr)
    except BaseException:  # noqa: BLE001 - as the interpreter: any exception ends the process
        import traceback

        traceback.print_exc()
        code = 1
    try:  # as the interpreter ends: non-daemon threads, then atexit
        for thread in threading.enumerate():
            if thread is not threading.main_thread() and not thread.daemon:
                thread.join()
        atexit._run_exitfuncs()
        sys.stdout.flush()
        sys.stderr.flush()
    except BaseException:  # noqa: BLE001 - the process ends whatever happens
        code = code or 1
    os._exit(code)


def serve(read_fd: int, write_fd: int) -> None:
    """The server's loop: a JSON request a line; replies ``{"pid": ...}``, then ``{"returncode": ...}``."""
    import importlib

    before = dict(os.environ)
    for name in PRELOAD:
        importlib.import_module(name)
    for name in PRELOAD_IF_INSTALLED:
        with contextlib.suppress(ImportError):
            importlib.import_module(name)
    base_path = _base_path()
    added = {k: v for k, v in os.environ.items() if before.get(k) != v}
    requests = os.fdopen(read_fd, "r", encoding="utf-8")
    replies = os.fdopen(write_fd, "w", encoding="utf-8")

    def reply(message: dict[str, Any]) -> None:
        replies.write(json.dumps(message) + "\n")
        replies.flush()

    # Forking is safe only with one thread, and no JAX backend (its threads).
    from jax._src import xla_bridge

    ready = threading.active_count() == 1 and not getattr(xla_bridge, "_backends", {})
    reply({"ready": ready, "env": _fixed(before)})
    if not ready:
        return
    for line in requests:
        request = json.loads(line)
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            requests.close()
            replies.close()
            _child(request, base_path, added)
        reply({"pid": pid})
        _, status = os.waitpid(pid, 0)
        reply({"returncode": os.waitstatus_to_exitcode(status)})


# ---------------------------------------------------------------------------
# The client (the pytest process).


class _Server:
    def __init__(self, fixed: dict[str, str]) -> None:
        to_server_r, self._to_server = os.pipe()
        self._from_server, from_server_w = os.pipe()
        here = os.path.dirname(os.path.abspath(__file__))
        base = {k: v for k, v in os.environ.items() if k not in _fixed(os.environ)}
        env = {
            **base,
            **fixed,
            "PYTHONPATH": os.pathsep.join(filter(None, [here, os.environ.get("PYTHONPATH")])),
        }
        code = f"import warm_python; warm_python.serve({to_server_r}, {from_server_w})"
        self.process = subprocess.Popen(
            [sys.executable, "-c", code],
            pass_fds=(to_server_r, from_server_w),
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        os.close(to_server_r)
        os.close(from_server_w)
        self._buffer = b""
        hello = self._read(timeout=300)
        self.ready = bool(hello and hello["ready"])
        self.env = hello["env"] if hello else {}

    def _read(self, timeout: float | None) -> dict[str, Any] | None:
        while b"\n" not in self._buffer:
            ready, _, _ = select.select([self._from_server], [], [], timeout)
            if not ready:
                return None
            chunk = os.read(self._from_server, 65536)
            if not chunk:
                return None
            self._buffer += chunk
        line, self._buffer = self._buffer.split(b"\n", 1)
        return json.loads(line)

    def request(self, request: dict[str, Any], timeout: float) -> int:
        os.write(self._to_server, (json.dumps(request) + "\n").encode())
        started = self._read(timeout=60)
        if started is None:
            raise RuntimeError("the warm Python server did not answer")
        done = self._read(timeout=timeout)
        if done is None:  # the child ran out of time: end its process group
            with contextlib.suppress(ProcessLookupError):
                os.killpg(started["pid"], signal.SIGKILL)
            self._read(timeout=60)
            raise subprocess.TimeoutExpired(request["argv"], timeout)
        return int(done["returncode"])

    def close(self) -> None:
        with contextlib.suppress(OSError):
            os.close(self._to_server)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(timeout=10)
        if self.process.poll() is None:
            self.process.kill()


# One server per environment of the variables read at import (JAX_PLATFORMS,
# XLA_FLAGS, ...): the default one, and one with 8 host devices, say.
_servers: dict[str, _Server | None] = {}


def _get_server(fixed: dict[str, str]) -> _Server | None:
    key = json.dumps(sorted(fixed.items()))
    if key not in _servers:
        server: _Server | None = None
        if hasattr(os, "fork"):
            try:
                server = _Server(fixed)
            except OSError:
                server = None
            if server is not None and not server.ready:
                server.close()
                server = None
            if server is not None:
                atexit.register(server.close)
        _servers[key] = server
    return _servers[key]


def run(
    argv: Sequence[str],
    *,
    env: Mapping[str, str] | None = None,
    cwd: str | os.PathLike[str] | None = None,
    input: str = "",
    timeout: float = 300,
) -> subprocess.CompletedProcess[str]:
    """``subprocess.run([sys.executable, *argv], ...)`` with text output captured, from the warm server.

    ``argv`` is what follows the interpreter: ``["-c", code, ...]`` or
    ``[script, ...]``. Falls back to a real fresh interpreter where a fork
    would differ (see the module's docstring). The child runs on the CPU
    (``JAX_PLATFORMS=cpu``, :func:`on_the_cpu`): the parent may hold an
    accelerator that one process at a time can open (a TPU).
    """
    env = on_the_cpu(os.environ if env is None else env)
    cwd = os.fspath(cwd) if cwd is not None else os.getcwd()
    server = _get_server(_fixed(env))
    if server is None or _fixed(env) != server.env:
        return subprocess.run(
            [sys.executable, *argv],
            input=input,
            env=env,
            cwd=cwd,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
    with tempfile.TemporaryDirectory(prefix="warm_python_") as folder:
        paths = {name: os.path.join(folder, name) for name in ("stdin", "stdout", "stderr")}
        for path in paths.values():
            with open(path, "w", encoding="utf-8") as f:
                f.write(input if path == paths["stdin"] else "")
        returncode = server.request({"argv": list(argv), "env": env, "cwd": cwd, **paths}, timeout)
        with open(paths["stdout"], encoding="utf-8", errors="replace") as out:
            stdout = out.read()
        with open(paths["stderr"], encoding="utf-8", errors="replace") as err:
            stderr = err.read()
    return subprocess.CompletedProcess([sys.executable, *argv], returncode, stdout, stderr)
