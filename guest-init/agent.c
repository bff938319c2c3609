/* guest-init agent: serves the host over one byte stream (the virtio-serial
 * port as PID 1, an inherited socket in --agent-fd mode).
 *
 * One thread, one epoll loop.  PID 1 must never block on a single exec, so
 * every fd is nonblocking, every child runs in its own session (and cgroup
 * when we are PID 1 on cgroup2), and everything an exec produces goes into
 * one ordered output queue: a stream's output always precedes its EXIT.
 * The host is trusted more than the exec'd code but its frames are still
 * parsed defensively: a bad frame ends the operation it carried, never us. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/mman.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <sys/vfs.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <linux/vm_sockets.h>

#include "agent.h"
#include "init.h"
#include "port.h"

/* ---- output queue ------------------------------------------------------- */

static size_t outq_pending(const struct agent *a)
{
	return a->out.len - a->out_off;
}

/* What may be written now: all of it, or up to the hold (on_quiesce). */
static size_t outq_sendable(const struct agent *a)
{
	size_t end = a->held ? a->hold_end : a->out.len;

	return end > a->out_off ? end - a->out_off : 0;
}

void send_error(struct agent *a, uint32_t stream, uint32_t code, const char *msg)
{
	size_t off = sbx_frame_begin(&a->out, SBX_F_ERROR, stream);
	sbx_tlv_u32(&a->out, SBX_T_CODE, code);
	sbx_tlv_str(&a->out, SBX_T_MSG, msg);
	sbx_frame_end(&a->out, off);
}

void send_u32(struct agent *a, uint8_t type, uint32_t stream, uint16_t tag, uint32_t v)
{
	size_t off = sbx_frame_begin(&a->out, type, stream);
	sbx_tlv_u32(&a->out, tag, v);
	sbx_frame_end(&a->out, off);
}

static void send_hello(struct agent *a)
{
	struct utsname u;
	size_t off;

	if (uname(&u) < 0)
		memset(&u, 0, sizeof(u));
	off = sbx_frame_begin(&a->out, SBX_F_HELLO, 0);
	sbx_tlv_u32(&a->out, SBX_T_VERSION, SBX_PROTO_VERSION);
	sbx_tlv_str(&a->out, SBX_T_KERNEL, u.release);
	sbx_tlv_str(&a->out, SBX_T_HOSTNAME, u.nodename);
	sbx_tlv_u32(&a->out, SBX_T_FLAGS, SBX_GUEST_OUT_WINDOW | SBX_GUEST_KEEP_EXECS);
	sbx_frame_end(&a->out, off);
	a->hello_seen = 0;
}

static void host_lost(struct agent *a, int err)
{
	sbx_gports_reset(a->ports);
	if (a->lfd >= 0) {
		/* Listening (vsock): wait for the next host to connect, e.g.
		 * the monitor of a session restored from a snapshot, whose VMM
		 * has none of the old connections. */
		if (!a->host_down)
			sbx_guest_log("agent: host disconnected (%s)", err ? strerror(err) : "EOF");
		epoll_ctl(a->ep, EPOLL_CTL_DEL, a->host, NULL);
		close(a->host);
		a->host = -1;
		a->host_down = 1;
		a->host_out = 0;
		a->in_len = 0;
		return;
	}
	if (!a->is_pid1) {
		a->done = 1;
		a->rc = err ? -1 : 0;
		if (err)
			sbx_guest_log("agent: host channel: %s", strerror(err));
		return;
	}
	/* virtio-serial reads EOF (and polls HUP) while no host is attached;
	 * after a snapshot restore a new one attaches.  Whatever it sends
	 * starts a new byte stream, so a partial frame must not prefix it. */
	if (!a->host_down)
		sbx_guest_log("agent: host disconnected (%s)", err ? strerror(err) : "EOF");
	a->host_down = 1;
	a->in_len = 0;
	a->host_retry = now_ns() + RECONNECT_NS;
}

