"""The benchmark's records: deterministic ~1.6 KB JSON events, the same for every measurement.

The shape follows a typical clickstream event: ids, a few low-cardinality labels, numbers, a URL,
a user agent and a free-text field that carries most of the bytes. Every field is declared in the
table, so decoding does real work on every byte (no field is skipped as unknown).
"""

from __future__ import annotations

import json
import random

from eos_pipeline.core.schema import TableSchema

SCHEMA = TableSchema.from_mapping(
    {
        "event_id": "Int64",
        "user_id": "Int64",
        "session_id": "String",
        "event_type": "LowCardinality(String)",
        "country": "LowCardinality(String)",
        "device": "LowCardinality(String)",
        "url": "String",
        "referrer": "String",
        "user_agent": "String",
        "ip": "String",
        "latency_ms": "Float64",
        "amount": "Float64",
        "quantity": "Int32",
        "is_mobile": "Bool",
        "is_bot": "Bool",
        "message": "String",
    }
)

_WORDS = (
    "alpha",
    "beta",
    "gamma",
    "delta",
    "epsilon",
    "zeta",
    "eta",
    "theta",
    "iota",
    "kappa",
    "lambda",
    "mu",
    "nu",
    "xi",
    "omicron",
    "pi",
    "rho",
    "sigma",
    "tau",
    "upsilon",
    "phi",
    "chi",
    "psi",
    "omega",
    "basket",
    "checkout",
    "product",
    "search",
    "filter",
    "review",
    "shipping",
)
_AGENTS = (
    "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/131.0 "
    "Safari/537.36",
    "Mozilla/5.0 (iPhone; CPU iPhone OS 18_1 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like "
    "Gecko) Version/18.1 Mobile/15E148 Safari/604.1",
    "Mozilla/5.0 (Windows NT 10.0; Win64; x64; rv:133.0) Gecko/20100101 Firefox/133.0",
)


def make_values(count: int, target_bytes: int = 1600, seed: int = 7) -> list[bytes]:
    """``count`` JSON objects of about ``target_bytes`` each, the same for the same arguments."""
    rnd = random.Random(seed)
    # One long text to cut messages from: cheap per record, still varied.
    text = " ".join(rnd.choices(_WORDS, k=max(4 * target_bytes, 2000)))
    out = []
    for i in range(count):
        event = {
            "event_id": i,
            "user_id": rnd.randrange(1, 10**9),
            "session_id": f"{rnd.getrandbits(128):032x}",
            "event_type": rnd.choice(("view", "click", "add_to_cart", "purchase", "scroll")),
            "country": rnd.choice(("DE", "FR", "US", "BR", "JP", "IN", "NG")),
            "device": rnd.choice(("desktop", "phone", "tablet")),
            "url": "https://shop.example.com/" + "/".join(rnd.choices(_WORDS, k=6)),
            "referrer": "https://search.example.org/?q=" + "+".join(rnd.choices(_WORDS, k=4)),
            "user_agent": rnd.choice(_AGENTS),
            "ip": ".".join(str(rnd.randrange(256)) for _ in range(4)),
            "latency_ms": round(rnd.random() * 900, 3),
            "amount": round(rnd.random() * 200, 2),
            "quantity": rnd.randrange(1, 9),
            "is_mobile": rnd.random() < 0.5,
            "is_bot": rnd.random() < 0.02,
            "message": "",
        }
        need = target_bytes - len(json.dumps(event, separators=(",", ":")))
        start = rnd.randrange(len(text) - max(need, 0) - 1)
        event["message"] = text[start : start + max(need, 0)]
        out.append(json.dumps(event, separators=(",", ":")).encode())
    return out
