"""A file server on loopback: fixed bytes at fixed paths, 404 elsewhere, and a record of every path asked for."""

from __future__ import annotations

import contextlib
import http.server
import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field


@dataclass
class FileServer:
    base_url: str
    asked: list[str] = field(default_factory=list)


@contextlib.contextmanager
def serving(files: Mapping[str, bytes]) -> Iterator[FileServer]:
    """Serve ``files`` (path -> bytes, e.g. ``{"/model.onnx": data}``) on a free loopback port while the block runs."""
    served = FileServer(base_url="")

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            served.asked.append(self.path)
            data = files.get(self.path)
            if data is None:
                self.send_error(404)
                return
            self.send_response(200)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: object) -> None:
            return

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    served.base_url = f"http://127.0.0.1:{server.server_address[1]}"
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield served
    finally:
        server.shutdown()
        server.server_close()