/* The host fd is edge-triggered.  EPOLLOUT is asked for only while output
 * waits (every write the host drains would otherwise wake us once more:
 * expensive under TCG), and while the host is away: a virtio-serial port
 * wakes its pollers on reconnect and then polls writable, not readable. */
static void host_interest(struct agent *a)
{
	int want = a->host_down || outq_sendable(a);
	struct epoll_event ev = { .events = EPOLLIN | EPOLLET | (want ? EPOLLOUT : 0), .data.u64 = K_HOST };

	if (a->host < 0)
		return;
	if (want != a->host_out && epoll_ctl(a->ep, EPOLL_CTL_MOD, a->host, &ev) == 0)
		a->host_out = want;
}

static uint32_t outq_frame_len(const struct agent *a)
{
	const uint8_t *h = a->out.data + a->out_frame;

	return SBX_FRAME_HDR + ((uint32_t)h[0] | (uint32_t)h[1] << 8 | (uint32_t)h[2] << 16 | (uint32_t)h[3] << 24);
}

/* Frames go into the queue whole, so their boundaries can be followed as
 * bytes leave. */
static void outq_sent(struct agent *a)
{
	while (a->out_frame + SBX_FRAME_HDR <= a->out_off && a->out_frame + outq_frame_len(a) <= a->out_off)
		a->out_frame += outq_frame_len(a);
}

/* A new connection starts a new byte stream: the rest of a frame the old
 * one took only part of is dropped, so the new host reads whole frames. */
static void outq_resync(struct agent *a)
{
	if (a->out_off > a->out_frame) {
		a->out_off = a->out_frame + outq_frame_len(a);
		a->out_frame = a->out_off;
	}
}

static void host_flush(struct agent *a)
{
	if (a->out.oom) {
		/* Only reachable when realloc fails, i.e. the guest is out of
		 * memory: frame boundaries are lost, the host will resync. */
		sbx_guest_log("agent: output queue out of memory, dropping it");
		sbx_buf_free(&a->out);
		a->out_off = a->out_frame = 0;
	}
	while (!a->host_down && outq_sendable(a)) {
		ssize_t w = write(a->host, a->out.data + a->out_off, outq_sendable(a));
		if (w > 0) {
			a->out_off += (size_t)w;
			outq_sent(a);
			a->hello_seen = 1;
		} else if (w < 0 && errno == EINTR) {
			continue;
		} else if (w < 0 && errno == EAGAIN) {
			break;
		} else {
			host_lost(a, w < 0 ? errno : EPIPE);
			break;
		}
	}
	if (!outq_pending(a)) {
		if (a->out.cap > (4u << 20))
			sbx_buf_free(&a->out); /* give a burst's memory back */
		sbx_buf_reset(&a->out);
		a->out_off = a->out_frame = a->hold_end = 0;
	} else if (a->out_frame > (1u << 20) && a->out_frame > a->out.len / 2) {
		/* Keep the frame being written whole (see outq_resync). */
		memmove(a->out.data, a->out.data + a->out_frame, a->out.len - a->out_frame);
		a->out.len -= a->out_frame;
		a->out_off -= a->out_frame;
		a->hold_end = a->hold_end > a->out_frame ? a->hold_end - a->out_frame : 0;
		a->out_frame = 0;
	}
	host_interest(a);
}

/* The host took the save (QUIESCE RELEASE), a restored VM has its new
 * identity, or a new host connected: what was held goes out, in order. */
void hold_release(struct agent *a)
{
	if (!a->held)
		return;
	a->held = 0;
	a->hold_end = 0;
	host_flush(a);
}

/* ---- epoll bookkeeping -------------------------------------------------- */

static uint64_t io_tag(const struct agent *a, const struct exec *e, int io)
{
	return K_IO | (uint64_t)io << 8 | (uint64_t)(e - a->ex) << 16 | (uint64_t)e->gen << 32;
}

