"""AwoooP reaching its primary through HAProxy, set up as docs/operations.md shows
("High availability": Patroni's REST API as the health check).

Each test starts Debian's haproxy (``make haproxy``) with the documented haproxy.cfg, the
test's addresses in place of the example hosts: its one server is PostgreSQL behind a proxy
(the primary's link), and its check asks a stand-in for Patroni's REST API (``GET
/primary``), behind a proxy of its own. Cutting both links off is the primary's host cut
off: HAProxy keeps answering AwoooP's connections, so AwoooP's own ``tcp_user_timeout``
cannot fire, and what ends a statement on such a connection is ``on-marked-down
shutdown-sessions`` once the checks have failed. Without haproxy the tests skip, or fail under
``CI=true``.
"""

from __future__ import annotations

import dataclasses
import http.server
import re
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from sqlalchemy import text
from sqlalchemy.engine import make_url

from awooop import db, devstack
from awooop.engine import lease, runner
from tests.support import db as rows
from tests.support import debian_tools, processes, runs, threaded_server
from tests.support.docs import ROOT
from tests.support.netproxy import FaultProxy
from tests.support.waiting import until

# The documented haproxy.cfg: a block of the HA section's list, so indented.
_DOCUMENTED = re.compile(r"^( *)```\n\1# haproxy\.cfg\n(.*?)^\1```", re.S | re.M)


def documented_config() -> str:
    text_ = (ROOT / "docs/operations.md").read_text()
    match = _DOCUMENTED.search(text_)
    assert match is not None, "docs/operations.md shows no haproxy.cfg"
    indent = len(match.group(1))
    return "".join(line[indent:] + "\n" for line in match.group(2).splitlines())


class _PrimaryAnswers(http.server.BaseHTTPRequestHandler):
    """Patroni's ``GET /primary`` on the primary: 200."""

    def do_GET(self) -> None:  # noqa: N802 (the handler's name is http.server's)
        self.send_response(200 if self.path == "/primary" else 404)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *_: object) -> None:
        pass


@contextmanager
def _rest_api() -> Iterator[int]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _PrimaryAnswers)
    threaded_server.start(server, "patroni-rest-api")
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()


def config_for(documented: str, listen: int, postgres: int, api: int, shutdown: bool) -> str:
    """The documented haproxy.cfg with the test's addresses: its bind, and one server (the
    example's three replaced) at ``postgres`` checked on ``api``; without ``on-marked-down
    shutdown-sessions`` unless ``shutdown``."""
    lines = []
    server_written = False
    for line in documented.splitlines():
        stripped = line.strip()
        if stripped.startswith("bind "):
            line = f"    bind 127.0.0.1:{listen}"
        elif stripped.startswith("server "):
            if server_written:
                continue
            line = f"    server pg1 127.0.0.1:{postgres} maxconn 100 check port {api}"
            server_written = True
        elif stripped.startswith("default-server") and not shutdown:
            line = line.replace(" on-marked-down shutdown-sessions", "")
        lines.append(line)
    assert server_written, documented
    return "\n".join(lines) + "\n"


@dataclasses.dataclass
class HAProxy:
    url: str  # the database URL through HAProxy
    pg_link: FaultProxy  # the primary's PostgreSQL
    api_link: FaultProxy  # the primary's REST API
    log: Path

    def cut_off(self) -> None:
        """The primary's host cut off: neither link forwards."""
        self.pg_link.partition()
        self.api_link.partition()

    def heal(self) -> None:
        self.pg_link.heal()
        self.api_link.heal()

    def marked_down(self) -> bool:
        return "pg1 is DOWN" in self.log.read_text(errors="replace")


