"""Checks the served OpenAPI document's examples against their own schemas (JSON Schema 2020-12,
`$ref`s resolved in the document), and that every operation with a JSON request body has at
least one example. Prints how many examples it checked.

Usage: python contract/examples.py openapi.json
"""

import json
import sys

from jsonschema import Draft202012Validator
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT202012

with open(sys.argv[1], encoding="utf-8") as file:
    document = json.load(file)
schemas = document["components"]["schemas"]
registry = Registry().with_resource(
    "urn:gpunex", Resource.from_contents(document, default_specification=DRAFT202012)
)


def validator(name):
    return Draft202012Validator({"$ref": f"urn:gpunex#/components/schemas/{name}"}, registry=registry)


checked = 0
problems = []
for name, schema in schemas.items():
    for index, example in enumerate(schema.get("examples", [])):
        for error in validator(name).iter_errors(example):
            where = "/".join(map(str, error.absolute_path))
            problems.append(f"{name} example {index} at /{where}: {error.message}")
        checked += 1

missing = []
for path, item in document["paths"].items():
    for method, operation in item.items():
        media = operation.get("requestBody", {}).get("content", {}).get("application/json")
        if media is None:
            continue
        ref = media.get("schema", {}).get("$ref", "")
        target = schemas.get(ref.rsplit("/", 1)[-1], {}) if ref else media.get("schema", {})
        if not (target.get("examples") or media.get("examples") or "example" in media):
            missing.append(f"{method.upper()} {path}")

print(
    f"examples: {checked} checked against their schemas, {len(problems)} invalid; "
    f"{len(missing)} JSON request bodies without one"
)
for line in problems + [f"no example: {m}" for m in missing]:
    print("  " + line, file=sys.stderr)
if problems or missing:
    sys.exit(1)
