"""Helpers for the engine-identity tests (owned by helper "engine"): real processes that hold a
port the way a stale server does, and finding the engine process a launch started."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

# a plain HTTP server that answers 200 on /health and 404 elsewhere: what a stale engine or a
# forgotten debugging server looks like from the health check
STALE_SERVER = r"""
import http.server, sys
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200 if self.path == "/health" else 404)
        self.end_headers(); self.wfile.write(b'{"status":"healthy"}')
    def do_POST(self):
        self.send_response(404); self.end_headers()
    def log_message(self, *a): pass
srv = http.server.HTTPServer(("127.0.0.1", int(sys.argv[1])), H)
print("stale server up", flush=True)
srv.serve_forever()
"""


def start_stale_server(port: int) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-c", STALE_SERVER, str(port)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "stale server up"
    return proc


def children(pid: int) -> list[int]:
    try:
        text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    except OSError:
        return []
    return [int(x) for x in text.split()]


def find_engine(marker: str, timeout_s: float = 60.0) -> int:
    """The pid of the engine a launch started: the orphan guard's child whose command line
    contains `marker` (e.g. the port)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for d in Path("/proc").iterdir():
            if not d.name.isdigit():
                continue
            try:
                cmd = (d / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            if "orphan_guard.py" in cmd and marker in cmd:
                kids = children(int(d.name))
                if kids:
                    return kids[0]
        time.sleep(0.05)
    raise AssertionError(f"no engine with {marker!r} in its command line appeared")
