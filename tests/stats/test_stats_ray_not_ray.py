"""``attn stats --ray HOST:PORT`` where a server answers but is not Ray: one line and exit 1 within
the connect bound (Ray's own client retried such a port for minutes, printing its raw log lines).
The servers are local, on 127.0.0.1, and stop themselves: one that accepts and says nothing, one
that answers garbage at once, one that trickles garbage a byte at a time. No wall-clock assertion:
the probe's own bound (CONNECT_SECONDS) is what ends it, and the timeout marker fails a hang."""

from __future__ import annotations

import re
import socket
import threading

import pytest

from _stats_helpers import cli, said, write_corpus
from conftest import needed

needed("tokenizers")
needed("safetensors")

LIFETIME = 60.0  # seconds a server lives at most, whatever the test does


class Server:
    """A TCP server on 127.0.0.1 that accepts every connection and answers ``reply`` (b"": nothing),
    ``every`` seconds a byte when given; it stops after LIFETIME or on close()."""

    def __init__(self, reply: bytes, every: float = 0.0):
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self.reply, self.every, self.stop, self.accepted = reply, every, threading.Event(), 0
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()
        threading.Timer(LIFETIME, self.stop.set).start()

    def _serve(self) -> None:
        conns = []
        while not self.stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            self.accepted += 1
            conns.append(conn)
            try:
                if self.every:
                    for b in self.reply:
                        if self.stop.wait(self.every):
                            break
                        conn.sendall(bytes([b]))
                elif self.reply:
                    conn.sendall(self.reply)
            except OSError:
                pass
        for c in conns:
            c.close()
        self.sock.close()

    def close(self) -> None:
        self.stop.set()
        self.thread.join(5)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("reply, every", [(b"", 0.0), (b"HTTP/1.1 400 Bad Request\r\n\r\n" * 4, 0.0),
                                          (b"\x00\x00\x00\x07garbage", 0.5)],
                         ids=["silent", "garbage", "trickle"])
def test_a_port_that_answers_but_is_not_ray_fails_in_one_line(reply, every, tiny_gpt2_dir, tmp_path, monkeypatch):
    from attncli.stats import cluster

    monkeypatch.setattr(cluster, "CONNECT_SECONDS", 2.0)  # the bound the probe waits, whatever answers
    corpus = write_corpus(tmp_path / "c.txt", 4)
    server = Server(reply, every)
    try:
        r = cli(["stats", corpus, "--transformer", tiny_gpt2_dir, "--ray", f"127.0.0.1:{server.port}"], code=1)
    finally:
        server.close()
    assert server.accepted >= 1
    assert said(r, "not a Ray cluster") and said(r, "within 2 s") and r.stderr.count("error") == 1, r.stderr
    assert not re.search(r"Traceback|internal error|rpc_client|gcs_client|\[20\d\d-", r.stderr)  # no Ray log line
