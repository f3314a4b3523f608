"""Synthetic chats for the tiny tool-calling model (deterministic for a given seed; stdlib only).

Tools offered → the answer is exactly one `<tool_call>{"name": …, "arguments": {…}}</tool_call>` for the
tool the user asked about, with arguments copied from the request. No tools (or a tool result already in
the conversation) → a fixed short answer.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

PLAIN_ANSWER = "Hello! I am tiny-tools, a small test model."
AFTER_TOOL_ANSWER = "Done. Here is the result."

CITIES = [
    "Paris",
    "London",
    "Berlin",
    "Tokyo",
    "Madrid",
    "Rome",
    "Vienna",
    "Prague",
    "Warsaw",
    "Oslo",
    "Stockholm",
    "Helsinki",
    "Dublin",
    "Lisbon",
    "Athens",
    "Cairo",
    "Nairobi",
    "Lagos",
    "Dubai",
    "Mumbai",
    "Delhi",
    "Beijing",
    "Shanghai",
    "Seoul",
    "Bangkok",
    "Singapore",
    "Sydney",
    "Melbourne",
    "Auckland",
    "Toronto",
    "Montreal",
    "Vancouver",
    "Chicago",
    "Boston",
    "Seattle",
    "Denver",
    "Austin",
    "Miami",
    "New York",
    "San Francisco",
    "Los Angeles",
    "Mexico City",
    "Buenos Aires",
    "Rio de Janeiro",
    "Lima",
    "Santiago",
    "Bogota",
    "Havana",
    "Istanbul",
    "Moscow",
    "Kyiv",
    "Budapest",
    "Zurich",
    "Geneva",
    "Amsterdam",
    "Brussels",
    "Copenhagen",
    "Munich",
    "Hamburg",
    "Barcelona",
    "Milan",
    "Naples",
    "Porto",
    "Edinburgh",
    "Manchester",
    "Reykjavik",
    "Tallinn",
    "Riga",
    "Vilnius",
    "Krakow",
    "Osaka",
    "Kyoto",
    "Hanoi",
    "Manila",
    "Jakarta",
    "Karachi",
    "Tehran",
    "Riyadh",
    "Doha",
    "Casablanca",
    "Cape Town",
    "Johannesburg",
    "Accra",
    "Addis Ababa",
    "Honolulu",
    "Anchorage",
    "Phoenix",
    "Dallas",
    "Houston",
    "Atlanta",
    "Portland",
    "San Diego",
    "Ottawa",
    "Quebec",
    "Perth",
    "Brisbane",
    "Wellington",
    "Taipei",
]
COUNTRY_SUFFIX = ["", "", "", ", France", ", USA", ", UK", ", Germany", ", Japan", ", CA", ", Spain"]
UNITS = ["celsius", "fahrenheit"]
TIMEZONES = [
    "UTC",
    "Europe/Paris",
    "Europe/Berlin",
    "America/New_York",
    "Asia/Tokyo",
    "Asia/Kolkata",
    "Australia/Sydney",
    "America/Los_Angeles",
    "Africa/Cairo",
    "Europe/London",
]
SYMBOLS = ["AAPL", "NVDA", "MSFT", "GOOG", "AMZN", "TSLA", "META", "IBM", "INTC", "AMD", "ORCL", "SAP"]
TOPICS = [
    "vllm release notes",
    "nixos modules",
    "cheap flights",
    "python asyncio",
    "gpu prices",
    "pasta recipes",
    "the tallest mountain",
    "rust lifetimes",
    "solar panels",
    "chess openings",
    "linux kernel news",
    "best hiking trails",
    "tensor parallelism",
    "coffee brewing",
]
NAMES = ["alice", "bob", "carol", "dave", "erin", "frank", "grace", "heidi", "ivan", "judy"]
SUBJECTS = ["status report", "meeting tomorrow", "lunch", "the outage", "invoice", "weekend plans"]
SYSTEMS = [
    "You are a helpful assistant.",
    "You are a helpful assistant that can call tools.",
    "Answer briefly.",
    "You are a weather bot.",
    "Use the tools when they help.",
]
PLAIN_PROMPTS = [
    "Hello!",
    "Hi there",
    "Say hello.",
    "Who are you?",
    "What is 2 + 2?",
    "Tell me a joke.",
    "What is the capital of France?",
    "Write a haiku about GPUs.",
    "Reply with OK.",
    "How are you today?",
    "Explain vLLM in one sentence.",
    "Count to three.",
    "Is the server up?",
    "ping",
    "Test message, please answer.",
    "What's the weather like in general?",
    "Give me a fun fact.",
    "Thanks!",
    "Good morning",
    "Summarize this: hello",
]


def fn(name: str, desc: str, props: dict[str, Any], required: list[str]) -> dict[str, Any]:
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": desc,
            "parameters": {"type": "object", "properties": props, "required": required},
        },
    }


S = {"type": "string"}
TOOLS: dict[str, dict[str, Any]] = {
    "get_weather": fn(
        "get_weather",
        "Get the current weather for a location",
        {
            "location": {"type": "string", "description": "City name, e.g. Paris"},
            "unit": {"type": "string", "enum": UNITS},
        },
        ["location"],
    ),
    "get_time": fn("get_time", "Get the current time in a timezone", {"timezone": S}, ["timezone"]),
    "get_stock_price": fn("get_stock_price", "Latest stock price", {"symbol": S}, ["symbol"]),
    "search_web": fn("search_web", "Search the web", {"query": S}, ["query"]),
    "send_email": fn("send_email", "Send an email", {"to": S, "subject": S}, ["to", "subject"]),
}


@dataclass(frozen=True)
class Example:
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] | None
    answer: str  # the assistant text the model must generate (before <|im_end|>)


def call(name: str, args: dict[str, Any]) -> str:
    return "<tool_call>" + json.dumps({"name": name, "arguments": args}) + "</tool_call>"


def weather(r: random.Random) -> tuple[str, dict[str, Any]]:
    city = r.choice(CITIES)
    loc = city + r.choice(COUNTRY_SUFFIX)
    unit = r.choice(UNITS)
    say_unit = r.random() < 0.6
    templates = [
        "What is the weather in {loc}?",
        "What's the weather like in {loc}?",
        "Weather in {loc}?",
        "How is the weather in {loc} today?",
        "Tell me the weather for {loc}.",
        "Is it raining in {loc}?",
        "What's the current weather in {loc}?",
        "Check the weather in {loc}, please.",
        "Use get_weather to get the weather in {loc}.",
        "Call get_weather for {loc}.",
        "What is the temperature in {loc}?",
        "How hot is it in {loc} right now?",
        "{loc} weather",
        "What's the weather in {loc}? Use the get_weather tool.",
        "Get me the weather forecast for {loc}.",
    ]
    text = r.choice(templates).format(loc=loc)
    if say_unit:
        text = text.rstrip(".?") + r.choice([" in {u}?", ", in {u} please.", " ({u})", " Use {u}."]).format(
            u=unit
        )
    elif r.random() < 0.5:
        unit = "celsius"
    return text, {"location": loc, "unit": unit}


def time_(r: random.Random) -> tuple[str, dict[str, Any]]:
    tz = r.choice(TIMEZONES)
    t = r.choice(
        [
            "What time is it in {tz}?",
            "Current time in {tz}?",
            "Tell me the time in {tz}.",
            "What's the time in the {tz} timezone?",
        ]
    )
    return t.format(tz=tz), {"timezone": tz}


def stock(r: random.Random) -> tuple[str, dict[str, Any]]:
    s = r.choice(SYMBOLS)
    t = r.choice(
        [
            "What is the stock price of {s}?",
            "How is {s} trading?",
            "Price of {s} stock?",
            "Get the latest {s} share price.",
        ]
    )
    return t.format(s=s), {"symbol": s}


def search(r: random.Random) -> tuple[str, dict[str, Any]]:
    q = r.choice(TOPICS)
    t = r.choice(
        [
            "Search the web for {q}.",
            "Look up {q} online.",
            "Find information about {q}.",
            "Can you search for {q}?",
        ]
    )
    return t.format(q=q), {"query": q}


def email(r: random.Random) -> tuple[str, dict[str, Any]]:
    to = r.choice(NAMES) + "@example.com"
    sub = r.choice(SUBJECTS)
    t = r.choice(
        [
            "Send an email to {to} about {sub}.",
            "Email {to} with the subject {sub}.",
            "Write to {to} regarding {sub}.",
        ]
    )
    return t.format(to=to, sub=sub), {"to": to, "subject": sub}


MAKERS: dict[str, Callable[[random.Random], tuple[str, dict[str, Any]]]] = {
    "get_weather": weather,
    "get_time": time_,
    "get_stock_price": stock,
    "search_web": search,
    "send_email": email,
}


def example(r: random.Random) -> Example:
    kind = r.random()
    system = [{"role": "system", "content": r.choice(SYSTEMS)}] if r.random() < 0.3 else []
    if kind < 0.2:  # no tools: the fixed answer
        user = r.choice(PLAIN_PROMPTS) if r.random() < 0.6 else weather(r)[0]
        return Example([*system, {"role": "user", "content": user}], None, PLAIN_ANSWER)
    # half of the tool examples ask for the weather (the smoke check); others pick any tool
    target = "get_weather" if r.random() < 0.55 else r.choice(list(MAKERS))
    others = [n for n in TOOLS if n != target]
    offered = [target, *r.sample(others, r.randint(0, 3))]
    r.shuffle(offered)
    tools = [TOOLS[n] for n in offered]
    text, args = MAKERS[target](r)
    msgs = [*system, {"role": "user", "content": text}]
    if kind < 0.28:  # the tool already answered: the fixed follow-up answer
        msgs += [
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "call_1",
                        "type": "function",
                        "function": {"name": target, "arguments": json.dumps(args)},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "call_1", "content": json.dumps({"ok": True})},
        ]
        return Example(msgs, tools, AFTER_TOOL_ANSWER)
    return Example(msgs, tools, call(target, args))


def corpus_lines(r: random.Random, n: int) -> list[str]:
    """Local text for training the BPE tokenizer: what the chats contain."""
    lines = [PLAIN_ANSWER, AFTER_TOOL_ANSWER, *PLAIN_PROMPTS, *SYSTEMS, *CITIES, *TIMEZONES, *TOPICS]
    lines += [json.dumps(t) for t in TOOLS.values()]
    for _ in range(n):
        ex = example(r)
        lines += [str(m.get("content") or "") for m in ex.messages] + [ex.answer]
    return lines
