#!/usr/bin/env python3
"""Drive guest-init's agent in host mode (`guest-init --agent-fd 3` on a
socketpair) over the frame protocol of common/proto.h and print TAP.

Standard library only.  Usage: agent-driver.py PATH-TO-GUEST-INIT
"""
import os
import re
import select
import signal
import socket
import statistics
import struct
import subprocess
import sys
import time

# Mirrors common/proto.h (the wire format is the contract).
HDR = 12
FRAME_MAX = 1 << 20
STDIN_WINDOW = 256 << 10
(F_HELLO, F_EXEC, F_STARTED, F_STDIN, F_STDOUT, F_STDERR, F_STDIN_EOF, F_WINDOW,
 F_RESIZE, F_SIGNAL, F_KILL, F_EXIT, F_ERROR, F_PING, F_PONG, F_SHUTDOWN) = range(1, 17)
(T_VERSION, T_KERNEL, T_HOSTNAME, T_SESSION, T_ARGV, T_ENV, T_CWD, T_TIMEOUT_MS,
 T_FLAGS, T_ROWS, T_COLS, T_UID, T_GID, T_PID, T_EXEC_ID, T_STATUS, T_SIGNO,
 T_REASON, T_WALL_US, T_CPU_USER_US, T_CPU_SYS_US, T_MEM_PEAK, T_CODE, T_MSG) = range(1, 25)
EXEC_PTY, EXEC_STDIN = 1, 2
R_EXITED, R_SIGNALLED, R_TIMEOUT, R_KILLED, R_OOM = 1, 2, 3, 4, 5
U64_TAGS = {T_WALL_US, T_CPU_USER_US, T_CPU_SYS_US, T_MEM_PEAK}
STR_TAGS = {T_KERNEL, T_HOSTNAME, T_MSG, T_ARGV, T_ENV, T_CWD}


def frame(ftype, stream, payload=b""):
    return struct.pack("<IBBHI", len(payload), ftype, 0, 0, stream) + payload


def tlv(tag, val):
    if isinstance(val, str):
        val = val.encode()
    elif isinstance(val, int):
        val = struct.pack("<I", val)
    return struct.pack("<HI", tag, len(val)) + val


def tlvs(payload):
    out, i = {}, 0
    while i < len(payload):
        tag, n = struct.unpack_from("<HI", payload, i)
        val = payload[i + 6:i + 6 + n]
        i += 6 + n
        if tag in STR_TAGS:
            val = val.decode(errors="replace")
        elif tag in U64_TAGS:
            val = struct.unpack("<Q", val)[0]
        elif n == 4:
            val = struct.unpack("<I", val)[0]
        out[tag] = val
    return out


def exec_payload(argv, env=(), cwd="/tmp", timeout_ms=0, flags=0, rows=0, cols=0, uid=0):
    p = b"".join(tlv(T_ARGV, a) for a in argv)
    p += b"".join(tlv(T_ENV, e) for e in env)
    if cwd is not None:
        p += tlv(T_CWD, cwd)
    p += tlv(T_TIMEOUT_MS, timeout_ms) + tlv(T_FLAGS, flags)
    if rows or cols:
        p += tlv(T_ROWS, rows) + tlv(T_COLS, cols)
    if uid is not None:
        p += tlv(T_UID, uid)
    return p


class Result:
    def __init__(self):
        self.out, self.err = bytearray(), bytearray()  # += on bytes is quadratic
        self.exit, self.error, self.pid = None, None, None
        self.windows = 0


