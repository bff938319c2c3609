/* Unit tests for the monitor client's frame loop (TAP): a socketpair whose
 * far end speaks real proto.c frames, whole, cut in half, late, garbage. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "monclient.h"
#include "util.h"

#include "tap.h"

struct seen {
	int n, types[8];
	uint8_t want; /* the frame type that ends the call */
};

static int note(void *ctx, struct sbx_mon *m, const struct sbx_frame *f, struct sbx_err *err)
{
	struct seen *s = ctx;
	if (s->n < 8)
		s->types[s->n++] = f->type;
	if (f->type == SBX_F_ERROR)
		return sbx_mon_error(f, "refused", err);
	return f->type == s->want;
}

/* A connection to peer[1]; the test writes the monitor's side on peer[0]. */
static void pair(struct sbx_mon *m, int peer[2])
{
	memset(m, 0, sizeof *m);
	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, peer) < 0)
		abort();
	m->fd = peer[1];
}

static void put(int fd, const struct sbx_buf *b, size_t from, size_t to)
{
	if (sbx_write_all(fd, b->data + from, to - from) < 0)
		abort();
}

/* The peer, forked: writes b[0..cut), waits ms, writes the rest (or, with
 * close_after_cut, closes instead). */
static pid_t peer_later(int fd, const struct sbx_buf *b, size_t cut, int ms, int close_after_cut)
{
	pid_t pid = fork();
	if (pid == 0) {
		put(fd, b, 0, cut);
		usleep((useconds_t)ms * 1000);
		if (!close_after_cut)
			put(fd, b, cut, b->len);
		_exit(0);
	}
	return pid;
}

static void reap(pid_t pid)
{
	int st;
	waitpid(pid, &st, 0);
}

static void test_whole_and_split(void)
{
	struct sbx_mon m;
	int peer[2];
	struct sbx_buf b = { 0 };
	struct seen s = { .want = SBX_F_KILL };
	struct sbx_err err = { 0 };
	pair(&m, peer);
	size_t off = sbx_frame_begin(&b, SBX_F_HELLO, 0);
	sbx_tlv_u32(&b, SBX_T_VERSION, SBX_PROTO_VERSION);
	sbx_frame_end(&b, off);
	sbx_frame_raw(&b, SBX_F_KILL, 3, NULL, 0);
	/* Cut inside the first header, then the rest 50 ms later. */
	pid_t pid = peer_later(peer[0], &b, 5, 50, 0);
	int r = sbx_mon_loop(&m, 5000, note, NULL, &s, &err);
	reap(pid);
	ok(r == 1 && s.n == 2 && s.types[0] == SBX_F_HELLO && s.types[1] == SBX_F_KILL,
	   "a frame cut inside its header is put together: HELLO, then KILL ends the loop");

	/* Two frames in one write, taken one by one. */
	put(peer[0], &b, 0, b.len);
	struct sbx_frame f;
	uint8_t buf[64];
	int a = sbx_mon_next(&m, 2000, &f, buf, sizeof buf, &err);
	int a_type = f.type;
	int c = sbx_mon_next(&m, 2000, &f, buf, sizeof buf, &err);
	ok(a == 0 && a_type == SBX_F_HELLO && c == 0 && f.type == SBX_F_KILL && f.stream == 3,
	   "sbx_mon_next: two frames from one read, the second kept for the next call");

	/* Over the caller's cap: garbage, not a short copy. */
	sbx_buf_reset(&b);
	uint8_t big[100] = { 0 };
	sbx_frame_raw(&b, SBX_F_STDOUT, 1, big, sizeof big);
	put(peer[0], &b, 0, b.len);
	ok(sbx_mon_next(&m, 2000, &f, buf, sizeof buf, &err) < 0 && m.fail == SBX_MON_GARBAGE && m.max == 0,
	   "a frame over sbx_mon_next's cap is garbage (and the cap is not left behind)");
	close(peer[0]);
	sbx_mon_close(&m);
	sbx_buf_free(&b);
}

