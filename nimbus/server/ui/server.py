"""The UI's HTTP server: aiohttp on its own event loop in its own thread.

GET only: the page (one HTML shell for every route; the script draws the view), its
static files, the JSON API under ``/api/v1/`` and a server-sent event stream that
pushes a fresh snapshot on every cache change (and at least every second, so ages
move). Any other method gets 405: the UI has no write actions.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import socket
import threading
from pathlib import Path
from typing import Any

from aiohttp import web

from nimbus.server.ui.snapshot import ClusterView

log = logging.getLogger(__name__)

STATIC = Path(__file__).resolve().parent / "static"
PERIOD_S = 1.0  # longest gap between two pushed snapshots
MIN_GAP_S = 0.2  # coalesces bursts of watch events into one push
_HEADERS = {
    "Content-Security-Policy": "default-src 'self'; img-src 'self' data:",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
}


def _json(body: Any, status: int = 200) -> web.Response:
    return web.json_response(body, status=status, headers={"Cache-Control": "no-store"})


class UiServer:
    def __init__(self, host: str, port: int, view: ClusterView) -> None:
        self._host = host
        self._port = port
        self._view = view
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._run, name="web-ui", daemon=True)
        self._ready = threading.Event()
        self._failure: BaseException | None = None
        self._runner: web.AppRunner | None = None
        self._wake: asyncio.Event | None = None
        self._closing = False
        self.bound_port = 0

    # -- lifecycle (caller's thread) -----------------------------------------------------

    def start(self, timeout: float = 30.0) -> None:
        """Bind and serve; raises what binding raised (a port in use, say)."""
        self._thread.start()
        if not self._ready.wait(timeout):
            raise TimeoutError(f"web UI did not start within {timeout:.0f} s")
        if self._failure is not None:
            raise self._failure

    def poke(self) -> None:
        """Something changed: push new snapshots now (any thread)."""
        if self._ready.is_set() and not self._loop.is_closed():
            with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
                self._loop.call_soon_threadsafe(self._wake_all)

    def stop(self, timeout: float = 5.0) -> None:
        if not self._thread.is_alive():
            return
        future = asyncio.run_coroutine_threadsafe(self._shutdown(), self._loop)
        with contextlib.suppress(Exception):
            future.result(timeout)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout)

    # -- the loop's thread ----------------------------------------------------------------

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        try:
            self._loop.run_until_complete(self._setup())
        except BaseException as e:
            self._failure = e
            self._ready.set()
            self._loop.close()
            return
        self._ready.set()
        try:
            self._loop.run_forever()
        finally:
            self._loop.close()

    async def _setup(self) -> None:
        self._wake = asyncio.Event()
        app = web.Application(middlewares=[_security_headers])
        app.router.add_get("/", self._page)
        app.router.add_get("/topologies/{name}", self._page)
        app.router.add_static("/static/", STATIC, append_version=False)
        app.router.add_get("/api/v1/cluster", self._cluster)
        app.router.add_get("/api/v1/replicas", self._replicas)
        app.router.add_get("/api/v1/epochs", self._epochs)
        app.router.add_get("/api/v1/topologies", self._topologies)
        app.router.add_get("/api/v1/topologies/{name}", self._topology)
        app.router.add_get("/api/v1/supervisors", self._supervisors)
        app.router.add_get("/api/v1/events", self._events)
        self._runner = web.AppRunner(app, handle_signals=False, shutdown_timeout=1.0)
        await self._runner.setup()
        sock = socket.create_server((self._host, self._port))  # port 0: any free port
        self.bound_port = int(sock.getsockname()[1])
        await web.SockSite(self._runner, sock).start()
        log.info("web UI on http://%s:%d/", self._host, self.bound_port)

    async def _shutdown(self) -> None:
        self._closing = True
        self._wake_all()
        if self._runner is not None:
            await self._runner.cleanup()

    def _wake_all(self) -> None:
        wake, self._wake = self._wake, asyncio.Event()
        if wake is not None:
            wake.set()

    # -- handlers -------------------------------------------------------------------------

    async def _page(self, request: web.Request) -> web.FileResponse:
        return web.FileResponse(STATIC / "index.html", headers={"Cache-Control": "no-cache"})

    async def _cluster(self, request: web.Request) -> web.Response:
        return _json(self._view.cluster())

    async def _replicas(self, request: web.Request) -> web.Response:
        return _json(self._view.cluster()["replicas"])

    async def _epochs(self, request: web.Request) -> web.Response:
        return _json(self._view.epochs())

    async def _topologies(self, request: web.Request) -> web.Response:
        return _json(self._view.topologies())

    async def _topology(self, request: web.Request) -> web.Response:
        name = request.match_info["name"]
        detail = self._view.topology(name)
        if detail is None:
            return _json({"error": f"no live topology named {name!r}"}, status=404)
        return _json(detail)

    async def _supervisors(self, request: web.Request) -> web.Response:
        return _json(self._view.supervisors())

    async def _events(self, request: web.Request) -> web.StreamResponse:
        """Server-sent events: ``cluster`` snapshots, or ``topology`` ones with ?topology=."""
        name = request.query.get("topology")
        response = web.StreamResponse(
            headers={
                "Content-Type": "text/event-stream",
                "Cache-Control": "no-store",
                "X-Accel-Buffering": "no",
            }
        )
        await response.prepare(request)
        try:
            await response.write(b"retry: 1000\n\n")
            while not self._closing:
                wake = self._wake
                body: dict[str, Any] | None
                if name is None:
                    kind, body = "cluster", self._view.cluster()
                else:
                    kind, body = "topology", self._view.topology(name)
                data = json.dumps(body, separators=(",", ":"))
                await response.write(f"event: {kind}\ndata: {data}\n\n".encode())
                await asyncio.sleep(MIN_GAP_S)
                if wake is not None and not self._closing:
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(wake.wait(), PERIOD_S)
        except ConnectionResetError:
            pass  # the browser went away
        return response


@web.middleware
async def _security_headers(request: web.Request, handler: Any) -> web.StreamResponse:
    response: web.StreamResponse = await handler(request)
    if not response.prepared:
        response.headers.update(_HEADERS)
    return response
