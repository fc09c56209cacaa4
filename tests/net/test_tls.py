"""
TLS and mutual TLS against a real daemon, with certificates made at test
time: hostname verification in both clients, client certificates from the
right CA only, and roles authorized by certificate identity.
"""

from __future__ import annotations

import http.client
import json
import re
import socket
import ssl
from pathlib import Path
from typing import Any

import pytest
import pytest_twisted
from twisted.internet import defer

from quicx.clients.blocking import QuicxClient
from quicx.clients.twisted_client import connect
from quicx.protocol import wire
from quicx.protocol.errors import ConnectionLost, Forbidden, InvalidMessage
from quicx.protocol.wire import ErrorCode
from tests.certs import Authority
from tests.conftest import DaemonProcess
from tests.peer import Peer


@pytest.fixture
def pki(tmp_path: Path) -> dict[str, object]:
    directory = tmp_path / "pki"
    directory.mkdir()
    trusted = Authority(directory, "quicx-ca")
    stranger = Authority(directory, "other-ca")
    roots = directory / "roots"
    roots.mkdir()
    (roots / "quicx-ca.pem").write_bytes(trusted.path.read_bytes())
    return {
        "ca": trusted,
        "other": stranger,
        "roots": roots,
        "server": trusted.issue("quicx-daemon", ("localhost", "127.0.0.1")),
        "wrong_host": trusted.issue("elsewhere", ("elsewhere.example",)),
        "alice": trusted.issue("alice"),
        "bob": trusted.issue("bob"),
        "carol": trusted.issue("carol"),
        "mallory": stranger.issue("alice"),  # right name, wrong CA
    }


def tls_daemon(tmp_path: Path, start_daemon, server: tuple[Path, Path], extra: str = "") -> int:
    conf = tmp_path / "tls.conf"
    conf.write_text(
        "[server]\nlisten = tcp:0:interface=127.0.0.1\nlisten = tls:0:interface=127.0.0.1\n"
        f"[tls]\ncertificate = {server[0]}\nprivate_key = {server[1]}\n{extra}"
    )
    daemon: DaemonProcess = start_daemon(f"--config={conf}")
    # start() returns at the first listener's line; the other one's may come later.
    daemon.wait_for_log("(tcp:", timeout=30)
    return listening_port(daemon.wait_for_log("(tls:", timeout=30), "tls:")


def listening_port(log: str, kind: str) -> int:
    """The port of the listener whose endpoint string starts with C{kind}."""
    for line in log.splitlines():
        if "listening on 127.0.0.1:" in line and f"({kind}" in line:
            return int(line.split("listening on 127.0.0.1:")[1].split()[0])
    raise AssertionError(f"no {kind} listener in:\n{log}")


def address(port: int, pki: dict, host: str = "localhost", who: str = "") -> str:
    text = f"tls:{host}:{port}:trustRoots={pki['roots']}"
    if who:
        cert, key = pki[who]
        text += f":certificate={cert}:privateKey={key}"
    return text


def test_blocking_client_over_tls(tmp_path: Path, start_daemon, pki) -> None:
    port = tls_daemon(tmp_path, start_daemon, pki["server"])
    with QuicxClient(address(port, pki)) as client:
        task_id = client.submit("t", b"over tls")
        assert client.stats().queue_depth >= 1
        assert task_id > 0
    # An IP address is checked against the certificate's IP names.
    with QuicxClient(address(port, pki, host="127.0.0.1")) as client:
        assert client.stats().queue_depth >= 1


def test_wrong_hostname_is_refused_by_the_blocking_client(
    tmp_path: Path, start_daemon, pki
) -> None:
    port = tls_daemon(tmp_path, start_daemon, pki["wrong_host"])
    with (
        QuicxClient(address(port, pki)) as client,
        pytest.raises(ConnectionLost, match="its certificate is not for localhost"),
    ):
        client.stats()


def test_untrusted_daemon_is_refused(tmp_path: Path, start_daemon, pki) -> None:
    port = tls_daemon(tmp_path, start_daemon, pki["other"].issue("x", ("localhost",)))
    with (
        QuicxClient(address(port, pki)) as client,
        pytest.raises(ConnectionLost, match="CERTIFICATE_VERIFY_FAILED"),
    ):
        client.stats()


