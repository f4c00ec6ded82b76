"""A real headless browser (Debian's chromium) driven over the Chrome DevTools Protocol.

Why CDP and not ``--dump-dom``/``--screenshot``: the protocol reports every request the page makes
(Network.requestWillBeSent, whatever its scheme or outcome) and every console error, uncaught
exception and browser-side error (CSP refusals, failed loads: Runtime.consoleAPICalled,
Runtime.exceptionThrown, Log.entryAdded) as events, so a test can assert there were none; the
dump/screenshot switches only give the result. The client is a few lines on aiohttp's WebSocket
(already a dependency): chromium is started with ``--remote-debugging-port=0`` and says on
stderr where it listens.
"""
from __future__ import annotations

import asyncio
import base64
import itertools
import json
import re
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

CHROMIUM = "chromium"
START_TIMEOUT = 90.0  # the machine may be loaded: chromium's start-up is slow then
_LISTENING = re.compile(r"DevTools listening on (ws://[^\s]+)")

#: Per figure: its SVG's size on screen and how many drawn shapes it has.
CHART_PROBE = """
[...document.querySelectorAll('figure svg')].map(svg => {
  const box = svg.getBoundingClientRect(), style = getComputedStyle(svg);
  return {width: box.width, height: box.height, shapes: svg.querySelectorAll('path, rect, use, polyline').length,
          shown: style.display !== 'none' && style.visibility === 'visible' && Number(style.opacity) > 0};
})
"""


@dataclass
class PageLoad:
    """What happened while a page loaded."""

    requests: list[str] = field(default_factory=list)  #: every URL the page asked for (the page itself too)
    errors: list[str] = field(default_factory=list)  #: console errors, exceptions, browser log errors
    charts: list[dict[str, Any]] = field(default_factory=list)  #: CHART_PROBE's result
    title: str = ""
    screenshot: bytes = b""
    probed: Any = None  #: the value of the caller's ``probe`` expression

    def requests_besides(self, url: str) -> list[str]:
        return [request for request in self.requests if request != url]


def require_chromium() -> str:
    path = shutil.which(CHROMIUM)
    if path is None:
        raise RuntimeError("chromium is not installed: run scripts/setup.sh (it installs Debian's chromium)")
    return path


class _Cdp:
    """One WebSocket to a page target: commands by id, events collected."""

    def __init__(self, ws: aiohttp.ClientWebSocketResponse, load: PageLoad) -> None:
        self._ws, self._load = ws, load
        self._ids = itertools.count(1)
        self._answers: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self.loaded = asyncio.Event()
        self._reader = asyncio.create_task(self._read())

    async def call(self, method: str, **params: Any) -> dict[str, Any]:
        number = next(self._ids)
        answer = self._answers[number] = asyncio.get_running_loop().create_future()
        await self._ws.send_str(json.dumps({"id": number, "method": method, "params": params}))
        reply = await asyncio.wait_for(answer, START_TIMEOUT)
        if "error" in reply:
            raise RuntimeError(f"{method}: {reply['error']}")
        return reply.get("result", {})

    async def _read(self) -> None:
        async for message in self._ws:
            data = json.loads(message.data)
            if "id" in data and data["id"] in self._answers:
                self._answers.pop(data["id"]).set_result(data)
            else:
                self._event(data.get("method", ""), data.get("params", {}))

    def _event(self, method: str, params: dict[str, Any]) -> None:
        match method:
            case "Network.requestWillBeSent":
                self._load.requests.append(params["request"]["url"])
            case "Runtime.consoleAPICalled" if params.get("type") in ("error", "assert"):
                texts = [str(arg.get("value", arg.get("description", ""))) for arg in params.get("args", [])]
                self._load.errors.append("console: " + " ".join(texts))
            case "Runtime.exceptionThrown":
                self._load.errors.append("exception: " + params["exceptionDetails"].get("text", ""))
            case "Log.entryAdded" if params["entry"].get("level") == "error":
                self._load.errors.append(f"log: {params['entry'].get('text', '')} {params['entry'].get('url', '')}")
            case "Page.loadEventFired":
                self.loaded.set()

    async def close(self) -> None:
        self._reader.cancel()
        await self._ws.close()


async def _devtools_url(process: asyncio.subprocess.Process) -> str:
    assert process.stderr is not None
    async with asyncio.timeout(START_TIMEOUT):
        while True:
            line = await process.stderr.readline()
            if not line:
                raise RuntimeError("chromium exited before its DevTools endpoint was up")
            found = _LISTENING.search(line.decode(errors="replace"))
            if found:
                return found.group(1)


async def _drain(process: asyncio.subprocess.Process) -> None:
    assert process.stderr is not None
    while await process.stderr.read(65536):
        pass  # keep chromium's stderr pipe from filling up


async def load(page: Path | str, width: int = 1200, height: int = 900, settle_s: float = 0.5,
               probe: str | None = None) -> PageLoad:
    """Open ``page`` (a local file, or a URL) in headless chromium; what it requested, logged, drew,
    and the value of the JavaScript expression ``probe`` evaluated in it (by the test, not the page)."""
    result = PageLoad()
    with tempfile.TemporaryDirectory(prefix="chromium-") as profile:
        process = await asyncio.create_subprocess_exec(
            require_chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
            "--disable-background-networking", "--disable-component-update", "--disable-sync",
            "--disable-extensions", f"--user-data-dir={profile}", "--remote-debugging-port=0",
            f"--window-size={width},{height}", "about:blank",
            stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE)
        try:
            browser_url = await _devtools_url(process)
            drain = asyncio.create_task(_drain(process))
            port = browser_url.split(":")[2].split("/")[0]
            async with aiohttp.ClientSession() as session:
                async with session.get(f"http://127.0.0.1:{port}/json/list") as answer:
                    targets = await answer.json()
                page_ws = next(t["webSocketDebuggerUrl"] for t in targets if t.get("type") == "page")
                async with session.ws_connect(page_ws, max_msg_size=0) as ws:
                    await _drive(_Cdp(ws, result), page, settle_s, result, probe)
            drain.cancel()
        finally:
            if process.returncode is None:
                process.kill()
            await process.wait()
    return result


async def _drive(cdp: _Cdp, page: Path | str, settle_s: float, result: PageLoad, probe: str | None) -> None:
    for domain in ("Page", "Runtime", "Log", "Network"):
        await cdp.call(f"{domain}.enable")
    await cdp.call("Page.navigate", url=page if isinstance(page, str) else page.resolve().as_uri())
    await asyncio.wait_for(cdp.loaded.wait(), START_TIMEOUT)
    await asyncio.sleep(settle_s)  # late errors or requests (timers, lazy loads) are seen too
    charts = await cdp.call("Runtime.evaluate", expression=CHART_PROBE, returnByValue=True)
    result.charts = charts["result"].get("value") or []
    title = await cdp.call("Runtime.evaluate", expression="document.title", returnByValue=True)
    result.title = title["result"].get("value", "")
    if probe is not None:
        probed = await cdp.call("Runtime.evaluate", expression=probe, returnByValue=True)
        result.probed = probed["result"].get("value")
    shot = await cdp.call("Page.captureScreenshot", format="png", captureBeyondViewport=True)
    result.screenshot = base64.b64decode(shot["data"])
    await cdp.close()