/* Level-triggered interest in one exec fd: output while the queue has room
 * and the host's credit lasts, stdin while bytes wait for the child. */
void io_watch(struct agent *a, struct exec *e, int io)
{
	int want = e->fd[io] >= 0 && (io == IO_IN ? e->in.len > e->in_off : !a->paused && out_may_send(e));
	struct epoll_event ev = { .events = io == IO_IN ? EPOLLOUT : EPOLLIN, .data.u64 = io_tag(a, e, io) };

	if (want == e->polled[io])
		return;
	if (epoll_ctl(a->ep, want ? EPOLL_CTL_ADD : EPOLL_CTL_DEL, e->fd[io], &ev) == 0)
		e->polled[io] = want;
	else
		sbx_guest_log("agent: epoll_ctl: %s", strerror(errno));
}

void io_close(struct agent *a, struct exec *e, int io)
{
	if (e->fd[io] < 0)
		return;
	/* A pty's IN is a dup of OUT: close alone would not unregister. */
	if (e->polled[io])
		epoll_ctl(a->ep, EPOLL_CTL_DEL, e->fd[io], NULL);
	e->polled[io] = 0;
	close(e->fd[io]);
	e->fd[io] = -1;
}

static void set_paused(struct agent *a, int paused)
{
	a->paused = paused;
	sbx_gports_pause(a->ports, paused);
	for (unsigned i = 0; i < MAX_EXECS; i++) {
		if (!a->ex[i].used)
			continue;
		io_watch(a, &a->ex[i], IO_OUT);
		io_watch(a, &a->ex[i], IO_ERR);
	}
}

static void dispatch(struct agent *a, const struct sbx_frame *f)
{
	/* A save unmounted the workspace (on_quiesce); whatever the host
	 * says next comes after it: the saved guest's next frame (the
	 * monitor sends a PING at least) or a restored one's IDENTITY. */
	if (f->type != SBX_F_QUIESCE)
		sbx_guest_ws_up();
	/* A claim's IDENTITY, SECRETS and PING come together: the PONG that
	 * makes the session ready leaves before /etc/hosts is replaced. */
	if (f->type != SBX_F_PING && f->type != SBX_F_SECRETS && f->type != SBX_F_IDENTITY)
		sbx_guest_hosts_flush();
	switch (f->type) {
	case SBX_F_PING: on_ping(a, f); break;
	case SBX_F_EXEC: exec_start(a, f->stream, f->payload, f->len); break;
	case SBX_F_STDIN:
	case SBX_F_STDIN_EOF:
	case SBX_F_WINDOW:
	case SBX_F_RESIZE:
	case SBX_F_SIGNAL:
	case SBX_F_KILL:
		if (f->stream == 0)
			send_error(a, 0, ERR_INVALID, "exec operation on stream 0");
		else
			on_exec_frame(a, f);
		break;
	case SBX_F_SECRETS: on_secrets(a, f); break;
	case SBX_F_PORT_CONNECT:
	case SBX_F_PORT_DATA:
	case SBX_F_PORT_WINDOW:
	case SBX_F_PORT_EOF:
	case SBX_F_PORT_CLOSE: sbx_gports_frame(a->ports, f, &a->out); break;
	case SBX_F_QUIESCE: on_quiesce(a, f); break;
	case SBX_F_IDENTITY: on_identity(a, f); break;
	case SBX_F_SHUTDOWN:
		shutdown_all(a);
		if (a->is_pid1)
			sbx_guest_poweroff();
		a->done = 1;
		break;
	case SBX_F_ERROR:
	case SBX_F_PONG: break; /* answering would let two peers bounce errors forever */
	default: send_error(a, f->stream, ERR_INVALID, "unexpected frame type"); break;
	}
}