class Agent:
    def __init__(self, binary, env=None):
        self.sock, theirs = socket.socketpair()
        fd = theirs.fileno()
        self.proc = subprocess.Popen(
            [binary, "--agent-fd", "3"], stdin=subprocess.DEVNULL, env=env,
            # close_fds would run after preexec_fn and close fd 3 again
            preexec_fn=lambda: os.dup2(fd, 3), close_fds=False)
        theirs.close()
        self._state()

    def _state(self):
        self.buf = bytearray()
        self.pending = []  # frames read but not yet claimed
        self.next_stream = 1
        self.started = set()

    @classmethod
    def over(cls, sock, next_stream=1):
        """A host connection of our own to an agent started elsewhere."""
        a = cls.__new__(cls)
        a.sock, a.proc = sock, None
        a._state()
        a.next_stream = next_stream
        return a

    def send(self, ftype, stream, payload=b""):
        self.sock.sendall(frame(ftype, stream, payload))

    def _read_frame(self, deadline):
        while True:
            if len(self.buf) >= HDR:
                n, t, _fl, _r, s = struct.unpack_from("<IBBHI", self.buf)
                if len(self.buf) >= HDR + n:
                    p = bytes(self.buf[HDR:HDR + n])
                    del self.buf[:HDR + n]
                    return t, s, p
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self.sock], [], [], left)[0]:
                raise TimeoutError("no frame from the agent")
            chunk = self.sock.recv(1 << 20)
            if not chunk:
                raise EOFError("agent closed the channel")
            self.buf += chunk

    def recv(self, want=lambda f: True, timeout=10.0):
        """The first frame (pending ones first) for which want() holds."""
        for i, f in enumerate(self.pending):
            if want(f):
                return self.pending.pop(i)
        deadline = time.monotonic() + timeout
        while True:
            f = self._read_frame(deadline)
            if want(f):
                return f
            self.pending.append(f)

    def stream(self):
        s = self.next_stream
        self.next_stream += 1
        return s

    def start(self, argv, **kw):
        s = self.stream()
        self.send(F_EXEC, s, exec_payload(argv, **kw))
        return s

    def collect(self, s, r=None, timeout=10.0):
        """Frames of stream s up to its EXIT (or an ERROR that ends it)."""
        r = r or Result()
        while r.exit is None:
            t, _, p = self.recv(lambda f: f[1] == s, timeout)
            self.absorb(r, t, p)
            if t == F_ERROR and r.pid is None and s not in self.started:
                break  # the exec never started: no EXIT follows
        return r

    @staticmethod
    def absorb(r, t, p):
        if t == F_STDOUT:
            r.out += p
        elif t == F_STDERR:
            r.err += p
        elif t == F_STARTED:
            r.pid = tlvs(p)[T_PID]
        elif t == F_EXIT:
            r.exit = tlvs(p)
        elif t == F_ERROR:
            r.error = tlvs(p)
        elif t == F_WINDOW:
            r.windows += struct.unpack("<I", p)[0]

    def run(self, argv, **kw):
        return self.collect(self.start(argv, **kw))

    def wait_started(self, s):
        t, _, p = self.recv(lambda f: f[1] == s and f[0] in (F_STARTED, F_ERROR))
        self.started.add(s)
        return tlvs(p).get(T_PID) if t == F_STARTED else None

    def ping(self, payload=b"x", stream=0, timeout=5.0):
        self.send(F_PING, stream, payload)
        t, _, p = self.recv(lambda f: f[0] == F_PONG and f[1] == stream, timeout)
        return p

    def close(self):
        try:
            self.sock.close()
        finally:
            try:
                return self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                return self.proc.wait()


class Tap:
    def __init__(self):
        self.n = 0
        self.failed = 0

    def skip(self, name, why):
        self.n += 1
        print("ok %d - %s # skip %s" % (self.n, name, why), flush=True)

    def ok(self, cond, name, diag=None):
        self.n += 1
        print(("ok %d - %s" if cond else "not ok %d - %s") % (self.n, name), flush=True)
        if not cond:
            self.failed += 1
            if diag is not None:
                for line in str(diag).splitlines():
                    print("#   " + line, flush=True)
        return cond

    def comment(self, s):
        print("# " + s, flush=True)


def pid_gone(pid, wait=2.0):
    deadline = time.monotonic() + wait
    while True:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)


def st(r):
    return (r.exit or {}).get(T_STATUS), (r.exit or {}).get(T_REASON), (r.exit or {}).get(T_SIGNO)