/* Half a STDOUT frame, then (gone) the monitor closes, or it says no more. */
static void test_half(int gone)
{
	struct sbx_mon m;
	int peer[2];
	struct sbx_buf b = { 0 };
	struct seen s = { .want = SBX_F_EXIT };
	struct sbx_err err = { 0 };
	pair(&m, peer);
	uint8_t p[40] = { 1 };
	sbx_frame_raw(&b, SBX_F_STDOUT, 1, p, sizeof p);
	pid_t pid = peer_later(peer[0], &b, b.len / 2, 20, 1);
	if (gone)
		close(peer[0]);
	uint64_t t0 = sbx_mono_ns();
	int r = sbx_mon_loop(&m, gone ? 5000 : 200, note, NULL, &s, &err);
	uint64_t ms = (sbx_mono_ns() - t0) / 1000000u;
	reap(pid);
	if (gone) {
		ok(r < 0 && m.fail == SBX_MON_LOST && s.n == 0 && err.code == SBX_EXIT_INTERNAL &&
			   strstr(err.msg, "lost the connection to the session's monitor"),
		   "half a frame then EOF: lost, 70, the frame never handed out");
	} else {
		ok(r < 0 && m.fail == SBX_MON_LATE && err.code == SBX_EXIT_TEMPFAIL && s.n == 0,
		   "half a frame and silence: the deadline ends it (75)");
		ok(ms >= 200 && ms < 5000, "not before the deadline, and not long after it");
		close(peer[0]);
	}
	sbx_mon_close(&m);
	sbx_buf_free(&b);
}

/* The monitor's side says bytes[0..len) and no more; the loop's answer. */
static int feed(const void *bytes, size_t len, uint32_t max, struct seen *s, enum sbx_mon_fail *fail,
		struct sbx_err *err)
{
	struct sbx_mon m;
	int peer[2];
	pair(&m, peer);
	m.max = max;
	if (sbx_write_all(peer[0], bytes, len) < 0)
		abort();
	int r = sbx_mon_loop(&m, 2000, note, NULL, s, err);
	*fail = m.fail;
	close(peer[0]);
	sbx_mon_close(&m);
	return r;
}

static void test_garbage_and_error(void)
{
	struct seen s = { .want = SBX_F_EXIT };
	struct sbx_err err = { 0 };
	enum sbx_mon_fail fail;
	static const uint8_t junk[SBX_FRAME_HDR] = "HTTP/1.1 200";
	int r = feed(junk, sizeof junk, 0, &s, &fail, &err);
	ok(r < 0 && fail == SBX_MON_GARBAGE && s.n == 0 && err.code == SBX_EXIT_INTERNAL,
	   "a header that is not one: garbage, nothing handed out");

	struct sbx_buf b = { 0 };
	uint8_t p[17] = { 0 };
	sbx_frame_raw(&b, SBX_F_STDOUT, 1, p, sizeof p);
	r = feed(b.data, SBX_FRAME_HDR, 16, &s, &fail, &err); /* the header alone says enough */
	ok(r < 0 && fail == SBX_MON_GARBAGE, "a frame over max is refused from its header");

	sbx_buf_reset(&b);
	size_t off = sbx_frame_begin(&b, SBX_F_ERROR, 1);
	sbx_tlv_u32(&b, SBX_T_CODE, SBX_EXIT_CONFLICT);
	sbx_tlv_str(&b, SBX_T_MSG, "busy\x1b[2J now");
	sbx_frame_end(&b, off);
	r = feed(b.data, b.len, 0, &s, &fail, &err);
	ok(r < 0 && fail == SBX_MON_REFUSED && err.code == SBX_EXIT_CONFLICT && !strcmp(err.msg, "busy [2J now"),
	   "ERROR: its code, its message cleaned for a terminal");
	sbx_buf_free(&b);
}

/* Extra fds: a pipe's bytes become STDIN frames the loop flushes. */
struct relay {
	int in;
	int eof;
};

static void relay_arm(void *ctx, struct sbx_mon *m, struct pollfd *p)
{
	struct relay *x = ctx;
	p[0] = (struct pollfd){ .fd = x->eof ? -1 : x->in, .events = POLLIN };
}