static void parse_input(struct agent *a)
{
	size_t off = 0;

	while (!a->done && a->in_len - off >= SBX_FRAME_HDR) {
		struct sbx_frame f;
		int bad = sbx_frame_hdr_get(a->in + off, &f, SBX_FRAME_MAX);
		if (f.len > SBX_FRAME_MAX) {
			/* The length is all we have to find the next frame. */
			sbx_guest_log("agent: frame length %u out of bounds: input out of sync", f.len);
			send_error(a, 0, ERR_INVALID, "frame length out of bounds; input dropped");
			a->in_len = 0;
			return;
		}
		if (a->in_len - off - SBX_FRAME_HDR < f.len)
			break;
		f.payload = a->in + off + SBX_FRAME_HDR;
		off += SBX_FRAME_HDR + f.len;
		if (bad)
			send_error(a, f.stream, ERR_INVALID, "malformed frame header");
		else
			dispatch(a, &f);
	}
	if (off) {
		memmove(a->in, a->in + off, a->in_len - off);
		a->in_len -= off;
	}
}

/* The host fd is edge-triggered: read until EAGAIN. */
static void host_read(struct agent *a)
{
	while (!a->done && !a->host_down) {
		ssize_t r = read(a->host, a->in + a->in_len, IN_CAP - a->in_len);
		if (r > 0) {
			a->in_len += (size_t)r;
			parse_input(a);
		} else if (r < 0 && errno == EINTR) {
			continue;
		} else if (r < 0 && errno == EAGAIN) {
			break;
		} else {
			host_lost(a, r < 0 ? errno : 0);
		}
	}
}

/* A host connecting to our vsock listener.  One host at a time: a new one
 * replaces the old, whose VMM may be gone without a word (a restore). */
static void host_accept(struct agent *a)
{
	struct sockaddr_storage ss;
	socklen_t sl = sizeof(ss);
	struct epoll_event ev = { .events = EPOLLIN | EPOLLOUT | EPOLLET, .data.u64 = K_HOST };
	int fd = accept4(a->lfd, (struct sockaddr *)&ss, &sl, SOCK_NONBLOCK | SOCK_CLOEXEC);

	if (fd < 0)
		return;
	/* Over vsock only the host (CID 2) speaks for the host. */
	if (ss.ss_family == AF_VSOCK && ((struct sockaddr_vm *)&ss)->svm_cid != VMADDR_CID_HOST) {
		close(fd);
		return;
	}
	if (a->host >= 0) {
		epoll_ctl(a->ep, EPOLL_CTL_DEL, a->host, NULL);
		close(a->host);
	}
	a->host = fd;
	if (epoll_ctl(a->ep, EPOLL_CTL_ADD, fd, &ev) < 0) {
		sbx_guest_log("agent: accept: %s", strerror(errno));
		close(fd);
		a->host = -1;
		a->host_down = 1;
		return;
	}
	if (a->accepted++)
		sbx_guest_log("agent: host reconnected");
	a->host_out = 1;
	a->host_down = 0;
	a->in_len = 0;
	outq_resync(a);
	a->held = 0; /* a new host: the old one will not release it */
	/* A new host (say, after a snapshot restore) needs a readiness signal. */
	if (a->hello_seen)
		send_hello(a);
	host_read(a);
}

static void host_check(struct agent *a)
{
	struct pollfd p = { .fd = a->host, .events = POLLIN | POLLOUT };

	if (poll(&p, 1, 0) < 0 || (p.revents & (POLLHUP | POLLERR | POLLNVAL))) {
		a->host_retry = now_ns() + RECONNECT_NS;
		return;
	}
	sbx_guest_log("agent: host reconnected");
	a->host_down = 0;
	a->host_retry = 0;
	a->held = 0; /* a new host: the old one will not release it */
	/* A new host (say, after a snapshot restore) needs a readiness signal. */
	if (a->hello_seen)
		send_hello(a);
	host_read(a);
}

/* ---- the loop ----------------------------------------------------------- */

