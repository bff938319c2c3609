#!/usr/bin/env python3
"""Write the frames of a guest agent that lies about forwarded connections
(tests/t1910-ports.t), for the busybox /init of tests/t1520's lying
template: HELLO on the agent port, then for the Nth PORT_CONNECT the
monitor sends, the frames in /portN.bin.  Root in a guest that has taken
PID 1 can send exactly these; the monitor must lose at most the
connection lied about, and keep nothing it was not owed.

The monitor numbers connections 1, 2, ... in the order it accepts them.
  port1: connected; a window (64 KiB) and one byte of 'a' in one frame;
         then 12 MiB of data, credit, EOFs, closes and connects for
         streams that were never opened.
  port2: connected; credit for 4 GiB never sent.
  port3: connected; EOF, then data after it.
  port4: refused, with escape sequences in the reason.
  port5: honest: connected, "ok\\n", EOF, close.

Usage: lying-port-guest.py DIR
"""
import os
import struct
import sys

F_HELLO, F_PORT_CONNECT, F_PORT_DATA, F_PORT_WINDOW, F_PORT_EOF, F_PORT_CLOSE = 1, 25, 26, 27, 28, 29
T_VERSION, T_KERNEL, T_CODE, T_MSG = 1, 2, 23, 24
WINDOW = 64 << 10


def frame(ftype, stream, payload=b""):
    return struct.pack("<IBBHI", len(payload), ftype, 0, 0, stream) + payload


def tlv(tag, val):
    return struct.pack("<HI", tag, len(val)) + val


def main():
    d = sys.argv[1]
    w = lambda name, data: open(os.path.join(d, name), "wb").write(data)
    w("hello.bin", frame(F_HELLO, 0, tlv(T_VERSION, struct.pack("<I", 1)) + tlv(T_KERNEL, b"lying-port-guest")))
    with open(os.path.join(d, "port1.bin"), "wb") as f:
        f.write(frame(F_PORT_CONNECT, 1))
        # One frame past the window: nothing of it may reach the client
        # (two frames could be legal: the monitor gives credit back as it
        # writes, before the guest has heard of it).
        f.write(frame(F_PORT_DATA, 1, b"a" * (WINDOW + 1)))
        chunk = b"z" * (64 << 10)
        for i in range(192):
            f.write(frame(F_PORT_DATA, 1000 + i, chunk))
        for s in (1000, 2000, 3000, 77, 0xffffffff, 0):
            f.write(frame(F_PORT_WINDOW, s, struct.pack("<I", 0xffffffff)))
            f.write(frame(F_PORT_EOF, s))
            f.write(frame(F_PORT_CLOSE, s))
            f.write(frame(F_PORT_CONNECT, s))
    w("port2.bin", frame(F_PORT_CONNECT, 2) + frame(F_PORT_WINDOW, 2, struct.pack("<I", 0xffffffff)))
    w("port3.bin", frame(F_PORT_CONNECT, 3) + frame(F_PORT_EOF, 3) + frame(F_PORT_DATA, 3, b"after the end"))
    w("port4.bin", frame(F_PORT_CLOSE, 4, tlv(T_CODE, struct.pack("<I", 4)) +
                         tlv(T_MSG, b"refused\x1b]0;pwned\x07\x1b[2J\x1b[31mred\x9b")))
    w("port5.bin", frame(F_PORT_CONNECT, 5) + frame(F_PORT_DATA, 5, b"ok\n") + frame(F_PORT_EOF, 5) +
      frame(F_PORT_CLOSE, 5))


main()
