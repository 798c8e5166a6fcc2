"""`bertkit` commands in real processes without paying the imports each time: a warm parent forks them.

A `bertkit` command spends about 4 s of a test's time importing torch and transformers before it does anything
(measured: `import transformers.models.bert.modeling_bert` takes 4.2 s on two cores). The suite starts about seventy
of them: servers, killed-and-resumed jobs, the page's command. So the first command starts one *warm parent*: a
process that has imported what the commands import and then waits. Each command after it is a fork of that parent:
a real process, with its own pid, session, standard streams, working folder, environment, signals and exit status,
that runs `python -m bertkit.cli ARGS` (or the `bertkit` script) from its first line of code. What it skips is only
the import, which `tests/test_startup.py` and the wheel test check from cold.

A command runs cold (a plain `subprocess.Popen`) when its environment differs from the suite's in a variable that
the imported libraries read when they are imported (`HF_*`, `TRANSFORMERS_*`, `PYTHON*`, ...), or when
`BERTKIT_TEST_COLD=1`. The parent dies with the process that started it (its lifeline pipe closes), and every
command it forked dies with the parent (`PR_SET_PDEATHSIG`), so nothing outlives the suite.
"""

from __future__ import annotations

import atexit
import ctypes
import io
import json
import os
import selectors
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

PR_SET_PDEATHSIG = 1
BERTKIT_SCRIPT = str(Path(sys.executable).parent / "bertkit")
# read by torch, transformers, huggingface_hub, tokenizers or bertkit when they are imported: a command whose value
# differs from the warm parent's runs cold. Left out: what libraries set on themselves while the suite runs
# (KMP_DUPLICATE_LIB_OK, KMP_INIT_AT_FORK, TORCHINDUCTOR_CACHE_DIR), which the parent's imports set alike, and
# PYTHONBREAKPOINT, which a Ray driver sets and `breakpoint()` reads when called.
IMPORT_TIME_ENV = ("HF_", "HUGGINGFACE", "TRANSFORMERS", "PYTORCH", "CUDA", "MKL_", "OMP_", "PYTHON", "LD_", "XDG_")
IMPORT_TIME_ENV += ("SAFETENSORS", "ACCELERATE", "BERTKIT_MEMORY_CACHE_MB", "BERTKIT_DISK_CACHE_MB", "HOME", "TMPDIR")
APPLIED_ENV = {"OMP_NUM_THREADS", "PYTHONBREAKPOINT"}  # applied in the fork (set_num_threads) / read when used
SUITE_ENV = dict(os.environ)  # what the warm parent imports under (conftest has set HF_HUB_OFFLINE by now)


def _prctl():
    return ctypes.CDLL(None, use_errno=True).prctl if sys.platform.startswith("linux") else None


def bertkit_args(command: list[str]) -> list[str] | None:
    """The arguments of a `bertkit` command line (`python -m bertkit.cli ...` or the script), else None."""
    command = [str(part) for part in command]
    if command[:3] == [sys.executable, "-m", "bertkit.cli"]:
        return command[3:]
    if command[:1] == [BERTKIT_SCRIPT]:
        return command[1:]
    return None


def _import_time_keys(env: dict[str, str]) -> set[str]:
    return {key for key in env if key.startswith(IMPORT_TIME_ENV) and key not in APPLIED_ENV}


def can_run_warm(command: list[str], env: dict[str, str] | None) -> bool:
    """Whether `command` may be a fork of the warm parent (see the module's docstring)."""
    if bertkit_args(command) is None or os.environ.get("BERTKIT_TEST_COLD") == "1" or _prctl() is None:
        return False
    env = dict(os.environ) if env is None else env  # a test may have changed this process's environment since
    keys = _import_time_keys(env) | _import_time_keys(SUITE_ENV)
    return all(env.get(key) == SUITE_ENV.get(key) for key in keys)


