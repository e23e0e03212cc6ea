"""Starting the real web server, Celery workers and beat as child processes.

Each process gets its own process group, so a test can SIGKILL a whole worker (parent and
prefork children) the way a crashed pod dies.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from tests.support import waiting

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


_handed_out: set[int] = set()


def free_port() -> int:
    """A loopback TCP port nothing is bound to now, and one no earlier call in this process
    returned: the kernel hands a just-closed port out again, so two servers given ports one
    after the other would otherwise often get the same one."""
    while True:
        with socket.socket() as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind(("127.0.0.1", 0))
            port = int(s.getsockname()[1])
        if port not in _handed_out:
            _handed_out.add(port)
            return port


def listening(port: int, host: str = "127.0.0.1") -> bool:
    """Whether something accepts TCP connections at ``host:port``."""
    try:
        with socket.create_connection((host, port), timeout=0.2):
            return True
    except OSError:
        return False


def wait_until(
    condition: Callable[[], object], timeout: float, what: str, interval: float = 0.1
) -> object:
    return waiting.until(condition, timeout, what, interval)


def awooop_command(
    base: str, api_token: str, *argv: str, stdin: str | None = None
) -> subprocess.CompletedProcess[str]:
    """`awooop ARGV` as a user runs it against the web at ``base``, with ``api_token`` in
    AWOOOP_API_TOKEN."""
    env = {**os.environ, "AWOOOP_API_URL": base, "AWOOOP_API_TOKEN": api_token}
    return subprocess.run(
        [str(BIN / "awooop"), *argv],
        input=stdin,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


class Process:
    def __init__(
        self, name: str, argv: list[str], env: dict[str, str], log_dir: Path, cwd: Path = ROOT
    ):
        self.name = name
        self.log_path = log_dir / f"{name}.log"
        self._log = open(self.log_path, "wb")  # noqa: SIM115 - closed in stop()
        self.popen = subprocess.Popen(
            argv,
            cwd=cwd,
            env=env,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        self._terminated = False

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def wait_for_log(self, needle: str, timeout: float = 30) -> None:
        def found() -> bool:
            if self.popen.poll() is not None:
                raise AssertionError(f"{self.name} exited early:\n{self.log()[-3000:]}")
            return needle in self.log()

        wait_until(found, timeout, f"{needle!r} in {self.name}'s log")

    def kill(self) -> None:
        """SIGKILL the whole process group: no warm shutdown, no acks, like a crash."""
        if self.popen.poll() is None:
            os.killpg(self.popen.pid, signal.SIGKILL)
            self.popen.wait(timeout=10)

    def terminate(self) -> None:
        """SIGTERM the whole process group, once, without waiting: a warm shutdown begins."""
        if self.popen.poll() is None and not self._terminated:
            os.killpg(self.popen.pid, signal.SIGTERM)
            self._terminated = True

    def stop(self) -> None:
        """Terminate, and wait up to 10 s for the process to end before killing it."""
        self.terminate()
        try:
            self.popen.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.kill()
        self._log.close()


@contextmanager
def serving(name: str, argv: list[str], port: int, log_dir: Path) -> Iterator[Process]:
    """A server process started from ``argv``, once it accepts connections on ``port``
    (within 10 s, or the test fails with its log); stopped afterwards."""
    process = Process(name, argv, dict(os.environ), log_dir)
    try:

        def up() -> bool:
            if process.popen.poll() is not None:
                raise AssertionError(f"{name} did not start:\n{process.log()[-2000:]}")
            return listening(port)

        wait_until(up, 10, f"{name} to listen on {port}", interval=0.05)
        yield process
    finally:
        process.stop()


class Stack:
    """The processes of one test, all with the same AWOOOP_* environment."""

    def __init__(self, env: dict[str, str], log_dir: Path):
        self.env = env
        self.log_dir = log_dir
        self.processes: list[Process] = []

    def _start(self, name: str, argv: list[str], env: dict[str, str] | None = None) -> Process:
        process = Process(name, argv, {**self.env, **(env or {})}, self.log_dir)
        self.processes.append(process)
        return process

    def worker(
        self,
        name: str = "worker",
        queues: str = "runs",
        env: dict[str, str] | None = None,
        ready: bool = True,
        loglevel: str = "INFO",
    ) -> Process:
        """A Celery worker (``env`` added to the stack's environment); waits until it is
        ready unless ``ready`` is False."""
        process = self._start(
            name,
            [
                str(BIN / "celery"),
                "-A",
                "awooop.tasks.app",
                "--quiet",
                "worker",
                "-Q",
                queues,
                "-n",
                f"{name}-{os.getpid()}@%h",
                "--concurrency",
                "1",
                "--loglevel",
                loglevel,
                "--without-mingle",
                "--without-gossip",
            ],
            env,
        )
        if ready:
            process.wait_for_log("ready.")
        return process

    def beat(self, env: dict[str, str] | None = None) -> Process:
        process = self._start(
            "beat",
            [
                str(BIN / "celery"),
                "-A",
                "awooop.tasks.app",
                "--quiet",
                "beat",
                "--loglevel",
                "INFO",
                "-s",
                str(self.log_dir / "celerybeat-schedule"),
            ],
            env,
        )
        process.wait_for_log("beat: Starting")
        if "AWOOOP_METRICS_PORT" in {**self.env, **(env or {})}:
            # Beat opens its metrics endpoint just after it says it is starting: a scrape in
            # between is refused (seen in CI under load).
            process.wait_for_log('"action": "metrics_endpoint_started"')
        return process

    def web(self) -> tuple[Process, str]:
        port = free_port()
        self.env["AWOOOP_PORT"] = str(port)
        process = self._start(
            "web",
            [
                str(BIN / "gunicorn"),
                "-c",
                "gunicorn.conf.py",
                "awooop.web.app:create_app()",
            ],
        )
        process.wait_for_log("Booting worker")
        base = f"http://127.0.0.1:{port}"
        wait_until(lambda: listening(port), 20, "the web server to listen")
        return process, base

    def flower(self, basic_auth: str | None) -> tuple[Process, str]:
        """Flower, started with the Procfile's own command line on a free port.

        ``basic_auth`` is FLOWER_BASIC_AUTH ("user:password"); None leaves it unset.
        """
        procfile = (ROOT / "Procfile").read_text().splitlines()
        line = next(entry for entry in procfile if entry.startswith("flower:"))
        port = free_port()
        command = line.partition(":")[2].strip().replace("--port=5555", f"--port={port}")
        env = {**self.env, "PATH": f"{BIN}{os.pathsep}{self.env.get('PATH', '')}"}
        env.pop("FLOWER_BASIC_AUTH", None)
        if basic_auth is not None:
            env["FLOWER_BASIC_AUTH"] = basic_auth
        process = Process("flower", ["sh", "-c", command], env, self.log_dir)
        self.processes.append(process)
        return process, f"http://127.0.0.1:{port}"

    def stop(self) -> None:
        """Stop every process, side by side: a Celery worker's warm shutdown takes about two
        seconds (its pool's), so one after another a stack took most of a test's teardown."""
        for process in reversed(self.processes):
            process.terminate()
        for process in reversed(self.processes):
            process.stop()

    def logs(self) -> str:
        return "\n".join(f"--- {p.name} ---\n{p.log()[-4000:]}" for p in self.processes)