@pytest_twisted.ensureDeferred
async def test_twisted_client_over_tls_verifies_the_hostname(
    tmp_path: Path, start_daemon, pki
) -> None:
    from twisted.internet import reactor

    good = tls_daemon(tmp_path, start_daemon, pki["server"])
    client = await connect(reactor, address(good, pki))
    task_id = await client.submit("t", b"twisted over tls")
    assert task_id > 0
    client.close()

    (tmp_path / "bad").mkdir()
    bad = tls_daemon(tmp_path / "bad", start_daemon, pki["wrong_host"])
    client = await connect(reactor, address(bad, pki))
    with pytest.raises(ConnectionLost):
        await defer.ensureDeferred(_submit(client))


async def _submit(client) -> int:
    return await client.submit("t", b"never")


MTLS = "client_ca = {ca}\nproducers = alice\nworkers = bob\nmonitors = carol\n"


def test_mtls_refuses_clients_without_a_certificate_or_from_another_ca(
    tmp_path: Path, start_daemon, pki
) -> None:
    port = tls_daemon(tmp_path, start_daemon, pki["server"], MTLS.format(ca=pki["ca"].path))
    with QuicxClient(address(port, pki)) as anonymous, pytest.raises(ConnectionLost):
        anonymous.submit("t", b"x")
    with (
        QuicxClient(address(port, pki, who="mallory")) as impostor,
        pytest.raises(ConnectionLost),
    ):
        impostor.submit("t", b"x")
    with QuicxClient(address(port, pki, who="alice")) as alice:
        assert alice.submit("t", b"x") > 0


def test_mtls_roles_follow_certificate_identity(tmp_path: Path, start_daemon, pki) -> None:
    port = tls_daemon(tmp_path, start_daemon, pki["server"], MTLS.format(ca=pki["ca"].path))

    def peer(who: str) -> Peer:
        cert, key = pki[who]
        context = ssl.create_default_context(cafile=str(pki["ca"].path))
        context.load_cert_chain(cert, key)
        raw = socket.create_connection(("127.0.0.1", port), timeout=10)
        return Peer(context.wrap_socket(raw, server_hostname="localhost"))

    with peer("alice") as alice, peer("bob") as bob, peer("carol") as carol:
        ok = alice.submit(b"t", b"for bob")
        assert isinstance(ok, wire.Ok)
        assert bob.request(wire.encode_ready()).task_id == ok.task_id
        assert isinstance(carol.request(wire.encode_stats()), wire.StatsResponse)
    # Each outside its role: a clear ERROR, then the connection is closed.
    for who, frame, role in (
        ("alice", wire.encode_ready(), "worker"),
        ("alice", wire.encode_stats(), "monitor"),
        ("bob", wire.encode_submit(b"t", b"x"), "producer"),
        ("carol", wire.encode_submit(b"t", b"x"), "producer"),
    ):
        with peer(who) as intruder:
            reply = intruder.request(frame)
            assert isinstance(reply, wire.Error) and reply.code == ErrorCode.INVALID_MESSAGE
            assert reply.message == f"identity {who!r} may not act as a {role}"
            intruder.wait_closed()
    # Plain TCP has no identity: with role lists, it may take no role.
    plain_port = listening_port((tmp_path / "daemon0" / "quicx.log").read_text(), "tcp:")
    with Peer(("127.0.0.1", plain_port)) as plain:
        reply = plain.request(wire.encode_submit(b"t", b"x"))
        assert isinstance(reply, wire.Error)
        assert reply.message == "a peer without a certificate may not act as a producer"


def test_role_lists_need_client_ca(tmp_path: Path, pki) -> None:
    conf = tmp_path / "bad.conf"
    conf.write_text("[tls]\ncertificate = x.pem\nworkers = bob\n")
    daemon = DaemonProcess(tmp_path, [f"--config={conf}"])
    with pytest.raises(RuntimeError, match=r"bad.conf:3: workers needs client_ca"):
        daemon.start()


def test_a_tls_listener_without_a_certificate_is_one_clear_line(tmp_path: Path) -> None:
    daemon = DaemonProcess(tmp_path, ["--listen=tls:0:interface=127.0.0.1"])
    with pytest.raises(RuntimeError, match="a tls: listener needs \\[tls\\] certificate"):
        daemon.start()


@pytest.fixture
def bundle(pki) -> Path:
    """A PEM bundle with the daemon's CA second: a reader of one certificate misses it."""
    path = pki["roots"].parent / "bundle.pem"
    path.write_bytes(b"# CAs\n" + pki["other"].path.read_bytes() + pki["ca"].path.read_bytes())
    return path


