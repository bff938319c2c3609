#!/usr/bin/env python3
"""Check JSON documents against the schemas of an OpenAPI 3.0 document.

    openapi-check.py [--lenient] OPENAPI.yaml FILE SCHEMA [FILE SCHEMA ...]
    openapi-check.py [--lenient] OPENAPI.yaml --index DIR

SCHEMA is an API path ("/vm.create": the schema of its request body) or a
reference ("#/components/schemas/VmInfo").  With --index, DIR/index lists
"FILE SCHEMA" per line (FILE relative to DIR).  Prints one line per file
and exits 1 when any fails.

What is checked: $ref, type (an integer is not a boolean), enum, format
ranges (int8 ... uint64), minimum/maximum/minLength, required, items, and
no unknown keys.  The document leaves additionalProperties unspecified on
nearly every object, which in JSON Schema means any key is allowed, and
Cloud Hypervisor's serde structs ignore keys they do not know: a misspelt
key ("read_only") would pass both and silently do nothing.  So an object
with "properties" is closed here unless its schema says
additionalProperties.  For responses (--lenient) unknown keys and nulls are
allowed: real answers carry both (see tests/fixtures/cloud-hypervisor).

Standard library and python3-yaml only.
"""
import json
import os
import sys

import yaml

RANGES = {"int8": (-2**7, 2**7 - 1), "int16": (-2**15, 2**15 - 1), "int32": (-2**31, 2**31 - 1),
          "int64": (-2**63, 2**63 - 1), "uint8": (0, 2**8 - 1), "uint16": (0, 2**16 - 1),
          "uint32": (0, 2**32 - 1), "uint64": (0, 2**64 - 1)}


class Checker:
    def __init__(self, doc, lenient=False):
        self.doc, self.lenient = doc, lenient

    def resolve(self, ref):
        if not ref.startswith("#/"):
            raise ValueError("unsupported $ref %s" % ref)
        node = self.doc
        for part in ref[2:].split("/"):
            node = node[part]
        return node

    def schema_for(self, name):
        if name.startswith("#/"):
            return self.resolve(name)
        op = self.doc["paths"][name]
        for method in ("put", "post", "patch"):
            if method in op:
                return op[method]["requestBody"]["content"]["application/json"]["schema"]
        raise ValueError("%s takes no request body" % name)

    def check(self, v, s, where, errs):
        while "$ref" in s:
            s = self.resolve(s["$ref"])
        if v is None and self.lenient:
            return
        t = s.get("type")
        if "enum" in s and v not in s["enum"]:
            errs.append("%s: %r is not one of %s" % (where, v, s["enum"]))
        if t == "object":
            if not isinstance(v, dict):
                errs.append("%s: expected an object, got %s" % (where, type(v).__name__))
                return
            for r in s.get("required", []):
                if r not in v:
                    errs.append("%s: required key %r missing" % (where, r))
            props, extra = s.get("properties", {}), s.get("additionalProperties")
            for k, val in v.items():
                if k in props:
                    self.check(val, props[k], "%s.%s" % (where, k), errs)
                elif isinstance(extra, dict):
                    self.check(val, extra, "%s.%s" % (where, k), errs)
                elif props and extra is not True and not self.lenient:
                    errs.append("%s: unknown key %r (the schema has %s)" % (where, k, ", ".join(sorted(props))))
        elif t == "array":
            if not isinstance(v, list):
                errs.append("%s: expected an array, got %s" % (where, type(v).__name__))
                return
            for i, item in enumerate(v):
                self.check(item, s.get("items", {}), "%s[%d]" % (where, i), errs)
        elif t == "integer":
            if not isinstance(v, int) or isinstance(v, bool):
                errs.append("%s: expected an integer, got %r" % (where, v))
                return
            lo, hi = RANGES.get(s.get("format"), (None, None))
            if lo is not None and not lo <= v <= hi:
                errs.append("%s: %d out of %s range" % (where, v, s["format"]))
            if "minimum" in s and v < s["minimum"]:
                errs.append("%s: %d below the minimum %d" % (where, v, s["minimum"]))
            if "maximum" in s and v > s["maximum"]:
                errs.append("%s: %d above the maximum %d" % (where, v, s["maximum"]))
        elif t == "number":
            if not isinstance(v, (int, float)) or isinstance(v, bool):
                errs.append("%s: expected a number, got %r" % (where, v))
        elif t == "string":
            if not isinstance(v, str):
                errs.append("%s: expected a string, got %r" % (where, v))
            elif len(v) < s.get("minLength", 0):
                errs.append("%s: shorter than %d" % (where, s["minLength"]))
        elif t == "boolean":
            if not isinstance(v, bool):
                errs.append("%s: expected a boolean, got %r" % (where, v))


def main(argv):
    lenient = "--lenient" in argv
    argv = [a for a in argv if a != "--lenient"]
    if len(argv) < 3:
        sys.stderr.write(__doc__)
        return 2
    with open(argv[1]) as f:
        doc = yaml.safe_load(f)
    if argv[2] == "--index":
        base = argv[3]
        pairs = []
        with open(os.path.join(base, "index")) as f:
            for line in f:
                name, schema = line.split()
                pairs.append((os.path.join(base, name), schema))
    else:
        if len(argv) % 2 != 0:
            sys.stderr.write(__doc__)
            return 2
        pairs = list(zip(argv[2::2], argv[3::2]))
    c, bad = Checker(doc, lenient), 0
    for path, schema in pairs:
        with open(path) as f:
            v = json.load(f)
        errs = []
        c.check(v, c.schema_for(schema), os.path.basename(path), errs)
        if errs:
            bad += 1
            print("FAIL %s (%s):" % (os.path.basename(path), schema))
            for e in errs:
                print("  " + e)
        else:
            print("ok %s (%s)" % (os.path.basename(path), schema))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