@contextmanager
def started_haproxy(database_url: str, *, shutdown_sessions: bool = True) -> Iterator[HAProxy]:
    """HAProxy as documented in front of the test's database, logging to a file."""
    executable = debian_tools.executable("haproxy")
    server = make_url(database_url)
    with (
        _rest_api() as api_port,
        FaultProxy(server.host or "127.0.0.1", server.port or 5432, name="pg") as pg_link,
        FaultProxy("127.0.0.1", api_port, name="api") as api_link,
        tempfile.TemporaryDirectory(prefix="awooop-haproxy-") as directory,
    ):
        here = Path(directory)
        listen = devstack.free_port()
        config = config_for(
            documented_config(), listen, pg_link.port, api_link.port, shutdown_sessions
        )
        (here / "haproxy.cfg").write_text(config)
        argv = [executable, "-db", "-f", str(here / "haproxy.cfg")]
        with processes.serving("haproxy", argv, listen, here) as process:
            url = server.set(host="127.0.0.1", port=listen).render_as_string(hide_password=False)
            yield HAProxy(url, pg_link, api_link, process.log_path)


_RUN = "SELECT status, worker_id, lease_epoch FROM awooop_run_state WHERE run_id = :r"
# How long the documented checks may take to mark a cut-off primary down: `fall` failed
# checks, `inter` apart, each waiting up to `timeout check` (here 3 × (1 + 2) s).
MARKED_DOWN_WITHIN_S = 15
# How long after that a session on the primary is waited for to end.
SESSION_ENDED_WITHIN_S = 3


def _claim_while_the_primary_is_cut_off(database_url, settings, engine, project, **haproxy):
    """Claim a run through HAProxy on an open pooled connection, the primary's host cut off
    just before; once HAProxy has marked the primary down, give the claim a few seconds more.
    The run's row then, what the claim returned, and whether it was still waiting then. (The
    links heal afterwards, so that a claim still waiting ends.)"""
    run_id = runs.admit(engine, project["project_id"])
    with started_haproxy(database_url, **haproxy) as haproxy_:
        through = dataclasses.replace(settings, database_url=haproxy_.url)
        pooled = db.make_engine(haproxy_.url, 1, role=db.WORKER, settings=through)
        done: list = []
        try:
            with pooled.connect() as conn:  # the pooled connection, through HAProxy, open
                conn.execute(text("SELECT 1"))
            haproxy_.cut_off()
            claim = threading.Thread(
                target=lambda: done.append(runner.execute(pooled, through, run_id))
            )
            claim.start()
            until(haproxy_.marked_down, MARKED_DOWN_WITHIN_S, "HAProxy to mark the primary down")
            claim.join(SESSION_ENDED_WITHIN_S)
            waiting = claim.is_alive()
            run_meanwhile = rows.rows(engine, _RUN, r=run_id)
            # (The proxy may deliver the claim late once healed: a claim that commits after
            # its worker gave up on it is the reaper's, once its lease expires.)
            haproxy_.heal()
            claim.join(30)
        finally:
            lease.stop_keeper()
            pooled.dispose()
    return run_meanwhile, done, waiting


def test_a_claim_through_haproxy_ends_once_the_cut_off_primary_is_marked_down(
    database_url, settings, engine, project
):
    # Given a run to claim, and a worker reaching the primary through HAProxy as documented
    # When the primary's host is cut off, and the worker claims the run on its open connection
    run_meanwhile, done, waiting = _claim_while_the_primary_is_cut_off(
        database_url, settings, engine, project
    )

    # Then HAProxy ends the session once its checks mark the primary down, and the claim says
    # the database did not answer
    assert not waiting, "the claim still waited after the primary was marked down"
    assert done == [runner.Outcome.UNREACHABLE]
    # And meanwhile the run was as it had been, for a worker that reaches the new primary
    assert run_meanwhile == [{"status": "PENDING", "worker_id": None, "lease_epoch": 0}]


def test_without_shutdown_sessions_the_claim_waits_on_the_cut_off_primary(
    database_url, settings, engine, project
):
    # The documented line's reason: the same cut, without on-marked-down shutdown-sessions
    _, done, waiting = _claim_while_the_primary_is_cut_off(
        database_url, settings, engine, project, shutdown_sessions=False
    )

    assert waiting, "the claim ended without on-marked-down shutdown-sessions"
    assert done == [runner.Outcome.COMPLETED]  # once the links healed