@pytest_twisted.ensureDeferred
async def test_trust_roots_may_be_a_bundle_file_in_both_clients(
    tmp_path: Path, start_daemon, pki, bundle: Path
) -> None:
    from twisted.internet import reactor

    port = tls_daemon(tmp_path, start_daemon, pki["server"])
    # A directory holding the bundle, and the bundle itself.
    bundled = tmp_path / "bundled"
    bundled.mkdir()
    (bundled / "cas.crt").write_bytes(bundle.read_bytes())
    (bundled / "notes.pem").write_text("no certificate here\n")
    for roots in (bundle, bundled):
        with QuicxClient(f"tls:localhost:{port}:trustRoots={roots}") as client:
            assert client.submit("t", b"blocking") > 0
        twisted_client = await connect(reactor, f"tls:localhost:{port}:trustRoots={roots}")
        assert await twisted_client.submit("t", b"twisted") > 0
        twisted_client.close()
    # The other CA alone does not vouch for the daemon, in either client.
    alone = f"tls:localhost:{port}:trustRoots={pki['other'].path}"
    with QuicxClient(alone) as client, pytest.raises(ConnectionLost, match="VERIFY_FAILED"):
        client.submit("t", b"x")
    twisted_client = await connect(reactor, alone)
    with pytest.raises(ConnectionLost):
        await defer.ensureDeferred(_submit(twisted_client))


@pytest.mark.parametrize(
    ("option", "message"),
    [
        ("trustRoots={missing}", "{missing}: No such file or directory"),
        ("trustRoots={empty}", "{empty}: no PEM certificate in it"),
        ("trustRoots={directory}", "{directory}: no .pem or .crt file in it holds a certificate"),
        ("trustRoots={ca}:certificate={missing}", "{missing}: cannot load the certificate"),
    ],
)
def test_unusable_tls_files_are_named_by_both_clients(
    tmp_path: Path, pki, option: str, message: str
) -> None:
    from twisted.internet import reactor

    from quicx.clients.twisted_client import endpoint_for
    from quicx.net.certificates import TlsConfigError

    (tmp_path / "empty.pem").write_text("")
    (tmp_path / "directory").mkdir()
    paths = {
        "missing": tmp_path / "missing.pem",
        "empty": tmp_path / "empty.pem",
        "directory": tmp_path / "directory",
        "ca": pki["ca"].path,
    }
    address = "tls:localhost:1:" + option.format(**paths)
    with pytest.raises(TlsConfigError, match=re.escape(message.format(**paths))):
        QuicxClient(address)
    with pytest.raises(TlsConfigError, match=re.escape(str(message.format(**paths)).split(":")[0])):
        endpoint_for(reactor, address)


def test_a_refusal_names_why_a_certificate_gives_no_identity(pki) -> None:
    from OpenSSL import crypto

    from quicx.net.certificates import describe_certificate

    def certificate(path: Path) -> crypto.X509:
        return crypto.load_certificate(crypto.FILETYPE_PEM, path.read_bytes())

    no_cn, _ = pki["ca"].issue("", organization="Acme")
    empty, _ = pki["ca"].issue("")
    assert describe_certificate(certificate(pki["alice"][0])) == "identity 'alice'"
    assert describe_certificate(None) == "a peer without a certificate"
    assert describe_certificate(certificate(no_cn)) == (
        "a certificate without a common name (CN) in its subject (O=Acme), so with no identity,"
    )
    assert "(empty)" in describe_certificate(certificate(empty))


def test_a_certificate_without_a_common_name_is_refused_for_that_reason(
    tmp_path: Path, start_daemon, pki
) -> None:
    port = tls_daemon(tmp_path, start_daemon, pki["server"], MTLS.format(ca=pki["ca"].path))
    cert, key = pki["ca"].issue("", organization="Acme")
    context = ssl.create_default_context(cafile=str(pki["ca"].path))
    context.load_cert_chain(cert, key)
    raw = socket.create_connection(("127.0.0.1", port), timeout=10)
    with Peer(context.wrap_socket(raw, server_hostname="localhost")) as nameless:
        reply = nameless.request(wire.encode_submit(b"t", b"x"))
        assert isinstance(reply, wire.Error) and reply.code == ErrorCode.INVALID_MESSAGE
        assert reply.message.startswith(
            "a certificate without a common name (CN) in its subject (O=Acme)"
        )
        assert reply.message.endswith("may not act as a producer")
        nameless.wait_closed()


