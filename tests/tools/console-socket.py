#!/usr/bin/env python3
"""Be an OCI engine's end of runc's console socket, as conmon and the
containerd shim are: listen on a unix socket, run the command (an
`sbx-oci create/run/exec ... --console-socket SOCK`, SOCK in argv
replaced by the socket's path), receive the pty master it sends, and
relay: once TEXT has been read (--after; else any output: the process is
up), resize to ROWSxCOLS when --resize, then type INPUT; copy everything
read from the master to stdout until EIO (the other side closed).  Exits
with the command's status.
usage: console-socket.py DIR [--input TEXT] [--resize R C] [--after TEXT] -- CMD..."""
import array, fcntl, os, select, socket, struct, subprocess, sys, termios, time

args = sys.argv[1:]
d, args = args[0], args[1:]
inp, resize, after = None, None, b""
while args[0] != "--":
    if args[0] == "--after":
        after, args = args[1].encode(), args[2:]
    elif args[0] == "--input":
        inp, args = args[1].encode(), args[2:]
    elif args[0] == "--resize":
        resize, args = (int(args[1]), int(args[2])), args[3:]
    else:
        sys.exit("console-socket.py: bad option " + args[0])
cmd = args[1:]
path = os.path.join(d, "console.sock")
if os.path.exists(path):
    os.unlink(path)
ls = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
ls.bind(path)
ls.listen(1)
proc = subprocess.Popen([path if a == "SOCK" else a for a in cmd])
# The runtime sends the console before it returns (create) or while it
# runs (run, exec); one that exits without sending refused the request.
ls.settimeout(0.2)
conn, end = None, time.time() + 600
while conn is None:
    try:
        conn, _ = ls.accept()
    except socket.timeout:
        if proc.poll() is not None or time.time() > end:
            proc.kill()
            sys.stderr.write("console-socket.py: no console arrived\n")
            sys.exit(proc.wait() or 1)
fds = array.array("i")
msg, anc, _, _ = conn.recvmsg(256, socket.CMSG_SPACE(fds.itemsize))
for level, kind, data in anc:
    if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
        fds.frombytes(data[: fds.itemsize])
if not fds:
    proc.kill()
    sys.exit("console-socket.py: no fd in the message")
m = fds[0]
sys.stderr.write("console-socket.py: got %s\n" % msg.decode(errors="replace"))
out = sys.stdout.buffer
typed = inp is None and resize is None
seen = b""
end = time.time() + 600
while time.time() < end:
    r, _, _ = select.select([m], [], [], 0.5)
    if not r:
        if proc.poll() is not None and not typed:
            break
        continue
    try:
        b = os.read(m, 4096)
    except OSError:
        break  # EIO: the holder closed its side
    if not b:
        break
    out.write(b)
    out.flush()
    seen += b
    if not typed and after in seen:
        if resize:
            fcntl.ioctl(m, termios.TIOCSWINSZ, struct.pack("HHHH", resize[0], resize[1], 0, 0))
            time.sleep(0.5)
        if inp:
            os.write(m, inp)
        typed = True
os.close(m)
rc = proc.wait()
sys.exit(rc if rc >= 0 else 128 - rc)
