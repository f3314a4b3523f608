"""The agent battery's environment: a small stateful office (calendar, inventory, files) behind tools.

State is plain JSON (`initial` in a task file). The tools of a domain are JSON-schema'd functions; a call
returns a JSON result, or `{"error": …}` for a bad call (unknown tool, arguments that break the schema,
an id that does not exist) — the model sees the error and may try again, as with a real API.

`canonical()` is what success is judged on, after τ-bench: the final state, with what a different but
equally good path may change left out (generated event and order ids, order of lists, trailing
whitespace of file lines).
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from typing import Any

import jsonschema

from vllm_station import bounded

DOMAINS = ("calendar", "inventory", "files")

S = {"type": "string"}
DATE = {"type": "string", "description": "YYYY-MM-DD"}
TIME = {"type": "string", "description": "HH:MM, 24-hour clock"}


def _fn(name: str, description: str, props: dict[str, Any], required: list[str]) -> dict[str, Any]:
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": description,
            "parameters": {"type": "object", "properties": props, "required": required},
        },
    }


TOOLS: dict[str, list[dict[str, Any]]] = {
    "calendar": [
        _fn("get_current_date", "Today's date (YYYY-MM-DD) and weekday", {}, []),
        _fn("list_events", "List calendar events, all or those on one date", {"date": DATE}, []),
        _fn(
            "create_event",
            "Create a calendar event",
            {"title": S, "date": DATE, "start": TIME, "duration_minutes": {"type": "integer", "minimum": 1}},
            ["title", "date", "start", "duration_minutes"],
        ),
        _fn("delete_event", "Delete a calendar event by its id", {"event_id": S}, ["event_id"]),
        _fn(
            "move_event",
            "Move an event to another date and start time (its duration stays)",
            {"event_id": S, "date": DATE, "start": TIME},
            ["event_id", "date", "start"],
        ),
    ],
    "inventory": [
        _fn("list_items", "All items: SKU, name and units in stock", {}, []),
        _fn("get_item", "One item by SKU", {"sku": S}, ["sku"]),
        _fn(
            "adjust_stock",
            "Change the units in stock of an item by delta (negative: units removed)",
            {"sku": S, "delta": {"type": "integer"}},
            ["sku", "delta"],
        ),
        _fn(
            "place_order",
            "Order units of an item from the supplier (stock changes when they arrive, not now)",
            {"sku": S, "quantity": {"type": "integer", "minimum": 1}},
            ["sku", "quantity"],
        ),
    ],
    "files": [
        _fn("list_files", "The paths of all files", {}, []),
        _fn("read_file", "A file's text", {"path": S}, ["path"]),
        _fn(
            "write_file",
            "Write a file's whole text (creates or replaces it)",
            {"path": S, "content": S},
            ["path", "content"],
        ),
        _fn("delete_file", "Delete a file", {"path": S}, ["path"]),
    ],
}


class ToolError(Exception):
    """A call the environment refuses; its message is the result the model sees."""


class Environment:
    """One domain's state and tools. `call(name, arguments_json)` returns the JSON text of the result."""

    def __init__(self, domain: str, state: dict[str, Any]) -> None:
        if domain not in DOMAINS:
            raise ValueError(f"unknown domain {domain!r}")
        self.domain = domain
        self.state = copy.deepcopy(state)
        self.tools = TOOLS[domain]
        self._schemas = {t["function"]["name"]: t["function"]["parameters"] for t in self.tools}
        self._impl: dict[str, Callable[..., Any]] = {
            "get_current_date": self._get_current_date,
            "list_events": self._list_events,
            "create_event": self._create_event,
            "delete_event": self._delete_event,
            "move_event": self._move_event,
            "list_items": self._list_items,
            "get_item": self._get_item,
            "adjust_stock": self._adjust_stock,
            "place_order": self._place_order,
            "list_files": self._list_files,
            "read_file": self._read_file,
            "write_file": self._write_file,
            "delete_file": self._delete_file,
        }

    def call(self, name: str | None, arguments: str) -> tuple[str, bool]:
        """(the result as JSON text, whether the call succeeded)."""
        try:
            if name is None or name not in self._schemas:
                raise ToolError(f"unknown tool {name!r}; the tools are {', '.join(self._schemas)}")
            try:
                args = bounded.loads_json(arguments) if arguments.strip() else {}
            except ValueError as exc:
                raise ToolError(f"the arguments are not JSON: {exc}") from None
            if not isinstance(args, dict):
                raise ToolError("the arguments must be a JSON object")
            schema = self._schemas[name]
            unknown = sorted(set(args) - set(schema.get("properties") or {}))
            if unknown:
                raise ToolError(f"{name} has no parameter {', '.join(map(repr, unknown))}")
            errors = list(jsonschema.Draft202012Validator(schema).iter_errors(args))
            if errors:
                raise ToolError(f"invalid arguments for {name}: {errors[0].message}")
            result = self._impl[name](**args)
        except ToolError as err:
            return json.dumps({"error": str(err)}), False
        return json.dumps(result, ensure_ascii=False), True

    # ---- calendar ----------------------------------------------------------------------------------
    def _get_current_date(self) -> dict[str, Any]:
        return {"date": self.state["today"], "weekday": self.state.get("weekday")}

    def _events(self) -> list[dict[str, Any]]:
        events: list[dict[str, Any]] = self.state["events"]
        return events

    def _find(self, event_id: str) -> dict[str, Any]:
        for ev in self._events():
            if ev["id"] == event_id:
                return ev
        raise ToolError(f"no event with id {event_id!r}")

    def _list_events(self, date: str | None = None) -> list[dict[str, Any]]:
        return [ev for ev in self._events() if date is None or ev["date"] == date]

    def _create_event(self, title: str, date: str, start: str, duration_minutes: int) -> dict[str, Any]:
        last = self.state.get("next_id", 100)  # a task file's initial state may hold anything
        n = (last if isinstance(last, int) and not isinstance(last, bool) else 100) + 1
        self.state["next_id"] = n
        ev = {
            "id": f"ev-{n}",
            "title": title,
            "date": date,
            "start": start,
            "duration_minutes": duration_minutes,
        }
        self._events().append(ev)
        return ev

    def _delete_event(self, event_id: str) -> dict[str, Any]:
        ev = self._find(event_id)
        self._events().remove(ev)
        return {"deleted": event_id}

    def _move_event(self, event_id: str, date: str, start: str) -> dict[str, Any]:
        ev = self._find(event_id)
        ev.update(date=date, start=start)
        return ev

    # ---- inventory ---------------------------------------------------------------------------------
    def _items(self) -> dict[str, dict[str, Any]]:
        items: dict[str, dict[str, Any]] = self.state["items"]
        return items

    def _item(self, sku: str) -> dict[str, Any]:
        if sku not in self._items():
            raise ToolError(f"no item with SKU {sku!r}")
        return self._items()[sku]

    def _list_items(self) -> list[dict[str, Any]]:
        return [{"sku": sku, **item} for sku, item in self._items().items()]

    def _get_item(self, sku: str) -> dict[str, Any]:
        return {"sku": sku, **self._item(sku)}

    def _adjust_stock(self, sku: str, delta: int) -> dict[str, Any]:
        item = self._item(sku)
        if item["stock"] + delta < 0:
            raise ToolError(f"{sku} has {item['stock']} units; cannot remove {-delta}")
        item["stock"] += delta
        return {"sku": sku, "stock": item["stock"]}

    def _place_order(self, sku: str, quantity: int) -> dict[str, Any]:
        self._item(sku)
        orders: list[dict[str, Any]] = self.state.setdefault("orders", [])
        order = {"order_id": f"po-{len(orders) + 1}", "sku": sku, "quantity": quantity}
        orders.append(order)
        return order

    # ---- files -------------------------------------------------------------------------------------
    def _files(self) -> dict[str, str]:
        files: dict[str, str] = self.state["files"]
        return files

    def _list_files(self) -> list[str]:
        return sorted(self._files())

    def _read_file(self, path: str) -> dict[str, Any]:
        if path not in self._files():
            raise ToolError(f"no file {path!r}")
        return {"path": path, "content": self._files()[path]}

    def _write_file(self, path: str, content: str) -> dict[str, Any]:
        self._files()[path] = content
        return {"written": path, "bytes": len(content.encode())}

    def _delete_file(self, path: str) -> dict[str, Any]:
        if path not in self._files():
            raise ToolError(f"no file {path!r}")
        del self._files()[path]
        return {"deleted": path}

    # ---- judging -----------------------------------------------------------------------------------
    def canonical(self) -> dict[str, Any]:
        """The state as success is judged: ids, list order and trailing whitespace left out."""
        s = self.state
        if self.domain == "calendar":
            events = sorted(
                (ev["title"].strip().lower(), ev["date"], ev["start"], ev["duration_minutes"])
                for ev in s["events"]
            )
            return {"events": [list(e) for e in events]}
        if self.domain == "inventory":
            orders = sorted((o["sku"], o["quantity"]) for o in s.get("orders", []))
            return {
                "stock": {k: v["stock"] for k, v in sorted(s["items"].items())},
                "orders": [list(o) for o in orders],
            }
        return {
            path: "\n".join(line.rstrip() for line in text.rstrip().split("\n"))
            for path, text in sorted(s["files"].items())
        }


def state_diff(got: dict[str, Any], want: dict[str, Any]) -> str:
    """A short account of how two canonical states differ."""
    parts: list[str] = []
    for key in sorted(set(got) | set(want)):
        if got.get(key) != want.get(key):
            have, should = (json.dumps(x.get(key), ensure_ascii=False) for x in (got, want))
            parts.append(f"{key}: {have} (expected {should})")
    text = "; ".join(parts)
    return text if len(text) <= 400 else text[:399] + "…"