def stdin_1mib(a, tap):
    data = os.urandom(1 << 20)
    s = a.start(["cat"], flags=EXEC_STDIN)
    r, credit, sent, violated = Result(), STDIN_WINDOW, 0, False
    while sent < len(data):
        if credit:
            n = min(credit, 64 << 10, len(data) - sent)
            a.send(F_STDIN, s, data[sent:sent + n])
            sent += n
            credit -= n
            continue
        t, _, p = a.recv(lambda f: f[1] == s)
        a.absorb(r, t, p)
        if t == F_WINDOW:
            credit += struct.unpack("<I", p)[0]
            violated |= credit > STDIN_WINDOW
        elif t in (F_EXIT, F_ERROR):
            break
    a.send(F_STDIN_EOF, s)
    a.collect(s, r, timeout=30)
    tap.ok(r.out == data and st(r)[:2] == (0, R_EXITED) and not violated,
           "1 MiB through cat within the WINDOW credit",
           "got %d bytes, exit %r, error %r" % (len(r.out), r.exit, r.error))


def credit_violation(a, tap):
    s = a.start(["sleep", "30"], flags=EXEC_STDIN)
    a.wait_started(s)
    # sleep never reads: only a pipe's worth (64 KiB) can be given back
    for _ in range(2 * STDIN_WINDOW // (64 << 10)):
        a.send(F_STDIN, s, b"\0" * (64 << 10))
    r = a.collect(s)
    tap.ok(r.error is not None and r.error.get(T_CODE) == 3 and st(r)[:2] == (137, R_KILLED),
           "stdin beyond the window: ERROR and the exec is killed", "%r %r" % (r.error, r.exit))


def basic(a, tap):
    r = a.run(["sh", "-c", "echo out; echo err >&2; exit 7"])
    tap.ok(r.out == b"out\n" and r.err == b"err\n" and st(r)[:2] == (7, R_EXITED) and r.pid,
           "sh: stdout, stderr, exit 7 exited", vars(r))
    r = a.run(["no-such-command-sbx"])
    tap.ok(st(r)[0] == 127 and b"sbx: no-such-command-sbx: No such file or directory" in r.err,
           "missing command: 127 and a message", vars(r))
    r = a.run(["/etc/passwd"])
    tap.ok(st(r)[0] == 126 and b"Permission denied" in r.err, "not executable: 126", vars(r))
    r = a.run(["pwd"], cwd="/nonexistent-dir")
    tap.ok(st(r)[0] == 126 and
           b"sbx: cannot change directory to /nonexistent-dir: No such file or directory" in r.err,
           "bad cwd: 126 and a message", vars(r))
    r = a.run(["sh", "-c", 'echo "$PWD|$HOME|$USER|$LOGNAME|$PATH|$FOO|${TERM-unset}"'],
              env=["FOO=bar"])
    tap.ok(r.out == b"/tmp|/root|root|root|/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:"
                    b"/sbin:/bin|bar|unset\n", "cwd and environment defaults", vars(r))
    r = a.run(["sh", "-c", "echo $PATH; id -u"], env=["PATH=/bin:/usr/bin"], uid=65534)
    tap.ok(r.out == b"/bin:/usr/bin\n65534\n" and st(r)[0] == 0, "request PATH and uid kept",
           vars(r))


def timeouts_and_signals(a, tap):
    t0 = time.monotonic()
    s = a.start(["sleep", "30"], timeout_ms=300)
    pid = a.wait_started(s)
    r = a.collect(s)
    dt = time.monotonic() - t0
    tap.ok(st(r) == (124, R_TIMEOUT, 9) and dt < 2 and pid and pid_gone(pid),
           "timeout 300 ms: 124 timeout in %.0f ms, sleep gone" % (dt * 1000), vars(r))
    s = a.start(["sleep", "30"])
    pid = a.wait_started(s)
    a.send(F_SIGNAL, s, tlv(T_SIGNO, signal.SIGTERM))
    r = a.collect(s)
    tap.ok(st(r) == (143, R_SIGNALLED, 15), "SIGNAL SIGTERM: 143 signalled", vars(r))
    s = a.start(["sh", "-c", "sleep 30; echo no"])
    pid = a.wait_started(s)
    a.send(F_KILL, s)
    r = a.collect(s)
    tap.ok(st(r) == (137, R_KILLED, 9) and r.out == b"" and pid_gone(pid),
           "KILL: 137 killed", vars(r))
    r = a.run(["sh", "-c", "sleep 30 & echo $!"])
    bg = int(r.out or b"0")
    tap.ok(st(r)[0] == 0 and bg and pid_gone(bg), "the exec's tree ends with its main process",
           vars(r))


def stdin_and_pty(a, tap):
    s = a.start(["cat"], flags=EXEC_STDIN)
    a.send(F_STDIN, s, b"hello\n")
    a.send(F_STDIN_EOF, s)
    r = a.collect(s)
    tap.ok(r.out == b"hello\n" and st(r)[0] == 0 and r.windows == 6, "cat: stdin round trip",
           vars(r))
    r = a.run(["sh", "-c", "cat; echo rc=$?"])
    tap.ok(r.out == b"rc=0\n", "no stdin flag: stdin is /dev/null", vars(r))
    r = a.run(["tty"], flags=EXEC_PTY)
    tap.ok(re.fullmatch(rb"/dev/pts/\d+\r?\n", r.out) and st(r)[0] == 0, "pty: tty", vars(r))
    r = a.run(["sh", "-c", "stty size; echo $TERM"], flags=EXEC_PTY, rows=40, cols=100)
    tap.ok(r.out.replace(b"\r", b"") == b"40 100\nxterm-256color\n", "pty: ROWS/COLS and TERM",
           vars(r))
    s = a.start(["sh", "-c", "read x; stty size; echo got=$x"], flags=EXEC_PTY, rows=10, cols=20)
    a.wait_started(s)
    a.send(F_RESIZE, s, tlv(T_ROWS, 33) + tlv(T_COLS, 77))
    a.ping()  # RESIZE is handled before the line below reaches the child
    a.send(F_STDIN, s, b"abc\n")
    r = a.collect(s)
    tap.ok(b"33 77" in r.out and b"got=abc" in r.out, "pty: RESIZE and STDIN", vars(r))


def concurrency(a, tap):
    prog = "for i in 1 2 3 4 5 6; do echo %s$i; sleep 0.03; done"
    s1 = a.start(["sh", "-c", prog % "A"])
    s2 = a.start(["sh", "-c", prog % "B"])
    order = []
    res = {s1: Result(), s2: Result()}
    while res[s1].exit is None or res[s2].exit is None:
        t, s, p = a.recv(lambda f: f[1] in (s1, s2))
        a.absorb(res[s], t, p)
        if t == F_STDOUT:
            order.append(s)
    want = lambda c: "".join("%s%d\n" % (c, i) for i in range(1, 7)).encode()
    mixed = any(order[i] != order[i + 1] for i in range(len(order) - 1))
    tap.ok(res[s1].out == want("A") and res[s2].out == want("B") and mixed,
           "two concurrent execs keep to their own streams", order)
    s = a.start(["sleep", "1"])
    a.send(F_EXEC, s, exec_payload(["true"]))
    t, _, p = a.recv(lambda f: f[1] == s and f[0] == F_ERROR)
    a.send(F_KILL, s)
    a.collect(s)
    tap.ok(tlvs(p).get(T_CODE) == 5, "EXEC on a live stream: ERROR conflict", tlvs(p))


def malformed(a, tap):
    s = a.stream()
    a.send(F_EXEC, s, exec_payload(["true"])[:-3])
    t, _, p = a.recv(lambda f: f[1] == s)
    e = tlvs(p) if t == F_ERROR else {}
    tap.ok(t == F_ERROR and e.get(T_CODE) == 3 and "truncated" in e.get(T_MSG, ""),
           "truncated EXEC payload: ERROR 3", e)
    tap.ok(a.ping(b"after") == b"after", "PING answered after a malformed EXEC")
    s = a.stream()
    a.send(F_EXEC, s, tlv(T_ARGV, "a\0b"))
    t, _, p = a.recv(lambda f: f[1] == s)
    tap.ok(t == F_ERROR and tlvs(p).get(T_CODE) == 3, "NUL in argv: ERROR 3")
    a.sock.sendall(struct.pack("<IBBHI", 5, 99, 0, 0, 42) + b"junk!")
    t, s, p = a.recv(lambda f: f[1] == 42)
    tap.ok(t == F_ERROR and tlvs(p).get(T_CODE) == 3, "frame type 99: ERROR on its stream")
    a.sock.sendall(struct.pack("<IBBHI", 0, F_PING, 1, 0, 43))  # reserved flag bits
    t, s, p = a.recv(lambda f: f[1] == 43)
    tap.ok(t == F_ERROR, "reserved header bits: ERROR")
    tap.ok(a.ping(b"still", stream=7) == b"still", "PING on any stream after bad frames")
    for t in (F_STDIN, F_KILL, F_SIGNAL):
        a.send(t, 9999)  # unknown streams: a race with EXIT, dropped silently
    a.send(F_SIGNAL, 0, tlv(T_SIGNO, 15))
    t, s, p = a.recv(lambda f: f[1] == 0 and f[0] == F_ERROR)
    tap.ok(a.ping(b"z") == b"z" and not [f for f in a.pending if f[1] == 9999],
           "frames for unknown streams ignored, stream 0 exec ops refused")


def output_volume(a, tap):
    t0 = time.monotonic()
    s = a.start(["head", "-c", str(32 << 20), "/dev/zero"])
    r = a.collect(s, timeout=60)
    dt = time.monotonic() - t0
    tap.ok(len(r.out) == 32 << 20 and st(r)[0] == 0, "32 MiB of stdout arrive whole",
           "%d bytes" % len(r.out))
    tap.comment("stdout throughput: %.0f MB/s" % (len(r.out) / dt / 1e6))


def measure(a, tap):
    rtt = []
    for _ in range(200):
        t = time.monotonic()
        a.ping(b"p" * 8)
        rtt.append(time.monotonic() - t)
    ex = []
    for _ in range(200):
        t = time.monotonic()
        r = a.run(["true"], cwd="/")
        ex.append(time.monotonic() - t)
        if st(r)[0] != 0:
            break
    q = lambda v, p: sorted(v)[int(len(v) * p)] * 1e6
    tap.comment("PING round trip: median %.0f us, p99 %.0f us (n=200)" %
                (statistics.median(rtt) * 1e6, q(rtt, 0.99)))
    tap.comment("EXEC true round trip: median %.0f us, p99 %.0f us (n=%d)" %
                (statistics.median(ex) * 1e6, q(ex, 0.99), len(ex)))
    tap.ok(len(ex) == 200, "200 execs of true")


def lifecycle(binary, tap):
    a = Agent(binary)
    t, s, p = a.recv(lambda f: True)
    h = tlvs(p) if t == F_HELLO else {}
    tap.ok(t == F_HELLO and s == 0 and h.get(T_VERSION) == 1 and
           h.get(T_KERNEL) == os.uname().release and h.get(T_HOSTNAME) == os.uname().nodename,
           "HELLO with version, kernel and hostname", h)
    s = a.start(["sleep", "30"])
    pid = a.wait_started(s)
    a.send(F_SHUTDOWN, 0)
    rc = a.close()
    tap.ok(rc == 0 and pid_gone(pid), "SHUTDOWN: agent returns 0 and kills its execs")
    a = Agent(binary)
    s = a.start(["sleep", "30"])
    pid = a.wait_started(s)
    rc = a.close()
    tap.ok(rc == 0 and pid_gone(pid), "host EOF: agent returns 0 and kills its execs")


LISTENER_TESTS = ["listener: the first host gets HELLO", "listener: an exec on the first host",
                  "listener: hosts dropped mid-output: each next one gets whole frames, a new HELLO and the rest",
                  "listener: an exec on the last host", "listener: SHUTDOWN: agent returns 0"]


def drain_until_exit(c, s, buf, timeout=20.0):
    """Frames from c, each header checked, until the EXIT of stream s:
    (frames, the first bad header or None, stdout bytes of s, the rest)."""
    frames, bad, got, deadline = [], None, 0, time.monotonic() + timeout
    while bad is None and time.monotonic() < deadline and \
            not any(f[0] == F_EXIT and f[1] == s for f in frames):
        while len(buf) >= HDR:
            n, t, fl, rsv, fs = struct.unpack_from("<IBBHI", buf)
            if not (1 <= t <= 40) or fl or rsv or n > FRAME_MAX:
                bad = (n, t, fl, rsv, fs)
                break
            if len(buf) < HDR + n:
                break
            frames.append((t, fs, bytes(buf[HDR:HDR + n])))
            got += n if t == F_STDOUT and fs == s else 0
            del buf[:HDR + n]
        if bad is None and not any(f[0] == F_EXIT and f[1] == s for f in frames) and \
                select.select([c], [], [], 1)[0]:
            chunk = c.recv(1 << 20)
            if not chunk:
                break
            buf += chunk
    return frames, bad, got, buf


def listener(binary, tap):
    """What guest-init does on vsock: serve hosts that connect to a listening
    socket, one at a time.  Hosts are dropped while a flood of output is half
    written to them; each next one must get whole frames (the rest of a frame
    the last took part of is dropped), a fresh HELLO, and what is left.  A
    write that happens to end on a frame boundary proves nothing, so three
    hosts are dropped in a row."""
    import tempfile
    d = tempfile.mkdtemp(prefix="sbx-t0100-")
    path = os.path.join(d, "agent.sock")
    lsock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    lsock.bind(path)
    lsock.listen(4)
    fd = lsock.fileno()
    # fd 3 in the child (dup2 onto itself would keep close-on-exec)
    proc = subprocess.Popen([binary, "--agent-fd", "3"], stdin=subprocess.DEVNULL, close_fds=False,
                            preexec_fn=lambda: os.set_inheritable(3, True) if fd == 3 else os.dup2(fd, 3))
    lsock.close()
    try:
        c = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        c.connect(path)
        a = Agent.over(c)
        t, _, _ = a.recv(lambda f: True)
        tap.ok(t == F_HELLO, LISTENER_TESTS[0], t)
        r = a.run(["echo", "one"])
        tap.ok(st(r)[0] == 0 and bytes(r.out) == b"one\n", LISTENER_TESTS[1], vars(r))
        problems = []
        for _ in range(3):
            s = a.start(["head", "-c", "4000000", "/dev/zero"])
            a.wait_started(s)
            time.sleep(0.3)  # let the agent fill the socket: its last write is partial
            c.close()
            c = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            c.connect(path)
            frames, bad, got, rest = drain_until_exit(c, s, bytearray())
            ex = [tlvs(p) for t, fs, p in frames if t == F_EXIT and fs == s]
            if bad is not None or not any(f[0] == F_HELLO for f in frames) or not ex or \
                    ex[0].get(T_STATUS) != 0 or not 0 < got < 4000000:
                problems.append("bad header %r, %d frames, %d stdout bytes, exit %r" % (bad, len(frames), got, ex))
                break
            a = Agent.over(c, next_stream=s + 1)
            a.buf = rest
        tap.ok(not problems, LISTENER_TESTS[2], problems)
        r = a.run(["echo", "two"])
        tap.ok(st(r)[0] == 0 and bytes(r.out) == b"two\n", LISTENER_TESTS[3], vars(r))
        a.send(F_SHUTDOWN, 0)
        rc = proc.wait(5)
        tap.ok(rc == 0, LISTENER_TESTS[4], rc)
        c.close()
    except Exception as e:  # a hung or dead agent fails the rest, visibly
        tap.ok(False, "listener: %s: %s" % (type(e).__name__, e))
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        try:
            os.unlink(path)
        except OSError:
            pass
        os.rmdir(d)


CGROUP_TESTS = ["cgroup: a setsid escapee dies with the exec",
                "cgroup: timeout kills the whole cgroup", "cgroup: CPU time reported",
                "cgroup: removed after EXIT", "cgroup: EXEC on a reused stream number"]


def cgroups(binary, tap, root):
    """The PID 1 code path (per-exec cgroup2, cgroup.kill, cpu.stat) on a
    cgroup2 directory delegated by the test script."""
    if not root:
        for name in CGROUP_TESTS:
            tap.skip(name, "no writable cgroup2 hierarchy")
        return
    a = Agent(binary, env=dict(os.environ, SBX_AGENT_CGROUP_ROOT=root))
    a.recv(lambda f: f[0] == F_HELLO)
    s = a.start(["sh", "-c", "setsid sleep 30 >/dev/null 2>&1 & sleep 0.1; pgrep -n -x sleep"])
    r = a.collect(s)
    esc = int(r.out or b"0")
    tap.ok(st(r)[0] == 0 and esc and pid_gone(esc), CGROUP_TESTS[0], vars(r))
    s = a.start(["sh", "-c", "setsid sleep 30 & sleep 30"], timeout_ms=200)
    a.wait_started(s)
    time.sleep(0.1)  # let sh fork both
    procs = open(os.path.join(root, "sbx-exec-%d" % s, "cgroup.procs")).read().split()
    r = a.collect(s)
    tap.ok(st(r)[:2] == (124, R_TIMEOUT) and len(procs) == 3 and all(pid_gone(int(p)) for p in procs),
           CGROUP_TESTS[1], (vars(r), procs))
    r = a.run(["sh", "-c", "i=0; while [ $i -lt 200000 ]; do i=$((i+1)); done"])
    tap.ok(st(r)[0] == 0 and r.exit.get(T_CPU_USER_US, 0) > 1000, CGROUP_TESTS[2], r.exit)
    deadline = time.monotonic() + 2
    while time.monotonic() < deadline and [d for d in os.listdir(root) if d.startswith("sbx-exec-")]:
        time.sleep(0.02)
    left = [d for d in os.listdir(root) if d.startswith("sbx-exec-")]
    tap.ok(not left, CGROUP_TESTS[3], left)
    os.mkdir(os.path.join(root, "sbx-exec-%d" % a.next_stream))  # as if rmdir still pended
    r = a.run(["true"])
    tap.ok(st(r)[0] == 0, CGROUP_TESTS[4], vars(r))
    os.rmdir(os.path.join(root, "sbx-exec-%d" % (a.next_stream - 1)))
    a.close()


def main():
    binary = sys.argv[1]
    tap = Tap()
    plan = 32 + len(CGROUP_TESTS) + len(LISTENER_TESTS)
    print("1..%d" % plan, flush=True)
    lifecycle(binary, tap)
    listener(binary, tap)
    cgroups(binary, tap, os.environ.get("SBX_TEST_CGROUP"))
    a = Agent(binary)
    a.recv(lambda f: f[0] == F_HELLO)
    for t in (basic, timeouts_and_signals, stdin_and_pty, stdin_1mib, credit_violation,
              concurrency, malformed, output_volume, measure):
        try:
            t(a, tap)
        except Exception as e:  # a hung or dead agent fails the rest, visibly
            tap.ok(False, "%s: %s: %s" % (t.__name__, type(e).__name__, e))
    rc = a.close()
    tap.ok(rc == 0, "agent exits 0 on host EOF")
    if tap.n != plan:
        tap.comment("planned %d tests, ran %d" % (plan, tap.n))
    return 1 if tap.failed or tap.n != plan else 0


if __name__ == "__main__":
    sys.exit(main())
