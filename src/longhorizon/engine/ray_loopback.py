"""Keep a local Ray instance on loopback: move this thread into a private network namespace.

Ray's processes listen on TCP ports. For tests and benchmarks on shared machines we want them
reachable from nowhere but this machine, so :func:`enter_loopback_namespace` moves the calling
thread into a fresh Linux network namespace whose only interface is ``lo`` (brought up here). Every
process started afterwards from this thread (Ray's GCS, raylet and workers) inherits it. This is the
in-process equivalent of ``unshare -n sh -c 'ip link set lo up && ...'``; it needs root (or
CAP_SYS_ADMIN). It is not for production runs on a cluster, where nodes must reach each other.
"""

from __future__ import annotations

import ctypes
import fcntl
import socket
import struct

CLONE_NEWNET = 0x40000000
SIOCGIFFLAGS, SIOCSIFFLAGS, IFF_UP = 0x8913, 0x8914, 0x1


def interfaces() -> list[str]:
    """Network interfaces of the calling thread's namespace."""
    return [name for _, name in socket.if_nameindex()]


def _bring_loopback_up() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        request = struct.pack("16sH22x", b"lo", 0)
        flags = struct.unpack("16sH22x", fcntl.ioctl(sock.fileno(), SIOCGIFFLAGS, request))[1]
        fcntl.ioctl(sock.fileno(), SIOCSIFFLAGS, struct.pack("16sH22x", b"lo", flags | IFF_UP))


def enter_loopback_namespace() -> bool:
    """Ensure the calling thread sees only ``lo`` (up). Returns True if it had to unshare.

    Raises ``PermissionError`` with the reason when the namespace cannot be created.
    """
    if interfaces() != ["lo"]:
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.unshare(CLONE_NEWNET) != 0:
            errno = ctypes.get_errno()
            raise PermissionError(errno, "cannot create a private network namespace (needs root or CAP_SYS_ADMIN); "
                                  "run under `unshare -rn` or `unshare -n` instead")
        entered = True
    else:
        entered = False
    _bring_loopback_up()
    assert interfaces() == ["lo"], interfaces()
    return entered
