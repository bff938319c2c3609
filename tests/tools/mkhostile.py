#!/usr/bin/env python3
"""Archives for `sbx-template import` tests (t1810) and the fuzz corpus.

  mkhostile.py hostile OUTDIR
      the hostile set: one archive per attack, and OUTDIR/expect listing
      "NAME<TAB>STATUS<TAB>TEXT the message must hold" for each
  mkhostile.py rootfs TREE OUT           (.tar, .tar.gz or .tar.zst)
      a `docker export`-like tarball of TREE: numeric owners, no "./"
  mkhostile.py rootfs-odd TREE OUT
      TREE plus opt/dev/{sda,mem,fifo} (to be dropped) and opt/suid,
      opt/sgid (modes 4755, 2755: to be stripped)
  mkhostile.py docker-save TREE OUT [USER]
  mkhostile.py oci TREE OUT
      a two-layer image: layer 1 is TREE plus etc/sbx-lower and
      opt/lower/{a,b}; layer 2 whites out etc/sbx-lower, makes opt/lower
      opaque and adds opt/lower/upper and etc/sbx-upper; the config has
      Env SBX_IMAGE=two-layer and PATH, WorkingDir /workspace.  docker-save
      is the legacy `docker save` layout (manifest.json, <hex>/layer.tar,
      diff_ids), oci an OCI image layout with gzip layers and digests,
      oci-tampered the same with the second layer's bytes changed.  USER:
      the docker-save config's User (none by default).

No Docker here: everything is built with tarfile, gzip and the zstd CLI.
"""
import gzip
import hashlib
import io
import json
import os
import subprocess
import sys
import tarfile

MTIME = 1700000000


def info(name, kind=tarfile.REGTYPE, size=0, mode=0o644, link=""):
    t = tarfile.TarInfo(name)
    t.type, t.size, t.mode, t.linkname, t.mtime = kind, size, mode, link, MTIME
    return t


def tar_bytes(entries, fmt=tarfile.PAX_FORMAT):
    """entries: (TarInfo, data or None)"""
    b = io.BytesIO()
    with tarfile.open(fileobj=b, mode="w", format=fmt) as t:
        for ti, data in entries:
            if data is not None:
                ti.size = len(data)
            t.addfile(ti, io.BytesIO(data) if data is not None else None)
    return b.getvalue()


def tree_entries(tree):
    """TREE as a docker export has it: sorted, numeric owners, no "./"."""
    out = []
    for dirpath, dirs, files in os.walk(tree):
        dirs.sort()
        for n in sorted(dirs) + sorted(files):
            p = os.path.join(dirpath, n)
            rel = os.path.relpath(p, tree)
            st = os.lstat(p)
            ti = tarfile.TarInfo(rel)
            ti.mode, ti.uid, ti.gid, ti.mtime = st.st_mode & 0o7777, st.st_uid, st.st_gid, int(st.st_mtime)
            ti.uname = ti.gname = ""
            data = None
            if os.path.islink(p):
                ti.type, ti.linkname = tarfile.SYMTYPE, os.readlink(p)
            elif os.path.isdir(p):
                ti.type = tarfile.DIRTYPE
            elif os.path.isfile(p):
                with open(p, "rb") as f:
                    data = f.read()
            else:
                continue  # devices and FIFOs: a real export would carry them; the unpacker drops them
            out.append((ti, data))
    return out


def compress(data, out):
    if out.endswith(".gz"):
        return gzip.compress(data, 6, mtime=0)
    if out.endswith(".zst"):
        return subprocess.run(["zstd", "-q", "-c", "-3"], input=data, stdout=subprocess.PIPE, check=True).stdout
    return data


def write(path, data):
    with open(path, "wb") as f:
        f.write(data)


def sha(b):
    return hashlib.sha256(b).hexdigest()


def layers(tree):
    l1 = tree_entries(tree) + [
        (info("etc/sbx-lower"), b"lower\n"),
        (info("opt/", tarfile.DIRTYPE, mode=0o755), None),
        (info("opt/lower/", tarfile.DIRTYPE, mode=0o755), None),
        (info("opt/lower/a"), b"a\n"),
        (info("opt/lower/b"), b"b\n"),
    ]
    l2 = [
        (info("etc/", tarfile.DIRTYPE, mode=0o755), None),
        (info("etc/.wh.sbx-lower"), b""),
        (info("etc/sbx-upper"), b"upper\n"),
        (info("opt/lower/", tarfile.DIRTYPE, mode=0o755), None),
        (info("opt/lower/.wh..wh..opq"), b""),
        (info("opt/lower/upper"), b"from layer 2\n"),
    ]
    return tar_bytes(l1), tar_bytes(l2)


