"""The JSON Schemas of the API's bodies, inlined into its OpenAPI document (``spec/openapi.json``)."""

from __future__ import annotations

HEX32 = {"type": "string", "pattern": "^[0-9a-f]{64}$"}
IDENT = {"type": "string", "pattern": "^[A-Za-z0-9_.-]{1,64}$"}

SIGNED_REQUEST = {
    "type": "object",
    "description": "The account's signed request (spec/protocol.md §5.1): its signature covers every other field.",
    "required": ["type", "window", "account", "counter", "h_q", "h_qemb", "nonce", "sig"],
    "additionalProperties": False,
    "properties": {
        "type": {"const": "request"},
        "window": IDENT,
        "account": IDENT,
        "counter": {"type": "integer", "minimum": 1, "maximum": 2**53 - 1},
        "h_q": HEX32,
        "h_qemb": {"anyOf": [HEX32, {"type": "null"}]},
        "nonce": {"type": "string", "pattern": "^[0-9a-f]{32}$"},
        "sig": {"type": "string", "pattern": "^[0-9a-f]{128}$"},
    },
}

BODIES = {
    "Health": {
        "type": "object",
        "required": ["status"],
        "additionalProperties": False,
        "properties": {"status": {"enum": ["ok", "ready"]}},
    },
    "Submission": {
        "type": "object",
        "required": ["request", "question", "qemb"],
        "additionalProperties": False,
        "properties": {
            "request": SIGNED_REQUEST,
            "question": {"type": "string", "minLength": 1, "maxLength": 4096},
            "qemb": {"anyOf": [{"type": "string", "pattern": "^([0-9a-f]{4})*$"}, {"type": "null"}]},
        },
    },
    "Served": {
        "type": "object",
        "required": ["answer", "citations", "receipt", "pos"],
        "additionalProperties": False,
        "properties": {
            "answer": {"type": "string"},
            "citations": {"anyOf": [{"type": "array", "items": {"type": "integer", "minimum": 0}}, {"type": "null"}]},
            "receipt": {"type": "object", "description": "the provider's signed receipt (spec/protocol.md §5.4)"},
            "pos": {"type": "integer", "minimum": 1},
            "consistency": {"type": "object", "description": "with ?since=N: the RFC 6962 proof from N"},
        },
    },
    "Info": {
        "type": "object",
        "required": ["api", "window", "origin", "provider_key", "chain", "epoch", "tenants"],
        "additionalProperties": False,
        "properties": {
            "api": {"const": "dprag-http/1"},
            "window": IDENT,
            "origin": {"type": "string"},
            "provider_key": {"type": "string"},
            "chain": HEX32,
            "epoch": {"type": "integer", "minimum": 0},
            "tenants": {"type": "array", "items": IDENT},
        },
    },
    "Checkpoint": {
        "type": "object",
        "required": ["size", "note"],
        "additionalProperties": False,
        "properties": {"size": {"type": "integer", "minimum": 1}, "note": {"type": "string"}},
    },
    "Consistency": {"type": "object", "description": "audit.protocol.ledger.ConsistencyProof.to_json_dict()"},
    "Keys": {
        "type": "object",
        "description": "the provider's keys along the log (spec/protocol.md §3.3): genesis's, then each rotation with "
        "what a party holding the outgoing key needs to follow it (audit.protocol.provider_keys.follow)",
        "required": ["origin", "genesis_key", "rotations"],
        "additionalProperties": False,
        "properties": {
            "origin": {"type": "string"},
            "genesis_key": {"type": "string"},
            "rotations": {
                "type": "array",
                "items": {
                    "type": "object",
                    "required": ["chain", "pos", "leaf", "checkpoint", "inclusion"],
                    "additionalProperties": False,
                    "properties": {
                        "chain": {"type": "string"},
                        "pos": {"type": "integer", "minimum": 1},
                        "leaf": {"type": "string"},
                        "checkpoint": {"type": "string"},
                        "inclusion": {"type": "array", "items": {"type": "string"}},
                    },
                },
            },
        },
    },
    "Error": {
        "type": "object",
        "required": ["error"],
        "additionalProperties": False,
        "properties": {
            "error": {
                "type": "object",
                "required": ["type", "field", "rule"],
                "properties": {
                    "type": {
                        "enum": [
                            "refused",
                            "rate_limited",
                            "malformed",
                            "unauthenticated",
                            "not_found",
                            "method_not_allowed",
                            "too_large",
                            "answer_pending",
                            "store_unavailable",
                            "service_state",
                            "http_error",
                            "internal",
                        ]
                    },
                    "field": {"anyOf": [{"type": "string"}, {"type": "null"}]},
                    "rule": {"type": "string"},
                    "refusal": {"anyOf": [{"type": "object"}, {"type": "null"}]},
                    "pos": {"type": "integer"},
                },
            }
        },
    },
}

_STATUS = {
    400: "refused or malformed",
    401: "unauthenticated",
    404: "not found",
    413: "body too large",
    429: "rate limited (signed refusal)",
    503: "answer pending (answer_pending), store unavailable (store_unavailable) or no generation memory free before "
    "the charge (busy, nothing charged): retry the same request after Retry-After",
}


def request_body(name: str) -> dict[str, object]:
    return {"requestBody": {"required": True, "content": {"application/json": {"schema": BODIES[name]}}}}


def responses(ok: str, *errors: int) -> dict[int | str, dict[str, object]]:
    good: dict[str, object]
    if ok == "Archive":
        good = {"description": "a tar archive", "content": {"application/x-tar": {"schema": {"type": "string"}}}}
    else:
        good = {"description": "OK", "content": {"application/json": {"schema": BODIES[ok]}}}
    out: dict[int | str, dict[str, object]] = {200: good}
    for code in (*errors, 500):
        out[code] = {
            "description": _STATUS.get(code, "internal error"),
            "content": {"application/json": {"schema": BODIES["Error"]}},
        }
    return out
