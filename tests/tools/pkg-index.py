#!/usr/bin/env python3
"""Write a tiny package registry for tests/t1400-packages.t into a directory
that `python3 -m http.server` then serves: a PEP 503 simple index with
wheels this script builds itself (a wheel is a zip with METADATA, WHEEL and
RECORD; nothing is downloaded).  npm packages are published to a real npm
registry instead (tests/lib-npm.sh).

  pkg-index.py --out DIR --base http://198.51.100.202:8000 \
      --wheel NAME:VERSION[:PADBYTES][:tamper][:nohash] ...

PADBYTES adds an incompressible file of that many bytes to the wheel;
"tamper" changes the wheel after its hash went into the index, as a
compromised mirror would; "nohash" leaves the link's #sha256= out, as
some mirrors do.  Several versions of one name share its index page.  Prints one JSON line per package with its file
name, size and sha256 (of what the index names)."""
import argparse
import base64
import hashlib
import io
import json
import os
import random
import zipfile

FIXED = (2024, 1, 1, 0, 0, 0)


def record_hash(data):
    d = hashlib.sha256(data).digest()
    return "sha256=" + base64.urlsafe_b64encode(d).rstrip(b"=").decode()


def build_wheel(name, version, pad):
    mod = name.replace("-", "_")
    di = f"{mod}-{version}.dist-info"
    files = {
        f"{mod}/__init__.py": f'VALUE = "{name}-{version}-ok"\n'.encode(),
        f"{di}/METADATA": (f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
                           "Summary: sbx test package\n").encode(),
        f"{di}/WHEEL": b"Wheel-Version: 1.0\nGenerator: sbx-test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    if pad:
        files[f"{mod}/pad.bin"] = random.Random(name).randbytes(pad)
    record = "".join(f"{p},{record_hash(d)},{len(d)}\n" for p, d in files.items())
    record += f"{di}/RECORD,,\n"
    files[f"{di}/RECORD"] = record.encode()
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        for p, d in files.items():
            z.writestr(zipfile.ZipInfo(p, FIXED), d)
    return f"{mod}-{version}-py3-none-any.whl", buf.getvalue()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--base", required=True)
    ap.add_argument("--wheel", action="append", default=[])
    a = ap.parse_args()
    os.makedirs(f"{a.out}/simple", exist_ok=True)
    os.makedirs(f"{a.out}/files", exist_ok=True)
    pages = {}
    for spec in a.wheel:
        parts = spec.split(":")
        name, version = parts[0], parts[1]
        pad = int(parts[2]) if len(parts) > 2 and parts[2] else 0
        tamper = "tamper" in parts[3:]
        nohash = "nohash" in parts[3:]
        fname, data = build_wheel(name, version, pad)
        digest = hashlib.sha256(data).hexdigest()
        served = data
        if tamper:
            served = data.replace(b"-ok", b"-XX")  # what a bad mirror serves
            assert served != data
        with open(f"{a.out}/files/{fname}", "wb") as f:
            f.write(served)
        norm = name.lower().replace("_", "-").replace(".", "-")
        os.makedirs(f"{a.out}/simple/{norm}", exist_ok=True)
        frag = "" if nohash else f"#sha256={digest}"
        pages.setdefault(norm, []).append(f'<a href="../../files/{fname}{frag}" '
                                          f'data-requires-python="&gt;=3.7">{fname}</a><br>\n')
        with open(f"{a.out}/simple/{norm}/index.html", "w") as f:
            f.write("<!DOCTYPE html><html><body>\n" + "".join(pages[norm]) + "</body></html>\n")
        print(json.dumps({"type": "pypi", "name": name, "version": version, "file": fname,
                          "size": len(data), "sha256": digest, "tampered": tamper}))

if __name__ == "__main__":
    main()
