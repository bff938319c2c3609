#!/usr/bin/env python3
"""Drive `sbx-exec -it SESSION -- sh` from a real pty, as a person would:
read the prompt, type, press Ctrl-C, use job control, resize.  Prints TAP
lines (numbered from argv[2]) and exits with the number of failures."""
import os, pty, select, sys, time, fcntl, termios, struct, signal

session, first = sys.argv[1], int(sys.argv[2])
n, fails = first - 1, 0

def ok(cond, what):
    global n, fails
    n += 1
    print(("ok" if cond else "not ok") + f" {n} - {what}", flush=True)
    fails += 0 if cond else 1

pid, fd = pty.fork()
if pid == 0:
    os.execvp("sbx-exec", ["sbx-exec", "-it", session, "--", "sh", "-i"])
fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", 33, 101, 0, 0))
buf = b""

def expect(pat, timeout=20):
    global buf
    end = time.time() + timeout
    while time.time() < end:
        if pat in buf:
            i = buf.index(pat) + len(pat)
            seen, buf = buf[:i], buf[i:]
            return seen
        r, _, _ = select.select([fd], [], [], 0.2)
        if r:
            try:
                buf += os.read(fd, 4096)
            except OSError:
                break
    sys.stderr.write(f"# timeout waiting for {pat!r}; have {buf[-300:]!r}\n")
    return None

def send(s):
    os.write(fd, s.encode() if isinstance(s, str) else s)

ok(expect(b"$ ") is not None, "-it shows a shell prompt")
send("tty; echo MARK$((1+0))\n")
out = expect(b"MARK1\r\n")
ok(out is not None and b"/dev/pts/" in out, "the command runs on a pty in the guest")
expect(b"$ ")
send("stty size; echo MARK$((2+0))\n")
out = expect(b"MARK2\r\n")
ok(out is not None and b"33 101" in out, "the window size is passed")
expect(b"$ ")
fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
os.kill(pid, signal.SIGWINCH)
time.sleep(0.5)
send("stty size; echo MARK$((3+0))\n")
out = expect(b"MARK3\r\n")
ok(out is not None and b"40 120" in out, "a window size change follows")
expect(b"$ ")
send("sleep 100\n")
time.sleep(1.0)
send(b"\x03")
expect(b"$ ")
send("echo status=$?; echo MARK$((5+0))\n")
out = expect(b"MARK5\r\n")
ok(out is not None and b"status=130" in out, "Ctrl-C interrupts the guest command, not sbx-exec")
send("sleep 200 &\n")
expect(b"$ ")
send("jobs; echo MARK$((4+0))\n")
out = expect(b"MARK4\r\n")
ok(out is not None and b"sleep 200" in out, "job control: a background job is listed")
expect(b"$ ")
send("exit 3\n")
_, status = os.waitpid(pid, 0)
ok(os.WIFEXITED(status) and os.WEXITSTATUS(status) == 3, "exit status of the shell passes through")
sys.exit(fails)
