"""Who holds a TCP port: the facts the lifecycle needs so that it never measures the wrong engine.

A server left on an engine's port (a stale engine, a forgotten `python -m http.server`) answers
the health check with 200 while the launched engine fails to bind, and every run would be stored
under the launched engine's name (docs/engines.md, "Measuring the right engine"). Two checks
rest on this module:

- before launch, `port_taken` binds the address the way a server does (SO_REUSEADDR, so sockets
  in TIME_WAIT do not count) and `port_holders` names whoever listens there;
- after health, `foreign_holders` lists listeners on the port that are not the launched
  process tree (its process group or its descendants).

Linux only, from /proc (`/proc/net/tcp{,6}` for listening sockets and their inodes,
`/proc/<pid>/fd` for who holds an inode, `/proc/<pid>/stat` for parents and groups, read by
engine_adapters/process_group.py); no extra dependency. Where /proc cannot say (another OS,
another network namespace), `foreign_holders` returns None and only the alive check and the
engine's own identity remain.
"""

from __future__ import annotations

import errno
import ipaddress
import os
import socket
from dataclasses import dataclass
from typing import AbstractSet

from engine_adapters.process_group import PROC, live_stat, proc_pids

_LISTEN = "0A"  # TCP_LISTEN in /proc/net/tcp's `st` column
_WILDCARDS = {"0.0.0.0", "::"}


@dataclass(frozen=True)
class Listener:
    address: str  # the local address as text, e.g. 127.0.0.1, ::, ::ffff:127.0.0.1
    port: int
    inode: int


@dataclass(frozen=True)
class Holder:
    pid: int | None  # None: a process this user cannot inspect holds the socket
    command: str

    def __str__(self) -> str:
        return f"pid {self.pid} ({self.command})" if self.pid is not None else self.command


def _decode_address(hex_addr: str) -> str:
    """/proc/net/tcp{,6} addresses: 32-bit words in host (little-endian) byte order."""
    raw = bytes.fromhex(hex_addr)
    raw = b"".join(raw[i:i + 4][::-1] for i in range(0, len(raw), 4))
    return str(ipaddress.ip_address(raw))


def listeners(port: int) -> list[Listener] | None:
    """Listening TCP sockets on `port` (any address), or None when /proc/net/tcp is unreadable."""
    found: list[Listener] = []
    readable = False
    for table in ("tcp", "tcp6"):
        try:
            lines = (PROC / "net" / table).read_text().splitlines()[1:]
        except OSError:
            continue
        readable = True
        for line in lines:
            cols = line.split()
            if len(cols) < 10 or cols[3] != _LISTEN:
                continue
            addr, _, hex_port = cols[1].partition(":")
            if int(hex_port, 16) == port:
                found.append(Listener(_decode_address(addr), port, int(cols[9])))
    return found if readable else None


def _resolve(host: str) -> set[str]:
    try:
        return {str(info[4][0]) for info in socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)}
    except OSError:
        return set()


def serving(found: list[Listener], host: str) -> list[Listener]:
    """The listeners a connection to `host` can reach: same address, a wildcard, or (for an IPv4
    host) its IPv4-mapped IPv6 form. A wildcard `host` (0.0.0.0, ::) conflicts with every one."""
    if host in _WILDCARDS:
        return found
    ips = _resolve(host)
    ips |= {f"::ffff:{ip}" for ip in ips if ":" not in ip}
    return [x for x in found if x.address in ips or x.address in _WILDCARDS]


def command(pid: int, limit: int = 120) -> str:
    try:
        argv = (PROC / str(pid) / "cmdline").read_bytes().split(b"\0")
    except OSError:
        return "?"
    text = " ".join(" ".join(a.decode(errors="replace").split()) for a in argv if a) or "?"  # one line
    return text if len(text) <= limit else text[:limit - 3] + "..."


def socket_owners(inodes: set[int]) -> dict[int, set[int]]:
    """inode -> pids holding it, among the processes whose fds this user may read."""
    owners: dict[int, set[int]] = {}
    targets = {f"socket:[{i}]": i for i in inodes}
    for pid in proc_pids():
        fd_dir = PROC / str(pid) / "fd"
        try:
            names = os.listdir(fd_dir)
        except OSError:
            continue
        for fd in names:
            try:
                link = os.readlink(fd_dir / fd)
            except OSError:
                continue
            if link in targets:
                owners.setdefault(targets[link], set()).add(pid)
    return owners


def process_tree(root: int) -> set[int]:
    """`root`, the members of its process group and all their descendants (the launched engine:
    its orphan guard leads the group; a worker that calls setsid is still a descendant)."""
    table = {pid: st for pid in proc_pids() if (st := live_stat(pid)) is not None}
    tree = {root} | {pid for pid, (_, pgid) in table.items() if pgid == root}
    grew = True
    while grew:
        more = {pid for pid, (ppid, _) in table.items() if ppid in tree and pid not in tree}
        tree |= more
        grew = bool(more)
    return tree


def holders_of(found: list[Listener], exclude: AbstractSet[int] = frozenset()) -> list[Holder]:
    """Who holds these listening sockets, leaving out `exclude`; a socket whose holder cannot be
    seen (another user's process) is one Holder without a pid."""
    owners = socket_owners({x.inode for x in found})
    out: list[Holder] = []
    for x in found:
        pids = owners.get(x.inode)
        if not pids:
            out.append(Holder(None, f"a process this user cannot inspect (listening on {x.address}, socket inode {x.inode})"))
            continue
        if pids & exclude:
            continue
        out += [Holder(pid, command(pid)) for pid in sorted(pids)]
    return out


def port_taken(host: str, port: int) -> bool:
    """Would a server fail to bind host:port because something already listens there?"""
    for ip in _resolve(host) or {host}:
        family = socket.AF_INET6 if ":" in ip else socket.AF_INET
        try:
            with socket.socket(family, socket.SOCK_STREAM) as s:
                s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                s.bind((ip, port))
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                return True
            # EACCES (a privileged port), EADDRNOTAVAIL (not a local address): the engine's own
            # bind reports that better than a guess here
    return False


def port_holders(host: str, port: int) -> list[Holder]:
    """Who listens where a server on host:port would bind (empty when /proc cannot say)."""
    found = listeners(port) or []
    return holders_of(serving(found, host) or found)


def foreign_holders(host: str, port: int, root_pid: int) -> list[Holder] | None:
    """Listeners reachable at host:port held by processes outside `root_pid`'s tree; [] when all
    are the launched engine's, None when /proc shows no listener there (cannot tell)."""
    found = listeners(port)
    if not found:
        return None
    reachable = serving(found, host)
    if not reachable:
        return None
    return holders_of(reachable, exclude=process_tree(root_pid))
