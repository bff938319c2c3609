#!/usr/bin/env python3
"""Check sbx's JSON output against docs/schema/ and docs/json.md.

  json-schema-check.py validate [--strict] [--lines] SCHEMA_DIR REF [FILE]
      Validate the JSON document in FILE (or standard input) against REF,
      a schema file in SCHEMA_DIR with an optional JSON pointer
      ("audit.json#/$defs/record").  --lines: every non-empty line is a
      document.  --strict: a member the schema does not declare is an
      error too, so an undocumented field fails the test suite.
  json-schema-check.py doc SCHEMA_DIR DOC
      Compare every table in DOC that follows a "<!-- schema: REF -->"
      marker with the schema: the same fields, types and presence.

Only the standard library: Debian's python3 has no jsonschema module.  The
validator here covers the keywords the schemas use (and refuses any other,
so a schema cannot quietly rely on one it ignores); where the jsonschema
module is installed, documents are checked by it too, and the schemas
against the draft 2020-12 metaschema.
"""
import json
import os
import re
import sys

KNOWN = {'$schema', '$id', '$defs', '$ref', 'title', 'description', 'type', 'const', 'enum', 'pattern',
         'minimum', 'maximum', 'properties', 'required', 'items', 'allOf', 'oneOf', 'if', 'then',
         'additionalProperties'}


class Schemas:
    def __init__(self, d):
        self.docs = {}
        for f in sorted(os.listdir(d)):
            if f.endswith('.json'):
                with open(os.path.join(d, f)) as fh:
                    self.docs[f] = json.load(fh)

    def resolve(self, ref, base):
        """(schema, file) for ref, relative to the file base."""
        name, _, ptr = ref.partition('#')
        name = os.path.basename(name) if name else base
        if name not in self.docs:
            raise KeyError('no schema file ' + name)
        node = self.docs[name]
        for part in [p for p in ptr.split('/') if p]:
            node = node[part.replace('~1', '/').replace('~0', '~')]
        return node, name


def type_ok(t, v):
    return {
        'object': isinstance(v, dict),
        'array': isinstance(v, list),
        'string': isinstance(v, str),
        'boolean': isinstance(v, bool),
        'null': v is None,
        'integer': isinstance(v, int) and not isinstance(v, bool),
        'number': isinstance(v, (int, float)) and not isinstance(v, bool),
    }[t]


class Validator:
    def __init__(self, schemas, strict):
        self.s = schemas
        self.strict = strict

    def check(self, sch, base, v, path):
        """Errors of v against sch, strictness included."""
        errs, allowed = self.node(sch, base, v, path)
        if self.strict and isinstance(v, dict) and allowed is not None:
            errs += ['%s: member "%s" is not in the schema' % (path, k) for k in v if k not in allowed]
        return errs

    def node(self, sch, base, v, path):
        """(errors, member names this schema declares for an object)."""
        errs, allowed = [], set()
        for k in sch:
            if k not in KNOWN:
                raise ValueError('%s: unsupported keyword %s' % (base, k))
        if '$ref' in sch:
            sub, b = self.s.resolve(sch['$ref'], base)
            e, a = self.node(sub, b, v, path)
            errs += e
            allowed |= a
        t = sch.get('type')
        if t is not None:
            ts = t if isinstance(t, list) else [t]
            if not any(type_ok(x, v) for x in ts):
                return errs + ['%s: %s is not %s' % (path, json.dumps(v)[:60], ' or '.join(ts))], allowed
        if 'const' in sch and (v != sch['const'] or type(v) is not type(sch['const'])):
            errs.append('%s: %s is not %s' % (path, json.dumps(v), json.dumps(sch['const'])))
        if 'enum' in sch and v not in sch['enum']:
            errs.append('%s: %s is not one of %s' % (path, json.dumps(v), sch['enum']))
        if 'pattern' in sch and isinstance(v, str) and not re.search(sch['pattern'], v):
            errs.append('%s: "%s" does not match %s' % (path, v[:60], sch['pattern']))
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            if 'minimum' in sch and v < sch['minimum']:
                errs.append('%s: %s < %s' % (path, v, sch['minimum']))
            if 'maximum' in sch and v > sch['maximum']:
                errs.append('%s: %s > %s' % (path, v, sch['maximum']))
        if isinstance(v, dict):
            props = sch.get('properties', {})
            allowed |= set(props)
            for r in sch.get('required', []):
                if r not in v:
                    errs.append('%s: "%s" is missing' % (path, r))
            for k, sub in props.items():
                if k in v:
                    errs += self.check(sub, base, v[k], '%s.%s' % (path, k))
            # A map (NAME to VALUE): its members are the caller's names,
            # each checked against one schema.
            if isinstance(sch.get('additionalProperties'), dict):
                for k in v:
                    if k not in props:
                        errs += self.check(sch['additionalProperties'], base, v[k], '%s.%s' % (path, k))
                        allowed.add(k)
        if isinstance(v, list) and 'items' in sch:
            for i, x in enumerate(v):
                errs += self.check(sch['items'], base, x, '%s[%d]' % (path, i))
        for sub in sch.get('allOf', []):
            e, a = self.node(sub, base, v, path)
            errs += e
            allowed |= a
        if 'oneOf' in sch:
            fits = []
            for sub in sch['oneOf']:
                e, a = self.node(sub, base, v, path)
                if not e:
                    fits.append(a)
            if len(fits) != 1:
                errs.append('%s: matches %d of the oneOf branches, not exactly one' % (path, len(fits)))
            else:
                allowed |= fits[0]
        if 'if' in sch:
            e, a = self.node(sch['if'], base, v, path)
            if not e and 'then' in sch:
                e2, a2 = self.node(sch['then'], base, v, path)
                errs += e2
                allowed |= a2
        return errs, allowed