CONFIG_ENV = ["PATH=/usr/sbin:/usr/bin:/sbin:/bin", "SBX_IMAGE=two-layer"]


def docker_save(tree, out, user=None):
    l1, l2 = layers(tree)
    cc = {"Env": CONFIG_ENV, "WorkingDir": "/workspace"}
    if user is not None:
        cc["User"] = user
    config = json.dumps({"architecture": "amd64", "os": "linux",
                         "config": cc,
                         "rootfs": {"type": "layers", "diff_ids": ["sha256:" + sha(l1), "sha256:" + sha(l2)]}}).encode()
    cname = sha(config) + ".json"
    d1, d2 = sha(l1 + b"1"), sha(l2 + b"2")  # layer v1 ids: any 64 hex
    manifest = json.dumps([{"Config": cname, "RepoTags": ["two-layer:1"],
                            "Layers": [d1 + "/layer.tar", d2 + "/layer.tar"]}]).encode()
    ents = [(info(d1 + "/", tarfile.DIRTYPE, mode=0o755), None), (info(d1 + "/VERSION"), b"1.0"),
            (info(d1 + "/layer.tar"), l1), (info(d2 + "/", tarfile.DIRTYPE, mode=0o755), None),
            (info(d2 + "/layer.tar"), l2), (info(cname), config), (info("manifest.json"), manifest),
            (info("repositories"), b'{"two-layer":{"1":"%s"}}' % d2.encode())]
    write(out, tar_bytes(ents))


