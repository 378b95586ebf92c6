"""The TCP sockets a process listens on, read from /proc (Linux): for the checks that every listener of a stage,
an engine or a Ray node binds loopback unless the user named another address."""

from __future__ import annotations

import ipaddress
import os
import socket
import struct
from pathlib import Path

_LISTEN = "0A"


def _address(hex_addr: str) -> str:
    """``/proc/net/tcp{,6}``'s hex address (host byte order per 32-bit word) as text."""
    raw = bytes.fromhex(hex_addr)
    words = b"".join(struct.pack("=I", int.from_bytes(raw[i:i + 4], "big")) for i in range(0, len(raw), 4))
    return socket.inet_ntop(socket.AF_INET if len(raw) == 4 else socket.AF_INET6, words)


def listeners(pid: int | None = None) -> list[tuple[str, int]]:
    """``(address, port)`` of every TCP socket in LISTEN state that process ``pid`` (default: this one) holds."""
    pid = pid or os.getpid()
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[len("socket:["):-1])
    out = []
    for table in ("tcp", "tcp6"):
        path = Path(f"/proc/{pid}/net/{table}")
        if not path.exists():
            continue
        for line in path.read_text().splitlines()[1:]:
            f = line.split()
            if len(f) > 9 and f[3] == _LISTEN and f[9] in inodes:
                addr, port = f[1].rsplit(":", 1)
                out.append((_address(addr), int(port, 16)))
    return sorted(set(out))


def beyond_loopback(socks: list[tuple[str, int]]) -> list[str]:
    """The listeners of ``socks`` that are not on a loopback address (``*``/``0.0.0.0``/``::`` included), as text."""
    bad = []
    for addr, port in socks:
        ip = ipaddress.ip_address(addr)
        mapped = getattr(ip, "ipv4_mapped", None)
        if not (mapped or ip).is_loopback:
            bad.append(f"{addr}:{port}")
    return bad
