"""
A TCP proxy the failover matrix can cut: it forwards a port of 127.0.0.1 to
a target, and on its control socket it is told to cut (a partition) or heal.

    python -m tools.failover.proxy --listen 7001 --target 127.0.0.1:7101 --control p.sock

Control: one line per connection to the UNIX socket C{--control}, answered
with one line (C{ok MODE}):

- C{cut blackhole}: what a partition looks like to TCP: every connection
  goes silent both ways (bytes are read and dropped, nothing is forwarded
  and nothing is closed), and a new connection is accepted and never
  forwarded;
- C{cut reset}: every connection is reset (RST to both ends), and a new one
  is reset as soon as it is accepted;
- C{heal}: connections silenced by a cut are reset (their peers reconnect,
  as after a partition long enough to time out), new ones are forwarded;
- C{mode}: the mode in force (C{open}, C{blackhole} or C{reset}).

L{Proxy} starts one in a subprocess (it dies with the matrix) and drives it.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import socket
import struct
import subprocess
import sys
import time
from pathlib import Path

from attrs import define, field

from tools.crashmatrix import die_with_parent
from tools.launcher import tools_environment

OPEN, BLACKHOLE, RESET = "open", "blackhole", "reset"
CUTS = (BLACKHOLE, RESET)
CHUNK = 1 << 16


def reset(writer: asyncio.StreamWriter) -> None:
    """Close C{writer}'s socket with an RST (SO_LINGER 0), not a FIN."""
    sock = writer.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.transport.abort()


@define(eq=False)
class Link:
    """One client connection and, when forwarded, its upstream connection."""

    client: asyncio.StreamWriter
    upstream: asyncio.StreamWriter | None = None
    silent: bool = False

    def reset(self) -> None:
        reset(self.client)
        if self.upstream is not None:
            reset(self.upstream)

    def close(self) -> None:
        self.client.close()
        if self.upstream is not None:
            self.upstream.close()


@define
class ProxyServer:
    """The proxy's state, in its own process: the mode and the live links."""

    target: tuple[str, int]
    mode: str = OPEN
    links: set[Link] = field(factory=set)

    async def accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        link = Link(writer)
        if self.mode == RESET:
            link.reset()
            return
        self.links.add(link)
        try:
            if self.mode == BLACKHOLE:
                link.silent = True
                await self.pump(reader, None, link)
                return
            try:
                up_reader, link.upstream = await asyncio.open_connection(*self.target)
            except OSError:
                link.reset()
                return
            if self.mode != OPEN:  # cut while connecting
                link.silent = True
            await asyncio.gather(
                self.pump(reader, link.upstream, link),
                self.pump(up_reader, writer, link),
            )
        finally:
            self.links.discard(link)

    async def pump(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter | None, link: Link
    ) -> None:
        """Copy C{reader} to C{writer} until either end goes; drop the bytes while silent."""
        try:
            while data := await reader.read(CHUNK):
                if link.silent or writer is None:
                    continue
                writer.write(data)
                await writer.drain()
        except OSError:
            link.reset()
            return
        if not link.silent:  # a clean close, forwarded as one (a silenced link says nothing)
            link.close()

    def command(self, line: str) -> str:
        words = line.split()
        if words[:1] == ["cut"] and len(words) == 2 and words[1] in CUTS:
            self.mode = words[1]
            for link in list(self.links):
                if self.mode == RESET:
                    link.reset()
                else:
                    link.silent = True
        elif words == ["heal"]:
            self.mode = OPEN
            for link in [link for link in self.links if link.silent]:
                link.reset()
        elif words != ["mode"]:
            return f"error: unknown command {line.strip()!r}"
        return f"ok {self.mode}"

    async def control(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        line = (await reader.readline()).decode(errors="replace")
        writer.write(f"{self.command(line)}\n".encode())
        await writer.drain()
        writer.close()


async def serve(listen: int, target: tuple[str, int], control: Path) -> None:
    server = ProxyServer(target)
    forwarding = await asyncio.start_server(server.accept, "127.0.0.1", listen)
    controlling = await asyncio.start_unix_server(server.control, str(control))
    async with forwarding, controlling:
        await asyncio.gather(forwarding.serve_forever(), controlling.serve_forever())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.failover.proxy")
    parser.add_argument("--listen", type=int, required=True, help="port of 127.0.0.1")
    parser.add_argument("--target", required=True, help="HOST:PORT")
    parser.add_argument("--control", type=Path, required=True, help="UNIX socket path")
    args = parser.parse_args(argv)
    host, _, port = args.target.rpartition(":")
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(serve(args.listen, (host, int(port)), args.control))
    return 0


class ProxyError(RuntimeError):
    """The proxy did not start, or did not answer its control socket."""


@define(eq=False)
class Proxy:
    """
    A proxy process: C{127.0.0.1:listen} forwarded to C{target}, controlled
    through C{control} (a UNIX socket path).
    """

    name: str
    listen: int
    target: str
    control: Path
    process: subprocess.Popen[bytes] | None = None

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.listen}"

    def start(self, log: Path, timeout: float = 30.0) -> Proxy:
        self.control.unlink(missing_ok=True)
        with log.open("ab") as output:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "tools.failover.proxy", f"--listen={self.listen}",
                 f"--target={self.target}", f"--control={self.control}"],
                stdin=subprocess.DEVNULL, stdout=output, stderr=subprocess.STDOUT,
                env=tools_environment(), preexec_fn=die_with_parent(),
            )  # fmt: skip
        deadline = time.monotonic() + timeout
        while True:
            with contextlib.suppress(ProxyError):
                self.tell("mode")
                return self
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise ProxyError(f"proxy {self.name} did not start; see {log}")
            time.sleep(0.05)

    def tell(self, command: str, timeout: float = 10.0) -> str:
        """Send one control line; its answer's mode. @raise ProxyError: no answer, or an error."""
        try:
            with socket.socket(socket.AF_UNIX) as sock:
                sock.settimeout(timeout)
                sock.connect(str(self.control))
                sock.sendall(command.encode() + b"\n")
                answer = sock.makefile("rb").readline().decode().strip()
        except OSError as e:
            raise ProxyError(f"proxy {self.name}: {e}") from None
        if not answer.startswith("ok "):
            raise ProxyError(f"proxy {self.name}: {answer or 'no answer'}")
        return answer[3:]

    def cut(self, how: str = BLACKHOLE) -> None:
        self.tell(f"cut {how}")

    def heal(self) -> None:
        self.tell("heal")

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


if __name__ == "__main__":
    sys.exit(main())