def oci(tree, out, tamper=False):
    l1, l2 = layers(tree)
    g1, g2 = gzip.compress(l1, 6, mtime=0), gzip.compress(l2, 6, mtime=0)
    config = json.dumps({"architecture": "amd64", "os": "linux",
                         "config": {"Env": CONFIG_ENV, "WorkingDir": "/workspace"},
                         "rootfs": {"type": "layers", "diff_ids": ["sha256:" + sha(l1), "sha256:" + sha(l2)]}}).encode()
    lt = "application/vnd.oci.image.layer.v1.tar+gzip"
    man = json.dumps({"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
                      "config": {"mediaType": "application/vnd.oci.image.config.v1+json",
                                 "digest": "sha256:" + sha(config), "size": len(config)},
                      "layers": [{"mediaType": lt, "digest": "sha256:" + sha(g1), "size": len(g1)},
                                 {"mediaType": lt, "digest": "sha256:" + sha(g2), "size": len(g2)}]}).encode()
    index = json.dumps({"schemaVersion": 2, "manifests": [
        {"mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": "sha256:" + sha(man),
         "size": len(man), "platform": {"architecture": "amd64", "os": "linux"}}]}).encode()
    blobs = {sha(b): b for b in (g1, g2, config, man)}
    if tamper:  # the second layer's bytes change, its name does not
        b = bytearray(g2)
        b[len(b) // 2] ^= 0x40
        blobs[sha(g2)] = bytes(b)
    ents = [(info("oci-layout"), b'{"imageLayoutVersion":"1.0.0"}'),
            (info("blobs/", tarfile.DIRTYPE, mode=0o755), None),
            (info("blobs/sha256/", tarfile.DIRTYPE, mode=0o755), None)]
    ents += [(info("blobs/sha256/" + h), b) for h, b in blobs.items()]
    ents += [(info("index.json"), index)]
    write(out, tar_bytes(ents))


def gz_members(member, count, path):
    z = gzip.compress(member, 9, mtime=0)
    with open(path, "wb") as f:
        for _ in range(count):
            f.write(z)


def hostile(outdir):
    os.makedirs(outdir, exist_ok=True)
    expect = []

    def add(name, data, status, text):
        write(os.path.join(outdir, name), data)
        expect.append((name, status, text))

    ok = (info("etc/ok"), b"ok\n")
    add("dotdot.tar", tar_bytes([ok, (info("../../escape-dotdot"), b"pwned\n")]), 3, '".." component')
    add("dotdot-mid.tar.gz", gzip.compress(tar_bytes([(info("a/../../escape-mid"), b"x")])), 3, '".." component')
    add("absolute.tar", tar_bytes([(info("/tmp/sbx-escape-absolute"), b"pwned\n")]), 3, "absolute name")
    add("hardlink-out.tar", tar_bytes([(info("h", tarfile.LNKTYPE, link="../../../etc/passwd"), None)]), 3,
        "hardlink to")
    add("hardlink-abs.tar", tar_bytes([(info("h", tarfile.LNKTYPE, link="/etc/shadow"), None)]), 3, "hardlink to")
    add("hardlink-later.tar", tar_bytes([(info("h", tarfile.LNKTYPE, link="later"), None), (info("later"), b"x")]),
        3, "not extracted")
    add("symlink-write.tar", tar_bytes([(info("evil", tarfile.SYMTYPE, link="/tmp"), None),
                                        (info("evil/sbx-escape-symlink"), b"pwned\n")]), 3, "symlink")
    add("symlink-rel.tar.zst", compress(tar_bytes([(info("d/", tarfile.DIRTYPE, mode=0o755), None),
                                                   (info("d/up", tarfile.SYMTYPE, link="../.."), None),
                                                   (info("d/up/sbx-escape-rel"), b"pwned\n")]), ".zst"), 3,
        "symlink")
    # A lower layer plants a symlink, the upper one writes through it.
    s1 = tar_bytes([(info("x", tarfile.SYMTYPE, link="/tmp"), None)])
    s2 = tar_bytes([(info("x/sbx-escape-layer"), b"pwned\n")])
    cfg = b'{"config":{}}'
    h1, h2 = sha(s1), sha(s2)
    man = json.dumps([{"Config": "c.json", "Layers": [h1 + "/layer.tar", h2 + "/layer.tar"]}]).encode()
    add("layer-symlink.tar", tar_bytes([(info(h1 + "/layer.tar"), s1), (info(h2 + "/layer.tar"), s2),
                                        (info("c.json"), cfg), (info("manifest.json"), man)]), 3,
        "a parent directory is a symlink")
    # 10 GiB of zeros in ~10 MB: 10240 gzip members of one 1 MiB entry.
    hdr = info("zero", size=1 << 20).tobuf(tarfile.USTAR_FORMAT)
    gz_members(hdr + bytes(1 << 20), 10240, os.path.join(outdir, "bomb.tar.gz"))
    expect.append(("bomb.tar.gz", 5, "max_bytes"))
    # Just over 10^6 entries in ~100 kB: 1001 members of 1000 directory headers.
    d = info("d/", tarfile.DIRTYPE, mode=0o755).tobuf(tarfile.USTAR_FORMAT)
    gz_members(d * 1000, 1001, os.path.join(outdir, "entries.tar.gz"))
    expect.append(("entries.tar.gz", 5, "entries"))
    # One file of 16 GiB (its size in a pax header), refused at its header.
    add("huge.tar", info("huge", size=16 << 30).tobuf(tarfile.PAX_FORMAT), 5, "refused before any is written")
    add("junk.tar", b"this is not a tar archive, not even close\n" * 20, 3, "")
    write(os.path.join(outdir, "expect"),
          "".join("%s\t%d\t%s\n" % e for e in expect).encode())


def rootfs_odd(tree, out):
    """TREE plus what an import must change: device nodes, a FIFO, a socket
    (dropped) and setuid/setgid files (stripped)."""
    ents = tree_entries(tree) + [
        (info("opt/", tarfile.DIRTYPE, mode=0o755), None),
        (info("opt/dev/", tarfile.DIRTYPE, mode=0o755), None),
        (info("opt/dev/sda", tarfile.BLKTYPE, mode=0o660), None),
        (info("opt/dev/mem", tarfile.CHRTYPE, mode=0o640), None),
        (info("opt/dev/fifo", tarfile.FIFOTYPE, mode=0o644), None),
        (info("opt/suid", mode=0o4755), b"#!/bin/sh\nid -u\n"),
        (info("opt/sgid", mode=0o2755), b"#!/bin/sh\nid -g\n"),
    ]
    write(out, tar_bytes(ents))


def main(argv):
    if len(argv) == 3 and argv[1] == "hostile":
        return hostile(argv[2])
    if len(argv) == 4 and argv[1] == "rootfs":
        return write(argv[3], compress(tar_bytes(tree_entries(argv[2])), argv[3]))
    if len(argv) == 4 and argv[1] == "rootfs-odd":
        return rootfs_odd(argv[2], argv[3])
    if len(argv) in (4, 5) and argv[1] == "docker-save":
        return docker_save(argv[2], argv[3], argv[4] if len(argv) == 5 else None)
    if len(argv) == 4 and argv[1] == "oci":
        return oci(argv[2], argv[3])
    if len(argv) == 4 and argv[1] == "oci-tampered":
        return oci(argv[2], argv[3], tamper=True)
    sys.stderr.write(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv) or 0)
