#!/usr/bin/env python3
"""Write the frames of a lying guest agent (tests/t1520-guest-bounds.t).

The guest is real (a microVM under the real VMM); only its /init is not
guest-init: a busybox script that says HELLO on the agent port and answers
each EXEC it reads with the frames in /execN.bin, made here.  That is what
root in a guest can do (it owns the port once it controls PID 1), so the
monitor must survive it.

Usage: lying-guest.py DIR MODE
  MODE exit-flood: exec 1 sends STARTED, 9 MiB of stdout (more than a slow
        client's 8 MiB queue, so the client lags), EXIT status 7, then
        1000 more EXIT frames (status 99), more stdout and an ERROR;
        exec 2 sends STARTED and EXIT 0.
  MODE hang: exec 1 sends STARTED and a line of output, and never EXIT,
        whatever its timeout (the guest's timeout defeated).
  MODE error-text: execs 1 and 2 send an ERROR (before STARTED) whose message
        carries terminal escape sequences and control bytes.
"""
import os
import struct
import sys

F_HELLO, F_STARTED, F_STDOUT, F_EXIT, F_ERROR = 1, 3, 5, 12, 13
T_VERSION, T_KERNEL, T_STATUS, T_SIGNO, T_REASON, T_WALL_US = 1, 2, 16, 17, 18, 19
T_CODE, T_MSG = 23, 24
R_EXITED = 1


def frame(ftype, stream, payload=b""):
    return struct.pack("<IBBHI", len(payload), ftype, 0, 0, stream) + payload


def tlv(tag, val):
    return struct.pack("<HI", tag, len(val)) + val


def u32(tag, v):
    return tlv(tag, struct.pack("<I", v))


def u64(tag, v):
    return tlv(tag, struct.pack("<Q", v))


def exit_frame(stream, status, wall_us):
    return frame(F_EXIT, stream, u32(T_STATUS, status) + u32(T_SIGNO, 0) + u32(T_REASON, R_EXITED)
                 + u64(T_WALL_US, wall_us))


def main():
    d, mode = sys.argv[1], sys.argv[2]
    with open(os.path.join(d, "hello.bin"), "wb") as f:
        f.write(frame(F_HELLO, 0, u32(T_VERSION, 1) + tlv(T_KERNEL, b"lying-guest")))
    if mode == "exit-flood":
        with open(os.path.join(d, "exec1.bin"), "wb") as f:
            f.write(frame(F_STARTED, 1))
            chunk = b"x" * (64 << 10)
            for _ in range(9 * 16):
                f.write(frame(F_STDOUT, 1, chunk))
            f.write(exit_frame(1, 7, 1000))
            for i in range(1000):
                f.write(exit_frame(1, 99, 2000 + i))
                if i % 100 == 0:
                    f.write(frame(F_STDOUT, 1, b"after the end\n"))
            f.write(frame(F_ERROR, 1, u32(T_CODE, 3) + tlv(T_MSG, b"after the end")))
        with open(os.path.join(d, "exec2.bin"), "wb") as f:
            f.write(frame(F_STARTED, 2) + exit_frame(2, 0, 1000))
    elif mode == "error-text":
        msg = b"refused\x1b]0;pwned\x07\x1b[2J\x1b[31mred\rover\x08\x9b"
        for n in (1, 2):
            with open(os.path.join(d, "exec%d.bin" % n), "wb") as f:
                f.write(frame(F_ERROR, n, u32(T_CODE, 3) + tlv(T_MSG, msg)))
    elif mode == "hang":
        with open(os.path.join(d, "exec1.bin"), "wb") as f:
            f.write(frame(F_STARTED, 1) + frame(F_STDOUT, 1, b"started, and never ends\n"))
    else:
        sys.exit("unknown mode " + mode)


main()