static int relay_ready(void *ctx, struct sbx_mon *m, const struct pollfd *p, struct sbx_err *err)
{
	struct relay *x = ctx;
	if (!(p[0].revents & (POLLIN | POLLHUP)))
		return 0;
	uint8_t buf[256];
	ssize_t got = read(x->in, buf, sizeof buf);
	if (got > 0) {
		sbx_frame_raw(&m->out, SBX_F_STDIN, 1, buf, (uint32_t)got);
	} else {
		sbx_frame_raw(&m->out, SBX_F_STDIN_EOF, 1, NULL, 0);
		x->eof = 1;
	}
	return 0;
}

static int until_exit(void *ctx, struct sbx_mon *m, const struct sbx_frame *f, struct sbx_err *err)
{
	return f->type == SBX_F_EXIT;
}

static void test_extra_fds(void)
{
	struct sbx_mon m;
	int peer[2], pp[2];
	struct sbx_err err = { 0 };
	pair(&m, peer);
	if (pipe2(pp, O_CLOEXEC) < 0 || write(pp[1], "hello", 5) != 5)
		abort();
	close(pp[1]);
	/* The peer echoes what it gets, then sends EXIT once it has STDIN_EOF. */
	pid_t pid = fork();
	if (pid == 0) {
		uint8_t buf[256];
		size_t have = 0;
		for (;;) {
			ssize_t r = read(peer[0], buf + have, sizeof buf - have);
			if (r <= 0)
				_exit(1);
			have += (size_t)r;
			struct sbx_frame f;
			if (have >= 2 * SBX_FRAME_HDR + 5 && sbx_frame_hdr_get(buf, &f, 64) == 0 &&
			    f.type == SBX_F_STDIN && f.len == 5 && !memcmp(buf + SBX_FRAME_HDR, "hello", 5) &&
			    sbx_frame_hdr_get(buf + SBX_FRAME_HDR + 5, &f, 64) == 0 && f.type == SBX_F_STDIN_EOF)
				break;
		}
		struct sbx_exit_info e = { .status = 0, .reason = SBX_R_EXITED };
		struct sbx_buf b = { 0 };
		sbx_exit_encode(&b, 1, &e);
		put(peer[0], &b, 0, b.len);
		_exit(0);
	}
	struct relay x = { .in = pp[0] };
	static const struct sbx_mon_fds fds = { .n = 1, .arm = relay_arm, .ready = relay_ready };
	int r = sbx_mon_loop(&m, 5000, until_exit, &fds, &x, &err);
	int st = -1;
	waitpid(pid, &st, 0);
	ok(r == 1 && x.eof && WIFEXITED(st) && WEXITSTATUS(st) == 0,
	   "another fd's bytes go out as frames while the loop waits for EXIT");
	close(pp[0]);
	close(peer[0]);
	sbx_mon_close(&m);
}

static void test_send_fd(void)
{
	struct sbx_mon m;
	int peer[2];
	pair(&m, peer);
	sbx_frame_raw(&m.out, SBX_F_PING, 0, "x", 1);
	int r = sbx_mon_send(&m, STDERR_FILENO);
	uint8_t buf[64];
	union {
		struct cmsghdr h;
		char c[CMSG_SPACE(sizeof(int))];
	} cm;
	struct iovec iov = { buf, sizeof buf };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = cm.c, .msg_controllen = sizeof cm.c };
	ssize_t got = recvmsg(peer[0], &mh, MSG_CMSG_CLOEXEC);
	struct cmsghdr *h = CMSG_FIRSTHDR(&mh);
	int fd = -1;
	if (h && h->cmsg_type == SCM_RIGHTS)
		memcpy(&fd, CMSG_DATA(h), sizeof fd);
	ok(r == 0 && got == SBX_FRAME_HDR + 1 && fd >= 0 && m.out.len == 0,
	   "sbx_mon_send: the frame, with the fd as SCM_RIGHTS");
	if (fd >= 0)
		close(fd);
	close(peer[0]);
	sbx_mon_close(&m);
	ok(m.fd == -1, "sbx_mon_close leaves the connection closed");
}

int main(void)
{
	signal(SIGPIPE, SIG_IGN);
	test_whole_and_split();
	test_half(1);
	test_half(0);
	test_garbage_and_error();
	test_extra_fds();
	test_send_fd();
	return tap_done();
}
