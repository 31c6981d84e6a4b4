"""connop from Python: one connect on the card path, answered from another thread."""

import json
import threading

import connop


class Gateway:
    """Any object with the original client's three methods is a tool gateway."""

    def list_connectors(self, *, timeout=None):
        return [{"connector": "gmail", "enabled": True, "connected": False},
                {"connector": "notion", "enabled": True, "connected": False}]

    def connections(self, connectors, *, reinitiate=False, return_to=None, op=None):
        return {"results": [{"connector": name, "status": "initiated",
                             "connect_url": f"https://connect.example/{name}",
                             "connection_id": f"ca_{name}"} for name in connectors]}

    def account_status(self, connection_id, *, timeout=None):
        connector = connection_id[len("ca_"):]
        status = "active" if connector == "gmail" else "pending"
        return {"connectionId": connection_id, "connector": connector, "status": status}


def show_card(card):
    # The card: links for the person. Here another thread plays the person and skips notion.
    print("card:", [(t["name"], t["connect_url"]) for t in card["targets"]])

    def skip_notion():
        operation = connop.current("chat-1")
        operation.respond({"targets": [{"name": "notion", "status": "skipped"}]})

    threading.Timer(0.1, skip_notion).start()


result = connop.manage_connections(
    {"action": "connect", "connectors": ["gmail", "notion"]},
    session_key="chat-1", gateway=Gateway(), surface="desktop", on_card=show_card, tick=0.05)
result = json.loads(result)
print(result["settled_by"], [(t["name"], t["state"]) for t in result["targets"]])
