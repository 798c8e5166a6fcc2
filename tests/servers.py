"""The one way the suite runs `bertkit serve`: a real process on a free loopback port that dies with the test process.

Every test that needs a server (the HTTP tests, the browser tests, the soaks in `benchmarks/`) starts it through
`Server`. The child is started with `PR_SET_PDEATHSIG` (Linux): when the process that started it ends, however it
ends (SIGTERM to pytest, SIGKILL, a crash), the kernel sends the server SIGKILL, so no server outlives the suite.
A test's server is a fork of the suite's warm parent (`warm.py`: the imports done once), which dies the same way.
"""

from __future__ import annotations

import ctypes
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import weakref
from pathlib import Path

import httpx
import warm

PR_SET_PDEATHSIG = 1
# looked up here, not in the forked child (a dlopen after fork can deadlock on a lock another thread held)
_PRCTL = ctypes.CDLL(None, use_errno=True).prctl if sys.platform.startswith("linux") else None


def free_port() -> int:
    """A loopback port that nothing listens on now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def die_with_parent() -> None:
    """In the child before exec: ask the kernel for SIGKILL when the parent ends (a no-op off Linux)."""
    if _PRCTL is not None:
        _PRCTL(PR_SET_PDEATHSIG, signal.SIGKILL)


def start_child(command: list[str], warm_start: bool = True, **popen) -> subprocess.Popen | warm.WarmProcess:
    """`subprocess.Popen` of a child that is killed when this process ends (a `bertkit` command: forked warm unless
    `warm_start=False`, see `warm`)."""
    if warm_start and warm.may_fork(command, popen):
        return warm.WarmProcess(command, **popen)
    return subprocess.Popen(command, preexec_fn=die_with_parent, **popen)  # noqa: PLW1509 (the point of it)


class Server:
    """`python -m bertkit.cli serve ...` on a free loopback port: `url`, `headers`, `post`, `metric`, `stop()`.

    `key` serves with an API key (sent by `post`); `wait=False` returns at once (`wait_ready()` later); `cold=True`
    starts a fresh interpreter, not a fork of the warm parent (the soaks: one server, measured alone). The server's
    output goes to a temporary log file (`output()`), removed with the object unless `keep_log()` is called.
    """

    def __init__(
        self,
        *args: str,
        key: str | None = None,
        timeout: float = 180,
        env: dict | None = None,
        wait: bool = True,
        cold: bool = False,
    ):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        environment = dict(os.environ, HF_HUB_OFFLINE="1", **(env or {}))
        command = [sys.executable, "-m", "bertkit.cli", "serve", "--port", str(self.port), "--threads", "2", *args]
        if key:
            environment["BERTKIT_TEST_KEY"] = key
            command += ["--api-key-env", "BERTKIT_TEST_KEY"]
        self.headers = {"Authorization": f"Bearer {key}"} if key else {}
        handle, log = tempfile.mkstemp(prefix=f"bertkit-serve-{self.port}-", suffix=".log")
        os.close(handle)
        self.log_path = Path(log)
        self._remove_log = weakref.finalize(self, self.log_path.unlink, missing_ok=True)
        with open(self.log_path, "w") as out:
            self.process = start_child(
                command, warm_start=not cold, env=environment, stdout=out, stderr=subprocess.STDOUT
            )
        if wait:
            self.wait_ready(timeout)

    def wait_ready(self, timeout: float = 180) -> None:
        """Return once `/health` answers 200; raise with the server's output if it exits or takes over `timeout` s."""
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"the server exited early:\n{self.output()[-3000:]}")
            try:
                if httpx.get(self.url + "/health", timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        self.stop()
        raise RuntimeError(f"the server did not start in {timeout:.0f} s:\n{self.output()[-3000:]}")

    def keep_log(self) -> Path:
        """Leave the log file in place after this object is gone; return its path."""
        self._remove_log.detach()
        return self.log_path

    def output(self) -> str:
        """Everything the server printed so far."""
        return self.log_path.read_text(errors="replace")

    def post(self, path: str, body, **kwargs) -> httpx.Response:
        """POST `body` (JSON-encoded unless bytes or str) with the key's header."""
        content = body if isinstance(body, (bytes, str)) else json.dumps(body)
        headers = {"Content-Type": "application/json", **self.headers, **kwargs.pop("headers", {})}
        return httpx.post(
            self.url + path, content=content, headers=headers, timeout=kwargs.pop("timeout", 60), **kwargs
        )

    def metric(self, name: str) -> float:
        """The sum of a Prometheus metric's samples."""
        text = httpx.get(self.url + "/metrics", headers=self.headers).text
        return sum(float(line.split()[-1]) for line in text.splitlines() if line.startswith((name + " ", name + "{")))

    def stop(self, timeout: float = 60) -> int:
        """SIGTERM, wait up to `timeout` s (then SIGKILL); return the exit status."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(timeout)
        finally:
            if self.process.poll() is None:
                self.process.kill()
                self.process.wait()

    def kill(self) -> None:
        """SIGKILL at once."""
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()
