#!/usr/bin/env python3
"""flip_relay.py: the fault campaign's bit-flipping relay (the `flip` kind).

Run by fault_campaign.py as a process of its own, in the lab: one member
lives in a private namespace where every peer address is local, and this
relay forwards each of its connections through the member's host on the
bridge, flipping one byte of what flows towards the member. It prints
`ready` once it listens, and `flipped OFFSET TIME` when it flipped.
Python 3 standard library only.
"""

import ctypes
import os
import socket
import sys
import threading
import time

CLONE_NEWNET = 0x40000000
_libc = None


def setns(name):
    """Move the calling thread into network namespace `name`."""
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(None, use_errno=True)
    fd = os.open(f"/var/run/netns/{name}", os.O_RDONLY)
    try:
        if _libc.setns(fd, CLONE_NEWNET) != 0:
            raise OSError(ctypes.get_errno(), f"setns {name}")
    finally:
        os.close(fd)


def relay_main(argv):
    """`flip_relay.py OUTER INNER ME_ADDR PEERS FLIP_AFTER MASK`: forward every
    connection of the member living in INNER (whose every peer address is
    local there) through OUTER, the member's host on the bridge, and flip one
    byte of the traffic towards the member: the byte at offset FLIP_AFTER of
    all of it, xor MASK."""
    outer, inner, me, peers, flip_after, mask = argv
    flip_after, mask = int(flip_after), int(mask)
    peers = [p for p in peers.split(",") if p]
    state = {"seen": 0, "flipped": False}
    lock = threading.Lock()

    def listener(ns, addr):
        setns(ns)
        host, port = addr.rsplit(":", 1)
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind((host, int(port)))
        s.listen(64)
        return s

    def pump(src, dst, towards_member):
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                if towards_member:
                    with lock:
                        start = state["seen"]
                        state["seen"] += len(data)
                        if not state["flipped"] and start <= flip_after < state["seen"]:
                            buf = bytearray(data)
                            buf[flip_after - start] ^= mask
                            data = bytes(buf)
                            state["flipped"] = True
                            print(f"flipped {flip_after} {time.monotonic()}", flush=True)
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def serve(lsock, connect_ns, target, inbound):
        # inbound: a peer connects to the member (client -> server is towards it)
        while True:
            try:
                client, _ = lsock.accept()
            except OSError:
                return
            setns(connect_ns)
            up = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            host, port = target.rsplit(":", 1)
            try:
                up.connect((host, int(port)))
            except OSError:
                client.close()
                up.close()
                continue
            for s in (client, up):
                s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            threading.Thread(target=pump, args=(client, up, inbound), daemon=True).start()
            threading.Thread(target=pump, args=(up, client, not inbound), daemon=True).start()

    jobs = [(listener(outer, me), inner, me, True)]
    jobs += [(listener(inner, p), outer, p, False) for p in peers]
    for lsock, ns, target, inbound in jobs:
        threading.Thread(target=serve, args=(lsock, ns, target, inbound), daemon=True).start()
    print("ready", flush=True)
    while True:
        time.sleep(3600)


if __name__ == "__main__":
    relay_main(sys.argv[1:])
