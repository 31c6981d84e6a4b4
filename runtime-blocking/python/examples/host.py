"""A small agent host written from docs/python.md alone: a tool gateway object, a chat whose
turns call manage_connections, a card answered by "the user" on another thread, a turn
stopped by its Interrupt, and the mistakes a host can make refused at the call.

Run it against an installed connop (pip install ./runtime-blocking/python):

    python runtime-blocking/python/examples/host.py

It prints what happens and exits 0, or fails with the first thing that differs from the
documentation.
"""

import json
import threading

import connop


class ToolGateway:
    """The three methods of a gateway object, in the shapes the documentation gives: gmail
    connects on its second read, notion stays pending, calendar fails to mint."""

    def __init__(self):
        self.reads = {}
        self.lock = threading.Lock()

    def list_connectors(self, *, timeout=None):
        return [{"connector": name, "enabled": True, "connected": False}
                for name in ("gmail", "notion", "calendar")]

    def connections(self, connectors, *, reinitiate=False, return_to=None, op=None):
        results = []
        for name in connectors:
            if name == "calendar":
                results.append({"connector": name, "status": "failed",
                                "status_reason": "the vendor is down"})
            else:
                results.append({"connector": name, "status": "initiated",
                                "connect_url": f"https://connect.example/{name}",
                                "connection_id": f"acct-{name}"})
        return {"results": results}

    def account_status(self, connection_id, *, timeout=None):
        with self.lock:
            self.reads[connection_id] = self.reads.get(connection_id, 0) + 1
            nth = self.reads[connection_id]
        connector = connection_id.split("-", 1)[1]
        status = "active" if connector == "gmail" and nth >= 2 else "pending"
        return {"connectionId": connection_id, "connector": connector, "status": status}


class Chat:
    """One conversation: its session key, its card on screen, its stop button."""

    def __init__(self, key, gateway):
        self.key, self.gateway = key, gateway
        self.stop = connop.Interrupt()
        self.frames = []
        self.card = None

    def show_card(self, card):
        # Draw the card and return at once; the user answers later, from another thread.
        self.card = card
        print(f"[{self.key}] card:", [(t["name"], t["state"], t.get("connect_url"))
                                       for t in card["targets"]])

    def turn(self, args, surface="desktop"):
        self.stop.reset()  # a new turn
        out = connop.manage_connections(
            args, session_key=self.key, gateway=self.gateway, surface=surface,
            on_card=self.show_card, on_update=self.frames.append, tick=0.05, deadline=30.0,
            interrupt=self.stop, tool_call_id=f"call-{len(self.frames)}")
        return json.loads(out)


def expect(what, seen, wanted):
    if seen != wanted:
        raise SystemExit(f"{what}: expected {wanted!r}, got {seen!r}")
    print(f"ok  {what}: {seen!r}")


def user_answers(chat, answer, once):
    """The user, on the card's own thread: waits until ``once(frames)`` holds, then answers."""
    def act():
        for _ in range(1000):
            if chat.card is not None and once(list(chat.frames)):
                break
            threading.Event().wait(0.01)
        op = connop.current(chat.key)
        if op is None:
            return
        # Skips those named, and presses Continue for the rest.
        op.respond({"targets": [{"name": name, "status": "skipped"} for name in answer],
                    "settled_by": "continue"})
    thread = threading.Thread(target=act)
    thread.start()
    return thread


gateway = ToolGateway()

# 1. status: the gateway's rows, for the model.
chat = Chat("chat-1", gateway)
status = chat.turn({"action": "status"})
expect("status lists the connectors", [row["connector"] for row in status["connectors"]],
       ["gmail", "notion", "calendar"])

# 2. connect on the card: gmail connects by itself, calendar failed to mint, the user skips
#    notion and presses Continue.
gmail_connected = lambda frames: any(  # noqa: E731
    frame.get("target") == "gmail" and frame.get("to") == "connected" for frame in frames)
answering = user_answers(chat, ["notion"], once=gmail_connected)
result = chat.turn({"action": "connect", "connectors": ["gmail", "notion", "calendar"]})
answering.join()
expect("the call returned once settled", result["status"], "settled")
expect("how it settled", result["settled_by"], "continue")
expect("each target", [(t["name"], t["state"]) for t in result["targets"]],
       [("gmail", "connected"), ("notion", "skipped"), ("calendar", "not_connected")])
expect("no link reaches the model", "connect_url" in json.dumps(result), False)
expect("the last frame is the settle frame", chat.frames[-1]["settled"], True)

# The settled operation is still there for the UI, links included.
op = connop.get("chat-1", result["op_id"])
expect("get finds the settled operation", op is not None and op.settled, True)
expect("its view keeps the links", [t.get("connect_url") for t in op.view()["targets"]][:2],
       ["https://connect.example/gmail", "https://connect.example/notion"])

# 3. A card answer naming no target, or with a status not allowed, is refused.
open_op = connop.Registry.default().open("chat-2", ["notion"])
try:
    open_op.respond({"targets": [{"name": "notoin", "status": "skipped"}]})
    raise SystemExit("an unknown target was accepted")
except connop.InvalidAnswer as refused:
    expect("an unknown target is refused", "notoin" in str(refused), True)
try:
    open_op.respond({"targets": [{"name": "notion", "status": "connected"}]})
    raise SystemExit("a connected claim was accepted")
except connop.InvalidAnswer as refused:
    expect("the allowed statuses", connop.InvalidAnswer.allowed, ("skipped", "approved"))
open_op.settle(connop.SettleReason.continue_)

# 4. The stop button: a turn waiting on its card is interrupted from another thread.
chat3 = Chat("chat-3", gateway)
stopper = threading.Timer(0.3, chat3.stop.trigger)
stopper.start()
result = chat3.turn({"action": "connect", "connectors": ["notion"]})
expect("stopped", result["settled_by"], "interrupt")

# 5. Links on a chat platform: no card, the links in the result at once.
chat4 = Chat("chat-4", gateway)
result = chat4.turn({"action": "connect", "connectors": ["notion"]}, surface="messaging")
expect("links", (result["status"], chat4.card), ("initiated", None))

# 6. A host's mistakes are refused at the call, naming the argument.
for wrong, error in [(dict(surface="Desktop"), ValueError), (dict(gateway=None), TypeError),
                     (dict(on_card=5), TypeError), (dict(tick=-1), ValueError)]:
    kwargs = dict(session_key="chat-5", gateway=gateway, surface="desktop",
                  on_card=lambda card: None)
    kwargs.update(wrong)
    try:
        connop.manage_connections({"action": "status"}, **kwargs)
        raise SystemExit(f"{wrong} was accepted")
    except error as refused:
        expect(f"{next(iter(wrong))} refused", next(iter(wrong)) in str(refused), True)
try:
    connop.HttpGateway("https://gateway.example")
    raise SystemExit("an HttpGateway without a token was built")
except TypeError:
    print("ok  HttpGateway needs its token")

print("the host ran as documented")