def with_jsonschema(schemas, ref, docs):
    """Errors from the jsonschema module, or [] when it is not installed."""
    try:
        import jsonschema
        from referencing import Registry, Resource
    except ImportError:
        return []
    res = [(d['$id'], Resource.from_contents(d)) for d in schemas.docs.values()]
    reg = Registry().with_resources(res)
    name, _, ptr = ref.partition('#')
    root = schemas.docs[name]
    val = jsonschema.Draft202012Validator({'$ref': root['$id'] + ('#' + ptr if ptr else '')}, registry=reg)
    return ['jsonschema: %s: %s' % ('/'.join(map(str, e.absolute_path)) or '.', e.message)
            for d in docs for e in val.iter_errors(d)]


def validate(args):
    strict = '--strict' in args
    lines = '--lines' in args
    args = [a for a in args if a not in ('--strict', '--lines')]
    sdir, ref = args[0], args[1]
    text = open(args[2]).read() if len(args) > 2 else sys.stdin.read()
    schemas = Schemas(sdir)
    try:
        docs = [json.loads(l) for l in text.splitlines() if l.strip()] if lines else [json.loads(text)]
    except ValueError as e:
        print('not JSON: %s' % e)
        return 1
    if lines and not docs:
        print('no JSON lines')
        return 1
    sch, base = schemas.resolve(ref, ref.partition('#')[0])
    v = Validator(schemas, strict)
    errs = []
    for i, d in enumerate(docs):
        errs += v.check(sch, base, d, '$' if not lines else 'line %d' % (i + 1))
    errs += with_jsonschema(schemas, ref, docs)
    for e in errs:
        print(e)
    return 1 if errs else 0


def type_name(sch, schemas, base):
    while '$ref' in sch:
        sch, base = schemas.resolve(sch['$ref'], base)
    t = sch.get('type')
    if isinstance(t, list):
        return ' or '.join(t), sch, base
    if t == 'array':
        it, _, _ = type_name(sch.get('items', {}), schemas, base)
        return 'array of %ss' % it, sch, base
    return t or '?', sch, base


def flatten(sch, schemas, base, prefix=''):
    """{field: (type, required)} for an object schema, nested ones dotted."""
    while '$ref' in sch or (not prefix and sch.get('type') == 'array'):
        # an output that is an array is documented by its elements
        sch, base = schemas.resolve(sch['$ref'], base) if '$ref' in sch else (sch.get('items', {}), base)
    rows = {}
    req = set(sch.get('required', []))
    for k, sub in sch.get('properties', {}).items():
        t, s2, b2 = type_name(sub, schemas, base)
        rows[prefix + k] = (t, k in req)
        if s2.get('type') == 'object':
            rows.update(flatten(s2, schemas, b2, prefix + k + '.'))
        elif s2.get('type') == 'array':
            it = s2.get('items', {})
            while '$ref' in it:
                it, b2 = schemas.resolve(it['$ref'], b2)
            if it.get('type') == 'object':
                rows.update(flatten(it, schemas, b2, prefix + k + '[].'))
    return rows


def doc(args):
    schemas = Schemas(args[0])
    problems = []
    tables = 0
    lines = open(args[1]).read().splitlines()
    for n, l in enumerate(lines):
        m = re.match(r'<!-- schema: (\S+) -->', l.strip())
        if not m:
            continue
        ref = m.group(1)
        sch, base = schemas.resolve(ref, ref.partition('#')[0])
        want = flatten(sch, schemas, base)
        got = {}
        j = n + 1
        while j < len(lines) and not lines[j].startswith('|'):
            j += 1
        rows = []
        while j < len(lines) and lines[j].startswith('|'):
            rows.append(lines[j])
            j += 1
        tables += 1
        for r in rows[2:]:
            cells = [c.strip() for c in r.strip().strip('|').split('|')]
            if len(cells) < 3:
                problems.append('%s: a row without field | type | present: %s' % (ref, r))
                continue
            got[cells[0].strip('`')] = (cells[1], cells[2] == 'always')
        for f in sorted(set(want) | set(got)):
            if f not in got:
                problems.append('%s: %s is in the schema, not in the doc' % (ref, f))
            elif f not in want:
                problems.append('%s: %s is in the doc, not in the schema' % (ref, f))
            elif got[f] != want[f]:
                problems.append('%s: %s is %s/%s in the doc, %s/%s in the schema' % (
                    ref, f, got[f][0], 'always' if got[f][1] else 'sometimes',
                    want[f][0], 'always' if want[f][1] else 'sometimes'))
    if not tables:
        problems.append('no "<!-- schema: REF -->" tables in ' + args[1])
    try:
        import jsonschema
        for name, d in schemas.docs.items():
            try:
                jsonschema.Draft202012Validator.check_schema(d)
            except jsonschema.SchemaError as e:
                problems.append('%s: not a draft 2020-12 schema: %s' % (name, e.message))
    except ImportError:
        pass
    for p in problems:
        print(p)
    return 1 if problems else 0


if __name__ == '__main__':
    if len(sys.argv) < 4 or sys.argv[1] not in ('validate', 'doc'):
        sys.stderr.write(__doc__)
        sys.exit(2)
    sys.exit(validate(sys.argv[2:]) if sys.argv[1] == 'validate' else doc(sys.argv[2:]))
