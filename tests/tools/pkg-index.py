#!/usr/bin/env python3
"""Write a tiny package registry for tests/t1400-packages.t into a directory
that `python3 -m http.server` then serves: a PEP 503 simple index with
wheels this script builds itself (a wheel is a zip with METADATA, WHEEL and
RECORD; nothing is downloaded), and an npm registry document with a tarball.

  pkg-index.py --out DIR --base http://198.51.100.202:8000 \
      --wheel NAME:VERSION[:PADBYTES][:tamper] ... --npm NAME:VERSION ...

PADBYTES adds an incompressible file of that many bytes to the wheel;
"tamper" changes the wheel after its hash went into the index, as a
compromised mirror would.  Prints one JSON line per package with its file
name, size and sha256 (of what the index names)."""
import argparse
import base64
import hashlib
import io
import json
import os
import random
import tarfile
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


def build_npm(name, version):
    pj = json.dumps({"name": name, "version": version, "main": "index.js"}).encode()
    js = f'module.exports = "{name}-{version}-ok";\n'.encode()
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz", format=tarfile.USTAR_FORMAT) as t:
        for p, d in (("package/package.json", pj), ("package/index.js", js)):
            i = tarfile.TarInfo(p)
            i.size, i.mtime, i.mode = len(d), 1704067200, 0o644
            t.addfile(i, io.BytesIO(d))
    return buf.getvalue()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--base", required=True)
    ap.add_argument("--wheel", action="append", default=[])
    ap.add_argument("--npm", action="append", default=[])
    a = ap.parse_args()
    os.makedirs(f"{a.out}/simple", exist_ok=True)
    os.makedirs(f"{a.out}/files", exist_ok=True)
    os.makedirs(f"{a.out}/npm/-", exist_ok=True)
    for spec in a.wheel:
        parts = spec.split(":")
        name, version = parts[0], parts[1]
        pad = int(parts[2]) if len(parts) > 2 and parts[2] else 0
        tamper = "tamper" in parts[3:]
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
        with open(f"{a.out}/simple/{norm}/index.html", "w") as f:
            f.write("<!DOCTYPE html><html><body>\n"
                    f'<a href="../../files/{fname}#sha256={digest}" '
                    f'data-requires-python="&gt;=3.7">{fname}</a><br>\n'
                    "</body></html>\n")
        print(json.dumps({"type": "pypi", "name": name, "version": version, "file": fname,
                          "size": len(data), "sha256": digest, "tampered": tamper}))
    for spec in a.npm:
        name, version = spec.split(":")[:2]
        data = build_npm(name, version)
        tgz = f"{name}-{version}.tgz"
        with open(f"{a.out}/npm/-/{tgz}", "wb") as f:
            f.write(data)
        integrity = "sha512-" + base64.b64encode(hashlib.sha512(data).digest()).decode()
        doc = {"name": name, "dist-tags": {"latest": version},
               "versions": {version: {"name": name, "version": version,
                                      "dist": {"tarball": f"{a.base}/npm/-/{tgz}",
                                               "integrity": integrity,
                                               "shasum": hashlib.sha1(data).hexdigest()}}}}
        with open(f"{a.out}/npm/{name}", "w") as f:
            json.dump(doc, f)
        print(json.dumps({"type": "npm", "name": name, "version": version, "file": tgz,
                          "size": len(data), "sha256": hashlib.sha256(data).hexdigest()}))


if __name__ == "__main__":
    main()