static void on_io(struct agent *a, uint64_t tag)
{
	unsigned idx = (unsigned)(tag >> 16) & 0xffffu, io = (unsigned)(tag >> 8) & 0xffu;
	struct exec *e = idx < MAX_EXECS ? &a->ex[idx] : NULL;

	if (!e || !e->used || e->gen != (uint32_t)(tag >> 32) || io >= IO_N || e->fd[io] < 0)
		return; /* released earlier in this batch */
	if (io == IO_IN) {
		stdin_pump(a, e);
		return;
	}
	for (int i = 0; i < 4 && outq_pending(a) <= OUTQ_CAP && out_may_send(e); i++) {
		size_t want = e->out_flow && e->out_credit < SBX_DATA_CHUNK ? e->out_credit : SBX_DATA_CHUNK;
		/* Read straight into the queue, behind the frame's header: no
		 * copy through a buffer, which under TCG costs as much as the
		 * port's own.  A failed reserve leaves the bytes in the pipe
		 * (it is level-triggered) and the queue marked out of memory,
		 * for host_flush. */
		size_t off = sbx_frame_begin(&a->out, io == IO_ERR ? SBX_F_STDERR : SBX_F_STDOUT, e->stream);
		if (sbx_buf_reserve(&a->out, want) < 0) {
			a->out.len = off;
			return;
		}
		ssize_t n = read(e->fd[io], a->out.data + a->out.len, want);
		if (n <= 0)
			a->out.len = off; /* no frame */
		if (n > 0) {
			a->out.len += (size_t)n;
			sbx_frame_end(&a->out, off);
			if (e->out_flow && (e->out_credit -= (uint32_t)n) == 0) {
				/* Out of credit: both streams wait for WINDOW. */
				io_watch(a, e, IO_OUT);
				io_watch(a, e, IO_ERR);
				return;
			}
			if ((size_t)n < want)
				return;
		} else if (n < 0 && errno == EINTR) {
			continue;
		} else if (n < 0 && errno == EAGAIN) {
			return;
		} else {
			/* EOF, or EIO from a pty master once the slave side is
			 * closed everywhere. */
			io_close(a, e, io);
			if (e->pty)
				io_close(a, e, IO_IN);
			maybe_finish(a, e);
			return;
		}
	}
}

static void run_deadlines(struct agent *a)
{
	uint64_t now = now_ns();

	for (unsigned i = 0; i < MAX_EXECS; i++) {
		struct exec *e = &a->ex[i];
		if (!e->used)
			continue;
		if (!e->reaped && e->deadline && now >= e->deadline)
			exec_kill(a, e, SBX_R_TIMEOUT);
		if (e->reaped && now >= e->drain_deadline) {
			if (a->paused || !out_may_send(e)) { /* the host is behind, not the exec */
				e->drain_deadline = now + RECONNECT_NS;
				continue;
			}
			io_close(a, e, IO_OUT);
			io_close(a, e, IO_ERR);
			maybe_finish(a, e);
		}
	}
	if (a->host_down && a->lfd < 0 && now >= a->host_retry)
		host_check(a);
}

static int next_timeout_ms(const struct agent *a)
{
	uint64_t next = UINT64_MAX, now;

	for (unsigned i = 0; i < MAX_EXECS; i++) {
		const struct exec *e = &a->ex[i];
		if (!e->used)
			continue;
		if (!e->reaped && e->deadline && e->deadline < next)
			next = e->deadline;
		if (e->reaped && e->drain_deadline < next)
			next = e->drain_deadline;
	}
	if (a->rm_next && a->rm_next < next)
		next = a->rm_next;
	if (a->host_down && a->lfd < 0 && a->host_retry < next)
		next = a->host_retry;
	if (a->hello_check && a->hello_check < next)
		next = a->hello_check;
	if (next == UINT64_MAX)
		return -1;
	now = now_ns();
	if (next <= now)
		return 0;
	next = (next - now + NS_PER_MS - 1) / NS_PER_MS;
	return next > INT_MAX ? INT_MAX : (int)next;
}