def test_admins_and_owners_follow_certificate_identity(tmp_path: Path, start_daemon, pki) -> None:
    pki["dave"] = pki["ca"].issue("dave")
    extra = "client_ca = {ca}\nproducers = alice, bob\nadmins = dave\n".format(ca=pki["ca"].path)
    port = tls_daemon(tmp_path, start_daemon, pki["server"], extra)
    with (
        QuicxClient(address(port, pki, who="alice")) as alice,
        QuicxClient(address(port, pki, who="alice")) as alice_again,
        QuicxClient(address(port, pki, who="bob")) as bob,
        QuicxClient(address(port, pki, who="dave")) as dave,
    ):
        first, second = alice.submit("t", b"x"), alice.submit("t", b"y")
        # The same identity owns the task across connections; another does not.
        assert alice_again.cancel(first)["state"] == "cancelled"
        with pytest.raises(Forbidden):
            bob.cancel(second)
        with pytest.raises(Forbidden):
            alice.pause("default")
        assert dave.pause("default") == {"queue": "default", "paused": True}
        assert dave.cancel(second)["state"] == "cancelled"


def test_the_dashboard_over_tls_lets_client_certificates_in_by_role(
    tmp_path: Path, start_daemon, pki
) -> None:
    server, key = pki["server"]
    conf = tmp_path / "web.conf"
    conf.write_text(
        "[server]\nlisten = tcp:0:interface=127.0.0.1\n"
        f"[tls]\ncertificate = {server}\nprivate_key = {key}\nclient_ca = {pki['ca'].path}\n"
        "admins = alice\nmonitors = bob\n"
        "[web]\nlisten = tls:0:interface=127.0.0.1\nadmin_token = web-token\n"
    )
    daemon: DaemonProcess = start_daemon(f"--config={conf}")
    found = re.search(r"dashboard on 127\.0\.0\.1:(\d+)", daemon.wait_for_log("dashboard on"))
    assert found is not None
    port = int(found.group(1))
    web = f"https://localhost:{port}"

    def fetch(who: str, path: str, method: str = "GET", **headers: str) -> tuple[int, Any, bytes]:
        context = ssl.create_default_context(cafile=str(pki["ca"].path))
        if who:
            context.load_cert_chain(*pki[who])
        connection = http.client.HTTPSConnection("localhost", port, timeout=10, context=context)
        try:
            connection.request(method, path, headers=headers)
            answer = connection.getresponse()
            return answer.status, answer.headers, answer.read()
        finally:
            connection.close()

    status, _, body = fetch("alice", "/api/session")
    session = json.loads(body)
    assert (status, session["role"]) == (200, "admin")
    assert fetch("bob", "/api/session")[0] == 200
    assert fetch("carol", "/api/session")[0] == 401  # verified, but on neither list
    with pytest.raises((ssl.SSLError, ConnectionError)):  # client_ca: no certificate, no TLS
        fetch("", "/api/session")
    # A certificate is a browser's ambient credential: its actions need the CSRF token.
    assert fetch("alice", "/api/queues/q/pause", "POST")[0] == 403
    assert fetch("bob", "/api/queues/q/pause", "POST", **{"X-Quicx-CSRF": "x"})[0] == 403
    status, _, body = fetch(
        "alice", "/api/queues/q/pause", "POST", Origin=web, **{"X-Quicx-CSRF": session["csrf"]}
    )
    assert (status, json.loads(body)) == (200, {"queue": "q", "paused": True})
    # Over TLS the session cookie is Secure.
    status, headers, _ = fetch("alice", "/login?token=web-token")
    assert status == 303 and "; Secure" in headers["Set-Cookie"]


@pytest_twisted.ensureDeferred
async def test_a_cluster_peer_over_tls_is_polled_with_a_monitor_certificate(
    tmp_path: Path, start_daemon, pki
) -> None:
    from twisted.internet import reactor

    from quicx.daemon.fleet.peers import PeerUnavailable, ask_status

    port = tls_daemon(tmp_path, start_daemon, pki["server"], MTLS.format(ca=pki["ca"].path))

    def peer(who: str) -> str:  # trustRoots a PEM file, as [cluster] peers documents it
        cert, key = pki[who]
        return (
            f"tls:localhost:{port}:trustRoots={pki['ca'].path}:certificate={cert}:privateKey={key}"
        )

    document = await ask_status(reactor, peer("carol"), 5.0, 1 << 20)
    assert document["format"] == "quicx-status/1"
    with pytest.raises(PeerUnavailable, match="identity 'alice' may not act as a monitor"):
        await ask_status(reactor, peer("alice"), 5.0, 1 << 20)


