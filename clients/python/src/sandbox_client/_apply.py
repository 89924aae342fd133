"""Server-side apply bodies the API server takes whatever characters their strings hold.

The Rust crate's ``sandbox_api::apply`` is the rule; this is the same rule. An apply body is sent
as ``application/apply-patch+yaml`` and decoded by a YAML parser, which refuses DEL, the C1
controls and U+FFFE/U+FFFF raw, folds NEL, U+2028 and U+2029 as line breaks, and refuses escaped
surrogate pairs (which ``json.dumps``' default ASCII output makes of every astral character).
"""
from __future__ import annotations

import json
from typing import Any


def yaml_keeps(c: str) -> bool:
    """Whether the API server's YAML parser keeps ``c``, raw in a double-quoted scalar, as it is."""
    o = ord(c)
    printable = (
        c in "\t\n\r"
        or 0x20 <= o <= 0x7E
        or 0xA0 <= o <= 0xD7FF
        or 0xE000 <= o <= 0xFFFD
        or 0x10000 <= o <= 0x10FFFF
    )
    return printable and o not in (0x2028, 0x2029, 0xFEFF)


def apply_body(value: Any) -> bytes:
    """``value`` as UTF-8 JSON that YAML parsers decode to the same value. Every character YAML
    would not keep is a ``\\uXXXX`` escape (all are in the Basic Multilingual Plane, and never JSON
    syntax, so each is inside a string)."""
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    if not all(yaml_keeps(c) for c in text):
        text = "".join(c if yaml_keeps(c) else f"\\u{ord(c):04x}" for c in text)
    return text.encode("utf-8")


def apply(api_client: Any, group: str, version: str, namespace: str, plural: str, name: str,
          value: Any, field_manager: str, dry_run: bool = False) -> Any:
    """A server-side apply of ``value`` with the body :func:`apply_body` makes. The generated
    ``patch_namespaced_custom_object`` takes only a dict (and ``json.dumps`` it), so this builds
    the same request one layer down; errors are raised as the generated method raises them
    (``ApiException``)."""
    query = [("fieldManager", field_manager)] + ([("dryRun", "All")] if dry_run else [])
    params = api_client.param_serialize(
        method="PATCH",
        resource_path="/apis/{group}/{version}/namespaces/{namespace}/{plural}/{name}",
        path_params={"group": group, "version": version, "namespace": namespace,
                     "plural": plural, "name": name},
        query_params=query,
        header_params={"Content-Type": "application/apply-patch+yaml",
                       "Accept": "application/json"},
        body=apply_body(value),
        auth_settings=["BearerToken"],
    )
    response = api_client.call_api(*params)
    response.read()
    return api_client.response_deserialize(
        response_data=response, response_types_map={"200": "object", "201": "object"},
    ).data