static void pkg_reports(struct agent *a);

static int handle_events(struct agent *a, int timeout_ms)
{
	struct epoll_event ev[64];
	int n = epoll_wait(a->ep, ev, 64, timeout_ms);

	if (n < 0 && errno != EINTR) {
		sbx_guest_log("agent: epoll_wait: %s", strerror(errno));
		a->done = !a->is_pid1;
		a->rc = -1;
		return -1;
	}
	for (int i = 0; i < n && !a->done; i++) {
		uint64_t tag = ev[i].data.u64;
		switch (tag & 0xff) {
		case K_HOST:
			if (a->host_down && a->lfd < 0)
				host_check(a);
			else if (!a->host_down && ev[i].events & (EPOLLIN | EPOLLHUP | EPOLLERR))
				host_read(a);
			break;
		case K_LISTEN: host_accept(a); break;
		case K_SIG: reap(a); break;
		case K_IO: on_io(a, tag); break;
		case K_PORT: sbx_gports_io(a->ports, tag, ev[i].events, &a->out); break;
		case K_PKG: pkg_reports(a); break;
		}
	}
	return n;
}

/* The first HELLO still queued HELLO_CHECK_NS after boot: said on the
 * console with what the port polls (POLLHUP: the host side of the port is
 * not open), so a boot that never answers shows where it stopped. */
#define HELLO_CHECK_NS (5000 * NS_PER_MS)
static void hello_check(struct agent *a)
{
	if (!a->hello_check)
		return;
	if (a->hello_seen || a->lfd >= 0) {
		if (a->hello_reports)
			sbx_guest_log("agent: HELLO sent after all");
		a->hello_check = 0;
		return;
	}
	uint64_t now = now_ns();
	if (now < a->hello_check)
		return;
	struct pollfd p = { .fd = a->host, .events = POLLIN | POLLOUT };
	int r = poll(&p, 1, 0);
	sbx_guest_log(
		"agent: HELLO not taken by the port after %llu s: poll %d revents 0x%x, %zu bytes queued, host %s",
		(unsigned long long)((HELLO_CHECK_NS / (1000 * NS_PER_MS)) << a->hello_reports), r, (unsigned)p.revents,
		outq_pending(a), a->host_down ? "down" : "up");
	a->hello_reports++;
	a->hello_check = a->hello_reports < 4 ? now + (HELLO_CHECK_NS << (a->hello_reports - 1)) : 0;
}

/* The package responder's refusals (pkg.c), each to the host as
 * PKG_REFUSED; what does not fit a line is dropped. */
static void pkg_reports(struct agent *a)
{
	char buf[4096];
	ssize_t r;
	while ((r = read(sbx_guest_pkg_report_fd, buf, sizeof(buf) - 1)) > 0) {
		buf[r] = 0;
		for (char *save = NULL, *l = strtok_r(buf, "\n", &save); l; l = strtok_r(NULL, "\n", &save)) {
			char *sp = strchr(l, ' ');
			if (!sp || strlen(sp + 1) > SBX_PKG_REQUEST_MAX)
				continue;
			*sp = 0;
			size_t off = sbx_frame_begin(&a->out, SBX_F_PKG_REFUSED, 0);
			sbx_tlv_str(&a->out, SBX_T_PKG_TYPE, l);
			sbx_tlv_str(&a->out, SBX_T_REQUEST, sp + 1);
			sbx_frame_end(&a->out, off);
		}
	}
}

static void pkg_watch(struct agent *a)
{
	struct epoll_event ev = { .events = EPOLLIN, .data.u64 = K_PKG };
	if (!a->pkg_watched && sbx_guest_pkg_report_fd >= 0 && a->is_pid1 &&
	    epoll_ctl(a->ep, EPOLL_CTL_ADD, sbx_guest_pkg_report_fd, &ev) == 0)
		a->pkg_watched = 1;
}