def test_the_control_socket_reads_as_an_admin_under_role_lists(
    tmp_path: Path, start_daemon, pki
) -> None:
    """With every role list set, the control socket (the admin) may still read, as may admins."""
    pki["dave"] = pki["ca"].issue("dave")
    conf = tmp_path / "tls.conf"
    server, key = pki["server"]
    conf.write_text(
        "[server]\nlisten = tls:0:interface=127.0.0.1\n"
        f"[tls]\ncertificate = {server}\nprivate_key = {key}\n"
        + MTLS.format(ca=pki["ca"].path)
        + "admins = dave\n"
    )
    daemon: DaemonProcess = start_daemon(f"--config={conf}")
    port = listening_port(daemon.log(), "tls:")
    with QuicxClient(f"unix:{daemon.control_path}") as admin:
        assert admin.stats().queue_depth == 0
        assert [q["name"] for q in admin.queues()] == ["default"]
        assert admin.dead()["tasks"] == []
        assert admin.schedules() == []
        assert admin.pause("default") == {"queue": "default", "paused": True}
        assert admin.queues()[0]["paused"]
    # A TLS admin may read too; an identity on no list still may not.
    with QuicxClient(address(port, pki, who="dave")) as dave:
        assert dave.queues()[0]["paused"]
    with (
        QuicxClient(address(port, pki, who="alice")) as alice,
        pytest.raises(InvalidMessage, match="identity 'alice' may not act as a monitor"),
    ):
        alice.queues()


def test_a_pipelined_flood_is_answered_whole_and_in_order_over_tcp_and_tls(
    tmp_path: Path, start_daemon, pki
) -> None:
    """
    Reads far past C{[limits] read_slice} (4 KiB here) are decoded a slice a
    turn: every frame of a 300 KB flood is answered, in order, over a plain
    listener and over TLS (whose transport hands on what it has decrypted
    while the connection waits for its next turn).
    """
    cert, key = pki["server"]
    conf = tmp_path / "sliced.conf"
    conf.write_text(
        "[server]\nlisten = tcp:0:interface=127.0.0.1\nlisten = tls:0:interface=127.0.0.1\n"
        f"[tls]\ncertificate = {cert}\nprivate_key = {key}\n[limits]\nread_slice = 4096\n"
    )
    daemon: DaemonProcess = start_daemon(f"--config={conf}")
    log = daemon.wait_for_log("(tcp:", timeout=30) + daemon.wait_for_log("(tls:", timeout=30)
    context = ssl.create_default_context(cafile=str(pki["ca"].path))
    flood = wire.encode_heartbeat() * 50_000 + wire.encode_submit(b"t", b"x")
    for task_id, kind in enumerate(("tcp:", "tls:"), start=1):
        expected = wire.encode_pong() * 50_000 + wire.encode_ok(task_id)
        raw = socket.create_connection(("127.0.0.1", listening_port(log, kind)), timeout=30)
        with (
            context.wrap_socket(raw, server_hostname="localhost") if kind == "tls:" else raw as sock
        ):
            sock.sendall(flood)
            answered = b""
            while len(answered) < len(expected):
                answered += sock.recv(1 << 20) or b"<closed>"
                assert not answered.endswith(b"<closed>"), kind
        assert answered == expected, kind


@pytest.mark.parametrize(
    ("limits", "flood"),
    [
        # The refused SUBMIT in a read's second slice.
        (
            "read_slice = 4096",
            wire.encode_heartbeat() * 1000
            + wire.encode_submit(b"t", b"x")
            + wire.encode_heartbeat(),
        ),
        # The refused SUBMIT behind monitor queries past their slice.
        ("monitor_slice = 0.0001", wire.encode_stats() * 300 + wire.encode_submit(b"t", b"x")),
    ],
)
def test_a_tls_connection_refused_in_a_later_turn_is_closed(
    tmp_path: Path, start_daemon, pki, limits: str, flood: bytes
) -> None:
    """
    A TLS peer refused for its role in a later turn of its read (the
    connection unread meanwhile) is closed at the TCP level too: the daemon
    goes on reading until the peer's close_notify (it stayed open until
    the heartbeat timeout).
    """
    extra = MTLS.format(ca=pki["ca"].path) + f"[limits]\n{limits}\n"
    port = tls_daemon(tmp_path, start_daemon, pki["server"], extra)
    context = ssl.create_default_context(cafile=str(pki["ca"].path))
    context.load_cert_chain(*pki["carol"])  # a monitor, not a producer
    raw = socket.create_connection(("127.0.0.1", port), timeout=30)
    with context.wrap_socket(raw, server_hostname="localhost") as sock:
        sock.sendall(flood)
        answered = b""
        while chunk := sock.recv(1 << 16):  # until the daemon's close_notify
            answered += chunk
        assert b"may not act as a producer" in answered
        plain = sock.unwrap()  # our close_notify
        assert plain.recv(1) == b""  # the daemon closed the TCP connection
