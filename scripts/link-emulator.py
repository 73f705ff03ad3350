#!/usr/bin/env python3
"""A point-to-point link with delay, jitter and loss, for kernels without `tc netem`.

Creates two TUN devices (layer 3, no packet information) in the network namespace it runs in,
prints `ready` on stdout, then carries every packet read from one device to the other after
`delay +- jitter` (drawn uniformly per packet, so packets may be reordered, as netem does), and
drops each packet with probability `loss`: the same in both directions. The caller moves one
device into the peer namespace and gives both an address (the file descriptors stay valid across
the move). The devices are not persistent: they vanish when this process exits, which it does
when its standard input closes, on SIGTERM or SIGINT.

Usage: link-emulator.py DEV_A DEV_B DELAY_MS JITTER_MS LOSS_SHARE SEED
"""

import fcntl
import heapq
import os
import random
import select
import signal
import struct
import sys
import time

TUNSETIFF = 0x400454CA
IFF_TUN = 0x0001
IFF_NO_PI = 0x1000


def open_tun(name):
    fd = os.open("/dev/net/tun", os.O_RDWR | os.O_NONBLOCK)
    fcntl.ioctl(fd, TUNSETIFF, struct.pack("16sH", name.encode(), IFF_TUN | IFF_NO_PI))
    return fd


def main():
    if len(sys.argv) != 7:
        sys.exit(__doc__)
    dev_a, dev_b = sys.argv[1], sys.argv[2]
    delay = float(sys.argv[3]) / 1000.0
    jitter = float(sys.argv[4]) / 1000.0
    loss = float(sys.argv[5])
    if not (delay >= jitter >= 0.0 and 0.0 <= loss < 1.0):
        sys.exit("link-emulator: needs delay >= jitter >= 0 and 0 <= loss < 1")
    rng = random.Random(int(sys.argv[6]))
    fd_a, fd_b = open_tun(dev_a), open_tun(dev_b)
    peer = {fd_a: fd_b, fd_b: fd_a}
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    signal.signal(signal.SIGINT, lambda *_: sys.exit(0))
    print("ready", flush=True)

    stdin = sys.stdin.fileno()
    queue = []  # (due, sequence, out_fd, packet)
    sequence = 0
    poller = select.poll()
    for fd in (fd_a, fd_b, stdin):
        poller.register(fd, select.POLLIN)
    while True:
        now = time.monotonic()
        while queue and queue[0][0] <= now:
            _, _, out, packet = heapq.heappop(queue)
            try:
                os.write(out, packet)
            except (BlockingIOError, OSError):
                pass  # the device is down or full: the packet is lost, as on a wire
        timeout_ms = None
        if queue:
            timeout_ms = max(0.0, (queue[0][0] - time.monotonic()) * 1000.0)
        for fd, _ in poller.poll(timeout_ms):
            if fd == stdin:
                if not os.read(stdin, 4096):
                    return
                continue
            while True:
                try:
                    packet = os.read(fd, 65536)
                except (BlockingIOError, OSError):
                    break
                if not packet:
                    break
                if loss > 0.0 and rng.random() < loss:
                    continue
                due = time.monotonic() + delay + rng.uniform(-jitter, jitter)
                sequence += 1
                heapq.heappush(queue, (due, sequence, peer[fd], packet))


if __name__ == "__main__":
    main()