static void loop_once(struct agent *a)
{
	int idle = cg_idle_work(a), n;

	/* With deferred cgroup work, look for events without sleeping and
	 * do one unit of that work only when there are none. */
	n = handle_events(a, idle ? 0 : next_timeout_ms(a));
	if (n < 0)
		return;
	/* An exec started in this round has usually finished by the time
	 * clone returns (the vfork child runs first on our one vCPU): one
	 * more look lets STARTED and EXIT leave in one write, i.e. one VM
	 * exit, instead of two. */
	if (a->started && !a->done) {
		a->started = 0;
		handle_events(a, 0);
	}
	if (!a->done)
		run_deadlines(a);
	pkg_watch(a); /* a responder started at boot, or at a claim */
	host_flush(a);
	hello_check(a);
	sbx_guest_hosts_flush(); /* what IDENTITY deferred, its answer gone */
	if (n == 0 && idle && !a->done)
		cg_idle(a);
	else if (a->nrm > CG_RM_BACKLOG && now_ns() >= a->rm_next)
		cg_rmdir_one(a); /* a host that never lets us idle */
	if (!a->paused && outq_pending(a) > OUTQ_CAP)
		set_paused(a, 1);
	else if (a->paused && outq_pending(a) <= OUTQ_CAP / 2)
		set_paused(a, 0);
}

/* ---- setup -------------------------------------------------------------- */

static int agent_init(struct agent *a, int fd, int is_pid1)
{
	struct epoll_event ev = { .events = EPOLLIN | EPOLLOUT | EPOLLET, .data.u64 = K_HOST };
	struct sigaction sa;
	struct statfs sf;
	const char *cgroot;
	sigset_t ss;
	int listening = 0;
	socklen_t sl = sizeof(listening);

	/* A listening socket (vsock, or a unix socket in --agent-fd mode):
	 * hosts connect to it, one at a time; else fd is the host. */
	if (getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &sl) < 0)
		listening = 0;
	a->host = listening ? -1 : fd;
	a->lfd = listening ? fd : -1;
	a->host_down = listening;
	if (listening) {
		ev.events = EPOLLIN;
		ev.data.u64 = K_LISTEN;
	}
	a->is_pid1 = is_pid1;
	a->cgroot = a->sig = a->ep = a->devnull = a->urandom = -1;
	/* Children get our 0-2 replaced; were one closed, a pipe could land
	 * there and be clobbered by the dup2 dance. */
	for (int i = 0; i < 3; i++)
		if (fcntl(i, F_GETFD) < 0 && open("/dev/null", O_RDWR) < 0)
			return -1;
	for (int s = 1; s < 64; s++)
		if (sigaction(s, NULL, &sa) == 0 && sa.sa_handler == SIG_IGN && s != SIGPIPE)
			a->ign[a->nign++] = s;
	a->ign[a->nign++] = SIGPIPE;
	signal(SIGPIPE, SIG_IGN);
	sigemptyset(&ss);
	sigaddset(&ss, SIGCHLD);
	sigprocmask(SIG_BLOCK, &ss, NULL);

	if (fcntl(fd, F_SETFD, FD_CLOEXEC) < 0 || fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK) < 0 ||
	    (a->in = malloc(IN_CAP)) == NULL || (a->devnull = open("/dev/null", O_RDONLY | O_CLOEXEC)) < 0 ||
	    (a->sig = signalfd(-1, &ss, SFD_NONBLOCK | SFD_CLOEXEC)) < 0 ||
	    (a->ep = epoll_create1(EPOLL_CLOEXEC)) < 0 || (a->ports = sbx_gports_new(a->ep, K_PORT)) == NULL ||
	    epoll_ctl(a->ep, EPOLL_CTL_ADD, fd, &ev) < 0)
		return -1;
	/* Opened now, not at the claim or restore that reseeds through it:
	 * that open's path walk was a fifth of the guest's identity step
	 * under TCG (0.22 of 1.1 ms).  A failure here is told there. */
	if (is_pid1)
		a->urandom = open("/dev/urandom", O_WRONLY | O_CLOEXEC);
	a->host_out = !listening;
	ev = (struct epoll_event){ .events = EPOLLIN, .data.u64 = K_SIG };
	if (epoll_ctl(a->ep, EPOLL_CTL_ADD, a->sig, &ev) < 0)
		return -1;
	/* Per-exec cgroups at the root as PID 1 of the guest.  In --agent-fd
	 * mode we would be carving up the host's hierarchy, so only under a
	 * cgroup2 directory the tests delegate to us explicitly. */
	/* As PID 1 every exec's cgroup lives under one parent, "execs", whose
	 * pids.max caps the session's processes as a whole. */
	if (is_pid1 && (mkdir(CG_ROOT "/execs", 0755) == 0 || errno == EEXIST)) {
		int sfd = open(CG_ROOT "/execs/cgroup.subtree_control", O_WRONLY | O_CLOEXEC);
		if (sfd >= 0) {
			if (write(sfd, "+cpu +memory +pids", 18) != 18)
				sbx_guest_log("agent: execs subtree_control: %s", strerror(errno));
			close(sfd);
		}
	}
	cgroot = is_pid1 ? CG_ROOT "/execs" : getenv("SBX_AGENT_CGROUP_ROOT");
	if (cgroot && statfs(cgroot, &sf) == 0 && sf.f_type == CGROUP2_SUPER_MAGIC)
		a->cgroot = open(cgroot, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (cgroot && a->cgroot < 0)
		sbx_guest_log("agent: no cgroup2 at %s: execs are killed by process group", cgroot);
	return 0;
}

