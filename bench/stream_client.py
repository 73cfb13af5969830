"""A lab session without a browser: it speaks Streamlit's own websocket protocol (issue 38).

A class's browsers run on the students' own machines, so what the server owes each student is the
time from a click arriving to the last message of the step it asked for. On a benchmark machine
Chromium would take that machine's cores too (fifteen times the server's CPU per click, bench/RESULTS.md
§7), so bench/classroom.py plays most of a class with this client and keeps real browsers for a few.

The client does what the lab's page does over the socket, and nothing else:
- it opens `/_stcore/stream` with the `streamlit` subprotocol (and, behind HAProxy, the cookie the
  balancer set on its first answer, so every message reaches the session's own process);
- it asks for a run of the page (a `rerun_script` BackMsg with the page's query string);
- a click is another `rerun_script` that carries the button's trigger and the fragment the button
  was drawn in, as the browser sends it;
- it keeps the messages the server marked cacheable and names them on every rerun, as the browser
  does, so the server sends a reference rather than a figure the client already holds.
A click counts as settled when the run it started has finished and a heading showed the new step.
"""

from __future__ import annotations

import asyncio
import re
import time
import urllib.request
from dataclasses import dataclass, field

from streamlit.proto.BackMsg_pb2 import BackMsg
from streamlit.proto.ClientState_pb2 import ClientState
from streamlit.proto.ForwardMsg_pb2 import ForwardMsg
from streamlit.proto.WidgetStates_pb2 import WidgetState
from websockets.asyncio.client import ClientConnection, connect

EARLY = ForwardMsg.ScriptFinishedStatus.FINISHED_EARLY_FOR_RERUN  # a run st.rerun() cut short; another follows
TIMEOUT_S = 300.0  # the longest a run may go quiet: a link replaying hundreds of steps


def _cookie(url: str) -> str:
    """The balancer's affinity cookie from a first plain request ('' from a lab process alone)."""
    with urllib.request.urlopen(url, timeout=60) as answer:
        return "; ".join(c.split(";", 1)[0] for c in answer.headers.get_all("Set-Cookie") or [])


@dataclass
class Button:
    widget_id: str
    fragment_id: str  # '' when the button is not inside a fragment


@dataclass
class HeadlessSession:
    """One student's session on the lab, driven over the socket."""

    socket: ClientConnection
    query: str
    buttons: dict[str, Button] = field(default_factory=dict)  # by the key the app gave the button
    texts: list[str] = field(default_factory=list)  # headings and Markdown of the latest run
    cached: dict[str, ForwardMsg] = field(default_factory=dict)  # cacheable messages, by hash

    @classmethod
    async def open(cls, url: str, query: str = "") -> HeadlessSession:
        """Connect to the lab at url and run its page once (query: the address's query string)."""
        headers = {"Origin": url}
        cookie = _cookie(url)
        if cookie:
            headers["Cookie"] = cookie
        stream = url.replace("http://", "ws://", 1) + "/_stcore/stream"
        socket = await connect(stream, subprotocols=["streamlit"], additional_headers=headers, max_size=None)
        session = cls(socket, query)
        await session._run(ClientState(query_string=query))
        return session

    async def click(self, key: str, shows: str) -> float:
        """Click the button keyed `key`; ms until its run finished with a heading matching `shows`."""
        button = self.buttons[key]
        state = ClientState(query_string=self.query, fragment_id=button.fragment_id)
        state.widget_states.widgets.append(WidgetState(id=button.widget_id, trigger_value=True))
        start = time.perf_counter()
        await self._run(state)
        pattern = re.compile(rf"^#*\s*{shows}\b")
        if not any(pattern.match(text) for text in self.texts):
            raise AssertionError(f"the run after clicking {key!r} showed no heading {shows!r}")
        return (time.perf_counter() - start) * 1000

    async def close(self) -> None:
        await self.socket.close()

    async def _run(self, state: ClientState) -> None:
        """Send one rerun and read the server's messages until that run (and any st.rerun after it) ends."""
        state.cached_message_hashes.extend(self.cached)
        await self.socket.send(BackMsg(rerun_script=state).SerializeToString())
        self.texts = []
        while True:
            async with asyncio.timeout(TIMEOUT_S):  # a server that stops answering is named, not waited on forever
                data = await self.socket.recv()
            msg = ForwardMsg()
            msg.ParseFromString(data)
            if msg.WhichOneof("type") == "ref_hash":  # a message this client already holds
                msg = self.cached[msg.ref_hash]
            elif msg.metadata.cacheable:
                self.cached[msg.hash] = msg
            kind = msg.WhichOneof("type")
            if kind == "delta":
                self._read(msg)
            elif kind == "script_finished" and msg.script_finished != EARLY:
                return

    def _read(self, msg: ForwardMsg) -> None:
        """Note the buttons and the text a delta draws."""
        delta = msg.delta
        if delta.WhichOneof("type") != "new_element":
            return
        element = delta.new_element
        kind = element.WhichOneof("type")
        if kind == "button":
            key = element.button.id.rsplit("-", 1)[-1]  # a keyed widget's id ends with its key
            self.buttons[key] = Button(element.button.id, delta.fragment_id)
        elif kind in ("heading", "markdown"):
            self.texts.append(getattr(element, kind).body)