def may_fork(command: list[str], popen: dict) -> bool:
    """Whether `subprocess.Popen(command, **popen)` may be a fork of the warm parent (no stdin pipe, no preexec)."""
    return (
        can_run_warm(command, popen.get("env"))
        and popen.get("stdin") != subprocess.PIPE
        and not popen.get("preexec_fn")
    )


# ---- the test's side -------------------------------------------------------------------------------------------
class _Parent:
    """The warm parent of this process: started on first use, stopped at exit."""

    lock = threading.Lock()
    instance: _Parent | None = None

    def __init__(self) -> None:
        self.folder = tempfile.mkdtemp(prefix="bertkit-warm-")
        self.path = os.path.join(self.folder, "socket")
        lifeline_end, self.lifeline = os.pipe()  # the parent reads EOF on its end when this process ends
        self.process = subprocess.Popen(
            [sys.executable, __file__, self.path, str(lifeline_end)],
            pass_fds=[lifeline_end],
            env=SUITE_ENV,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            start_new_session=True,
        )
        os.close(lifeline_end)
        deadline = time.monotonic() + 120
        while not os.path.exists(self.path):
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("the warm parent of the suite's bertkit commands did not start")
            time.sleep(0.02)
        atexit.register(self.stop)

    @classmethod
    def get(cls) -> _Parent:
        with cls.lock:
            if cls.instance is None or cls.instance.process.poll() is not None:
                cls.instance = cls()
            return cls.instance

    def stop(self) -> None:
        os.close(self.lifeline)
        self.process.wait(30)
        shutil.rmtree(self.folder, ignore_errors=True)


def _fd(stream, default: int, opened: list[int], ours: list[int]) -> int:
    if stream is None:
        return default
    if stream == subprocess.DEVNULL:
        fd = os.open(os.devnull, os.O_RDWR)
        opened.append(fd)
        return fd
    if stream == subprocess.PIPE:
        read, write = os.pipe()
        ours.append(read)
        opened.append(write)
        return write
    return stream if isinstance(stream, int) else stream.fileno()


class WarmProcess:
    """A forked `bertkit` command, used as a `subprocess.Popen` is: `pid`, `stdout`/`stderr` (for PIPE), `poll`,
    `wait`, `communicate`, `send_signal`, `terminate`, `kill`, `returncode`."""

    def __init__(self, command, *, cwd=None, env=None, stdin=None, stdout=None, stderr=None, text=False,
                 start_new_session=False, **ignored) -> None:  # fmt: skip
        self.args, self.returncode = command, None
        opened: list[int] = []
        pipes: list[int] = []
        fds = [_fd(stdin, 0, opened, []), _fd(stdout, 1, opened, pipes)]
        self.stdout = self._reader(pipes.pop(), text) if stdout == subprocess.PIPE else None
        fds.append(fds[1] if stderr == subprocess.STDOUT else _fd(stderr, 2, opened, pipes))
        self.stderr = self._reader(pipes.pop(), text) if stderr == subprocess.PIPE else None
        self.stdin = None
        request = {
            "args": bertkit_args(command),
            "script": bertkit_args(command) is not None and str(command[0]) == BERTKIT_SCRIPT,
            "cwd": os.path.abspath(cwd or os.getcwd()),
            "env": dict(os.environ if env is None else env),
            "session": bool(start_new_session),
        }
        payload = json.dumps(request).encode()
        self._socket = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._socket.connect(_Parent.get().path)
        socket.send_fds(self._socket, [struct.pack("!I", len(payload)) + payload], fds)
        for fd in opened:
            os.close(fd)
        self._buffer = b""
        line = self._line(None)
        if not line or not line.startswith(b"pid "):
            raise RuntimeError(f"the warm parent could not start {command}")
        self.pid = int(line.split()[1])

    @staticmethod
    def _reader(fd: int, text: bool = False):
        stream = os.fdopen(fd, "rb")
        return io.TextIOWrapper(stream) if text else stream

    def _line(self, timeout: float | None) -> bytes | None:
        """The parent's next line; b"" when it has gone; raise `TimeoutError` after `timeout` s (0: do not wait)."""
        while b"\n" not in self._buffer:
            self._socket.settimeout(timeout)
            try:
                chunk = self._socket.recv(256)
            except BlockingIOError:
                raise TimeoutError from None
            finally:
                self._socket.settimeout(None)
            if not chunk:
                return b""
            self._buffer += chunk
        line, self._buffer = self._buffer.split(b"\n", 1)
        return line

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None:
            try:
                line = self._line(timeout)
            except TimeoutError:
                raise subprocess.TimeoutExpired(self.args, timeout) from None
            self.returncode = int(line.split()[1]) if line else -signal.SIGKILL  # no line: the parent died
        return self.returncode

    def poll(self) -> int | None:
        try:
            return self.wait(0)
        except subprocess.TimeoutExpired:
            return None

    def communicate(self, input=None, timeout: float | None = None):
        deadline = None if timeout is None else time.monotonic() + timeout
        found: dict[str, object] = {}
        readers = [
            threading.Thread(target=lambda name=name, s=s: found.__setitem__(name, s.read()), daemon=True)
            for name, s in (("out", self.stdout), ("err", self.stderr))
            if s is not None
        ]
        for reader in readers:
            reader.start()
        for reader in readers:
            reader.join(None if deadline is None else max(0.0, deadline - time.monotonic()))
            if reader.is_alive():
                raise subprocess.TimeoutExpired(self.args, timeout)
        self.wait(None if deadline is None else max(0.0, deadline - time.monotonic()))
        return found.get("out"), found.get("err")

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:
            try:  # the parent reaps at once: an exit it has not told us of yet leaves no pid to signal
                os.kill(self.pid, sig)
            except ProcessLookupError:
                pass

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def __del__(self) -> None:
        if getattr(self, "_socket", None) is not None:
            self._socket.close()