static void agent_free(struct agent *a)
{
	for (unsigned i = 0; i < MAX_EXECS; i++)
		if (a->ex[i].used)
			exec_release(a, &a->ex[i]);
	sbx_gports_free(a->ports);
	closep(&a->ep);
	closep(&a->sig);
	closep(&a->devnull);
	closep(&a->urandom);
	if (a->lfd >= 0)
		closep(&a->host); /* ours: accepted here (the listener is the caller's) */
	for (unsigned i = 0; i < a->npool; i++)
		cg_close(&a->pool[i]);
	closep(&a->cgroot);
	if (a->stack)
		munmap(a->stack, CHILD_STACK);
	sbx_buf_free(&a->out);
	free(a->in);
	free(a);
}

/* Best effort before returning in --agent-fd mode: the test harness wants
 * the frames it was sent (nothing waits for us as PID 1). */
static void drain_output(struct agent *a)
{
	uint64_t until = now_ns() + 1000 * NS_PER_MS;

	while (!a->host_down && outq_sendable(a) && now_ns() < until) {
		struct pollfd p = { .fd = a->host, .events = POLLOUT };
		if (poll(&p, 1, 100) < 0 || (p.revents & (POLLHUP | POLLERR)))
			break;
		host_flush(a);
	}
}

int sbx_agent_run(int fd, int is_pid1)
{
	struct agent *a = calloc(1, sizeof(*a));
	int rc;

	if (!a || agent_init(a, fd, is_pid1) < 0) {
		sbx_guest_log("agent: setup: %s", strerror(errno));
		if (a)
			agent_free(a);
		return -1;
	}
	/* The cost of a guest's first exec is paid before readiness by the
	 * monitor's warm-up exec (monitor/warm.c), through this loop. */
	send_hello(a);
	host_flush(a);
	sbx_guest_phase(a->hello_seen ? "hello sent" : "hello queued");
	if (!a->hello_seen && is_pid1)
		a->hello_check = now_ns() + HELLO_CHECK_NS;
	while (!a->done)
		loop_once(a);
	shutdown_all(a);
	if (a->rc == 0)
		drain_output(a);
	rc = a->rc;
	agent_free(a);
	return rc;
}
