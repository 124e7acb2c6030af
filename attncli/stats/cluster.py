"""Chunks run as tasks on an existing Ray cluster (the ``cluster`` extra): one actor per worker
loads the model once, the driver submits chunks to them in turn and gets the same shard
documents back as local workers return. Every node must hold the model at the name given (a
directory at the same path, or the hub cache) and attn itself.
"""

from __future__ import annotations

import socket
import time
from typing import Any, Iterable, Iterator, Optional

from attncli.env import extras
from attncli.errors import AttnError, BadInput, RuntimeFailure
from attncli.stats.accumulate import Settings
from attncli.stats.chunk_work import bounded, load_work
from attncli.stats.shards import Identity

CONNECT_SECONDS = 5.0  # how long an address may take to answer


def host_port(address: str) -> tuple[str, int]:
    """(host, port) of 'HOST:PORT' or 'ray://HOST:PORT'; BadInput otherwise."""
    rest = address[len("ray://"):] if address.startswith("ray://") else address
    host, sep, port = rest.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise BadInput(f"--ray {address!r}: expected HOST:PORT (the head node's address, e.g. 10.0.0.5:6379) "
                       "or ray://HOST:PORT")
    return host.strip("[]"), int(port)


_H2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + bytes(9)  # HTTP/2's client preface, then an empty SETTINGS frame
_H2_SETTINGS = 4  # the frame type a gRPC server (Ray's GCS, Ray Client) answers the preface with


def check_reachable(address: str, seconds: Optional[float] = None) -> None:
    """BadInput when nothing answers at the address within ``seconds``; RuntimeFailure when what
    answers does not speak gRPC, as Ray's head node does (HTTP/2: its first frame is SETTINGS),
    within ``seconds``: Ray's own client would retry such a port for minutes, logging as it goes."""
    host, port = host_port(address)
    seconds = CONNECT_SECONDS if seconds is None else seconds
    try:
        conn = socket.create_connection((host, port), timeout=seconds)
    except OSError as exc:
        raise BadInput(f"--ray {address!r}: no Ray cluster answers there ({exc.strerror or type(exc).__name__} "
                       f"within {seconds:.0f} s): start one with 'ray start --head' or check the address") from None
    head, deadline = b"", time.monotonic() + seconds
    try:
        with conn:
            conn.sendall(_H2_PREFACE)
            while len(head) < 9 and time.monotonic() < deadline:  # a server trickling bytes has ``seconds`` in all
                conn.settimeout(max(deadline - time.monotonic(), 0.01))
                got = conn.recv(9 - len(head))
                if not got:
                    break
                head += got
    except OSError:
        pass  # a timeout or a reset: judged by what came
    if len(head) < 9 or head[3] != _H2_SETTINGS:
        said = "nothing" if not head else "something else"
        raise RuntimeFailure(f"--ray {address!r}: a server answers there but it is not a Ray cluster (it said {said} "
                             f"to a gRPC greeting within {seconds:.0f} s): check the address and port of the head node")


class StatsActor:
    """A Ray actor's body: the model loaded once (``loader(*args)``: the statistics' ChunkWork, or
    any object with ``compute(start, texts)``), chunks computed on call."""

    def __init__(self, loader, args: tuple):
        self.work = loader(*args)

    def compute(self, start: int, texts: list[str]) -> dict[str, Any]:
        return self.work.compute(start, texts)


def _get(ray, ref) -> dict[str, Any]:
    try:
        return ray.get(ref)
    except Exception as exc:  # noqa: BLE001 - a task's failure: its own error if it was attn's
        cause = getattr(exc, "cause", None)
        if isinstance(cause, AttnError):
            raise type(cause)(str(cause)) from None
        raise RuntimeFailure(f"a Ray task failed: {type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''}") from None


def ray_results(address: str, chunks: Iterable[tuple[int, list[str]]], spec, settings: Settings, ident: Identity,
                workers: Optional[int], ran: Optional[dict[str, Any]] = None, *, loader=load_work
                ) -> Iterator[dict[str, Any]]:
    """The shard document of each chunk, computed on the cluster at ``address``, in chunk order;
    ``ran["workers"]`` is set to the number of actors. Each actor computes with
    ``loader(spec, settings, ident)`` (the statistics' by default)."""
    check_reachable(address)
    try:
        import ray
    except ImportError:
        raise BadInput(extras.needs("--ray", "cluster")) from None
    try:
        ray.init(address=address, logging_level="ERROR", log_to_driver=False)
    except (ConnectionError, RuntimeError, ValueError) as exc:
        raise BadInput(f"--ray {address!r}: cannot join the cluster: {str(exc).splitlines()[0][:200]}") from None
    try:
        n = workers if workers and workers > 1 else max(1, int(ray.cluster_resources().get("CPU", 1)))
        if ran is not None:
            ran["workers"] = n
        actor = ray.remote(num_cpus=1)(StatsActor)
        actors = [actor.remote(loader, (spec, settings, ident)) for _ in range(n)]
        turn = iter(range(1 << 62))
        yield from bounded(chunks, lambda s, t: actors[next(turn) % n].compute.remote(s, t),
                           lambda ref: _get(ray, ref), 2 * n)
    finally:
        ray.shutdown()