def popen(command: list, **popen) -> subprocess.Popen | WarmProcess:
    """`subprocess.Popen(command, **popen)`, as a fork of the warm parent where `can_run_warm` says it may be."""
    if may_fork(command, popen):
        return WarmProcess(command, **popen)
    return subprocess.Popen(command, **popen)


def run(command: list, *, capture_output=False, check=False, timeout=None, input=None, **popen):
    """`subprocess.run`, forked from the warm parent where it may be (no `input`)."""
    if input is not None or not may_fork(command, popen):
        return subprocess.run(command, capture_output=capture_output, check=check, timeout=timeout, input=input,
                              **popen)  # fmt: skip
    if capture_output:
        popen["stdout"] = popen["stderr"] = subprocess.PIPE
    process = WarmProcess(command, **popen)
    try:
        out, err = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
        raise
    if check and process.returncode:
        raise subprocess.CalledProcessError(process.returncode, command, out, err)
    return subprocess.CompletedProcess(command, process.returncode, out, err)


# ---- the warm parent's side --------------------------------------------------------------------------------------
def _child(request: dict, fds: list[int], prctl, parent: int) -> int:
    """In the fork: become the command and run it; return its exit status."""
    if request["session"]:
        os.setsid()
    prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent:  # the parent ended before the death signal was asked for
        os._exit(1)
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
    for fd in set(fds):
        if fd > 2:
            os.close(fd)
    os.chdir(request["cwd"])
    sys.path[0] = os.path.dirname(BERTKIT_SCRIPT) if request["script"] else request["cwd"]  # as a cold start has it
    os.environ.clear()
    os.environ.update(request["env"])
    if "OMP_NUM_THREADS" in os.environ:
        import torch

        torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))
    try:
        if request["script"]:
            sys.argv = [BERTKIT_SCRIPT, *request["args"]]
            from bertkit.cli import main

            main()
        else:
            import runpy

            sys.argv = ["bertkit", *request["args"]]
            runpy.run_module("bertkit.cli", run_name="__main__", alter_sys=True)
        return 0
    except SystemExit as done:
        if done.code is None or isinstance(done.code, int):
            return done.code or 0
        print(done.code, file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        sys.stdout.flush()
        os.kill(os.getpid(), signal.SIGINT)
        return 130
    except BaseException:
        import traceback

        traceback.print_exc()
        return 1


def _reap(children: dict[int, socket.socket]) -> None:
    """Tell each ended command's caller its exit status (as `subprocess` gives it: -N for signal N)."""
    while children:
        pid, status = os.waitpid(-1, os.WNOHANG)
        if pid == 0:
            return
        connection = children.pop(pid, None)
        if connection is not None:
            try:
                connection.sendall(f"exit {os.waitstatus_to_exitcode(status)}\n".encode())
            except OSError:  # the caller stopped listening
                pass
            connection.close()


def _fork(connection: socket.socket, keep_closed: list, prctl) -> int:
    """Read one request from `connection` and fork its command; return the command's pid."""
    head, fds, _, _ = socket.recv_fds(connection, 4, 3)
    size = struct.unpack("!I", head)[0]
    body = b""
    while len(body) < size:
        chunk = connection.recv(size - len(body))
        if not chunk:
            raise ConnectionError("the request was cut short")
        body += chunk
    request = json.loads(body)
    sys.stdout.flush()
    sys.stderr.flush()
    parent = os.getpid()
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            signal.set_wakeup_fd(-1)
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
            # as a shell starts a command, whatever the process that started the parent ignored at that moment
            signal.signal(signal.SIGINT, signal.default_int_handler)
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            for other in keep_closed:
                other.close() if isinstance(other, socket.socket) else os.close(other)
            connection.close()
            code = _child(request, fds, prctl, parent)
            threading._shutdown()  # as an interpreter ends: its threads, then its exit functions
            atexit._run_exitfuncs()
        finally:
            try:
                sys.stdout.flush()
                sys.stderr.flush()
            finally:
                os._exit(code)
    for fd in fds:
        os.close(fd)
    return pid


def _serve(path: str, lifeline: int) -> None:
    """The warm parent: import, then fork a command for each connection until `lifeline` closes."""
    prctl = _prctl()
    import torch  # noqa: F401  (what every command imports; nothing here runs a thread or an operation)
    import transformers.models.bert.modeling_bert  # noqa: F401

    import bertkit.cli.main  # noqa: F401
    import bertkit.encoder.encode  # noqa: F401
    import bertkit.serve.app  # noqa: F401
    import bertkit.tasks.classify  # noqa: F401
    import bertkit.tasks.finetune.run  # noqa: F401

    if threading.active_count() != 1:  # a fork copies only the thread that forks
        raise RuntimeError(f"importing started threads: {threading.enumerate()}")
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path + ".new")
    listener.listen(64)
    os.rename(path + ".new", path)  # the test side waits for this name
    wake_read, wake_write = os.pipe()
    os.set_blocking(wake_write, False)
    signal.set_wakeup_fd(wake_write)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    children: dict[int, socket.socket] = {}
    events = selectors.DefaultSelector()
    for source in (listener, wake_read, lifeline):
        events.register(source, selectors.EVENT_READ)
    while True:
        for key, _ in events.select():
            if key.fileobj == lifeline:  # the process that started the parent ended
                for pid in children:
                    os.kill(pid, signal.SIGKILL)
                shutil.rmtree(os.path.dirname(path), ignore_errors=True)  # that process may have had no time to
                return
            if key.fileobj == wake_read:
                os.read(wake_read, 4096)
                _reap(children)
                continue
            connection, _ = listener.accept()
            try:
                pid = _fork(connection, [wake_read, wake_write, lifeline, listener, *children.values()], prctl)
            except (OSError, ValueError, struct.error):  # a bad or abandoned request ends its connection only
                connection.close()
                continue
            children[pid] = connection  # reaped, and its status sent, once it ends
            try:
                connection.sendall(f"pid {pid}\n".encode())
            except OSError:  # the caller is gone: so is its command
                os.kill(pid, signal.SIGKILL)


if __name__ == "__main__":
    _serve(sys.argv[1], int(sys.argv[2]))
