"""
Fixtures shared by every suite, the interop suite included: so this module
imports nothing from quicx.  It starts real C{twistd -n quicx} processes on
loopback ports (with L{tools.launcher}) and stops each one it started.
"""

from __future__ import annotations

import atexit
import os
import shutil
import signal
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tools.etcd import ETCD, Etcd, start_etcd_on_free_ports
from tools.launcher import TWISTD, DaemonProcess

# A suite started in the background (`make test &`, nohup, a CI runner's
# non-interactive shell) inherits SIGINT ignored, and would hand that on to
# every command it starts: the tests that stop one with Ctrl-C need it back.
# A handler (not SIG_IGN) is reset to the default in each child.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


# No test may fail because the machine is slow: Hypothesis's deadline (200 ms an
# example) failed a property test on a busy 2-core box (make test beside make run).
# (The interop suite's environment has no Hypothesis.)
try:
    from hypothesis import settings
except ImportError:
    pass
else:
    settings.register_profile("quicx", deadline=None)
    settings.load_profile("quicx")


# No test may take a default path: the control socket and pid file a daemon
# or command started without naming them uses are $XDG_RUNTIME_DIR/quicx-PORT.*
# (or under /tmp), held by a daemon a developer runs beside the suite (`make
# run`).  Here they are this process's own, inherited by what it starts.
_RUNTIME_DIRECTORY = tempfile.mkdtemp(prefix="quicx-tests-")
os.environ["XDG_RUNTIME_DIR"] = _RUNTIME_DIRECTORY
atexit.register(shutil.rmtree, _RUNTIME_DIRECTORY, ignore_errors=True)


def config_option(tmp_path: Path, text: str = "") -> str:
    """
    C{--config=...} for a quicx.conf in C{tmp_path} that listens on an
    ephemeral loopback port, followed by C{text} (which may go on with
    C{[server]} keys).
    """
    path = tmp_path / "quicx.conf"
    path.write_text("[server]\nlisten = tcp:0:interface=127.0.0.1\n" + text)
    return f"--config={path}"


@pytest.fixture
def start_daemon(tmp_path: Path) -> Iterator:
    """Start daemons with given twistd-quicx arguments; stop them all after."""
    started: list[DaemonProcess] = []

    def start(*args: str) -> DaemonProcess:
        directory = tmp_path / f"daemon{len(started)}"
        directory.mkdir()
        daemon = DaemonProcess(directory, args)
        started.append(daemon)
        return daemon.start()

    yield start
    for daemon in started:
        daemon.kill()


@pytest.fixture
def daemon(start_daemon) -> DaemonProcess:
    """A daemon on the built-in default configuration."""
    return start_daemon()


@pytest.fixture(scope="module")
def module_daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DaemonProcess]:
    """
    A daemon on the built-in defaults, shared by its module's tests: for tests
    that each open their own connections and leave nothing the next one sees.
    """
    daemon = DaemonProcess(tmp_path_factory.mktemp("daemon"), ()).start()
    yield daemon
    daemon.kill()


@pytest.fixture(scope="session")
def spark() -> Iterator:
    """A local Spark session (needs quicx[spark] and Java), shared by the suite."""
    pytest.importorskip("pyspark", reason="pip install 'quicx[spark]'")
    from pyspark.sql import SparkSession

    # No PYSPARK_PYTHON: quicx.clients.spark has local executors run this interpreter.
    # A failed task is tried up to 4 times, as on a cluster (local[2] tries once).
    session = (
        SparkSession.builder.master("local[2,4]")
        .appName("quicx-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "4")
        # The JIT's first tier only, and one garbage-collector thread: the suite's
        # Spark jobs are small, and C2 compiling their code cost more CPU than it saved.
        .config("spark.driver.extraJavaOptions", "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


def pytest_report_header() -> str:
    return f"quicx daemon: {TWISTD} -n quicx (pid {os.getpid()} starts and stops each one)"


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--cluster",
        action="store_true",
        help="run the tests marked cluster (a real Spark standalone cluster) and slow too",
    )
    parser.addoption(
        "--failover",
        action="store_true",
        help="run the failover matrix's rows, marked failover (make test-failover)",
    )


# The files whose tests take the session's Spark (the spark fixture): under -n 2 they
# run on one process (see pytest_xdist_make_scheduler), whose session is a JVM of its
# own (15-20 s to start, and as long again to compile the report's queries): a second
# process's was all waste.  Collection refuses a test elsewhere that takes it.
SPARK_FILES = frozenset(
    {
        "tests/clients/test_spark.py",
        "tests/daemon/observe/test_events.py",
        "tests/report/test_cluster.py",
        "tests/report/test_report.py",
        "tests/report/test_report_page.py",
        "tests/report/test_report_schema.py",
        "tests/report/test_whatif.py",
    }
)


def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """
    Under C{-n N} (xdist's C{load}), the tests of L{SPARK_FILES} go to one
    process together, and the others a module (or class) at a time, in its
    order, as C{--dist loadscope} hands them out: a module's fixtures (a
    daemon, a browser) start once.  Other C{--dist} modes are xdist's own.
    """
    if config.getoption("dist") != "load":
        return None
    from xdist.scheduler import LoadScopeScheduling  # type: ignore[import-untyped]

    class SparkTogether(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            if nodeid.split("::", 1)[0] in SPARK_FILES:
                return "spark"
            return str(super()._split_scope(nodeid))

    return SparkTogether(config, log)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    strays = [
        item.nodeid
        for item in items
        if "spark" in getattr(item, "fixturenames", ())
        and item.nodeid.split("::", 1)[0] not in SPARK_FILES
    ]
    if strays:
        raise pytest.UsageError(f"tests/conftest.py: add their files to SPARK_FILES: {strays}")
    reasons = {}
    if not config.getoption("--cluster"):
        reasons = {
            "cluster": "a real Spark standalone cluster: run with --cluster (make test-cluster)",
            "slow": "long or load-sensitive: run with --cluster (make test-cluster)",
        }
    if not config.getoption("--failover"):
        reasons["failover"] = "the failover matrix: run with --failover (make test-failover)"
    for item in items:
        for marker, reason in reasons.items():
            if item.get_closest_marker(marker):
                item.add_marker(pytest.mark.skip(reason=reason))


@pytest.fixture(autouse=True)
def _checked_task_states(request: pytest.FixtureRequest) -> Iterator[None]:
    """In the queue core's tests, every move of every task is checked against the state table."""
    if not request.module.__name__.split(".")[-1].startswith("test_core"):
        yield
        return
    from tests.fakes import checked_states

    with checked_states():
        yield


@pytest.fixture
def etcd(tmp_path: Path) -> Iterator[Etcd]:
    """A fresh one-member etcd on free loopback ports (Debian's C{etcd-server}), killed after."""
    if not Path(ETCD).exists():
        pytest.skip(f"no {ETCD}: apt-get install etcd-server (or make etcd)")
    member = start_etcd_on_free_ports(tmp_path / "etcd")
    yield member
    member.kill()
