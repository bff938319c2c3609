/* sbx-monitor: what the VMM writes: bounded files in RUN. */
#include "mon.h"

/* --- what the VMM writes: bounded files in RUN ------------------------- */

int vmmout_open(int dfd, struct vmmout *o, const char *name, uint64_t cap, int *wr, struct sbx_err *err)
{
	o->name = name;
	o->cap = cap;
	o->fd = openat(dfd, name, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (o->fd < 0)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot create %s", name);
	return vmmout_pipe(o, name, wr, err);
}

/* A new pipe whose read end is o's, for a file opened elsewhere (the
 * privileged half's for the unprivileged one's, priv.c).  Room for what
 * the VMM writes while the monitor is busy elsewhere (a restore's memory
 * load): the VMM blocks when it is full, and so does the guest's serial
 * port; nothing is lost. */
int vmmout_pipe(struct vmmout *o, const char *name, int *wr, struct sbx_err *err)
{
	int p[2];
	if (pipe2(p, O_CLOEXEC) < 0)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot make a pipe for %s", name);
	fcntl(p[0], F_SETFL, O_NONBLOCK);
	fcntl(p[1], F_SETPIPE_SZ, 1 << 20);
	o->src.fd = p[0];
	*wr = p[1];
	return 0;
}

/* A new pipe whose read end feeds o, whose file stays open (a VMM, or a
 * proxy, started again after a suspend). */
int vmmout_reopen(struct mon *m, struct vmmout *o, int *wr, struct sbx_err *err)
{
	if (vmmout_pipe(o, o->name, wr, err) < 0)
		return -1;
	mon_ep_mod(m, &o->src, EPOLLIN, EPOLL_CTL_ADD);
	return 0;
}

/* Keep the last cap/2 bytes, at the front, behind a line that counts what
 * went.  Copied forward in place: the monitor is the file's only writer. */
static void vmmout_compact(struct vmmout *o)
{
	uint8_t buf[SBX_DATA_CHUNK];
	uint64_t keep = o->size < o->cap / 2 ? o->size : o->cap / 2, from = o->size - keep;
	o->dropped += from;
	char line[128];
	int hl = snprintf(line, sizeof line,
			  "[sbx: %llu earlier bytes of this log were dropped; it keeps at most %llu]\n",
			  (unsigned long long)o->dropped, (unsigned long long)o->cap);
	if (hl < 0 || (uint64_t)hl >= from) /* cannot happen: from >= cap/4 */
		hl = 0;
	for (uint64_t done = 0; done < keep;) {
		size_t n = keep - done < sizeof buf ? (size_t)(keep - done) : sizeof buf;
		ssize_t r = pread(o->fd, buf, n, (off_t)(from + done));
		if (r <= 0 || pwrite(o->fd, buf, (size_t)r, (off_t)((uint64_t)hl + done)) != r) {
			keep = done;
			break;
		}
		done += (uint64_t)r;
	}
	if (hl)
		pwrite(o->fd, line, (size_t)hl, 0);
	o->size = (uint64_t)hl + keep;
	if (ftruncate(o->fd, (off_t)o->size) < 0)
		o->size = (uint64_t)lseek(o->fd, 0, SEEK_END);
}

static void vmmout_put(struct vmmout *o, const uint8_t *p, size_t n)
{
	if (o->fd < 0 || !n)
		return;
	if (n > o->cap / 4) { /* only the end of a chunk this big can stay */
		o->dropped += n - o->cap / 4;
		p += n - o->cap / 4;
		n = o->cap / 4;
	}
	if (o->size + n > o->cap)
		vmmout_compact(o);
	if (pwrite(o->fd, p, n, (off_t)o->size) == (ssize_t)n)
		o->size += n;
}

/* Everything the pipe has now (all of it once the VMM is gone). */
void vmmout_drain(struct mon *m, struct vmmout *o)
{
	uint8_t buf[SBX_DATA_CHUNK];
	for (int i = 0; o->src.fd >= 0 && i < 64; i++) {
		ssize_t r = read(o->src.fd, buf, sizeof buf);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0 && errno == EAGAIN)
			return;
		if (r <= 0) {
			epoll_ctl(m->ep, EPOLL_CTL_DEL, o->src.fd, NULL);
			close(o->src.fd);
			o->src.fd = -1;
			return;
		}
		vmmout_put(o, buf, (size_t)r);
	}
}

void vmmout_drain_all(struct mon *m)
{
	vmmout_drain(m, &m->console);
	vmmout_drain(m, &m->vmmlog);
	vmmout_drain(m, &m->proxylog);
}

/* The VMM failed: what it said before it went, still in the pipe, ends
 * err's message ("; vmm.log: ..."), unless the message has it already.
 * Read through the file's own fd: the unprivileged half has no run dir. */
void vmmout_explain(struct mon *m, struct sbx_err *err)
{
	char tail[200];
	vmmout_drain_all(m);
	sbx_log_tail_fd(m->vmmlog.fd, tail, sizeof tail);
	size_t l = strlen(err->msg);
	if (tail[0] && !strstr(err->msg, tail) && l < sizeof err->msg - 1)
		snprintf(err->msg + l, sizeof err->msg - l, "; vmm.log: %s", tail);
}

/* The pipes from a VMM that is gone, drained; their files stay open. */
void vmmout_close_pipes(struct mon *m)
{
	vmmout_drain_all(m);
	struct vmmout *outs[] = { &m->console, &m->vmmlog };
	for (size_t i = 0; i < SBX_ARRAY_LEN(outs); i++)
		if (outs[i]->src.fd >= 0) {
			epoll_ctl(m->ep, EPOLL_CTL_DEL, outs[i]->src.fd, NULL);
			close(outs[i]->src.fd);
			outs[i]->src.fd = -1;
		}
}

void vmmout_close(struct vmmout *o)
{
	if (o->src.fd >= 0)
		close(o->src.fd);
	if (o->fd >= 0)
		close(o->fd);
	o->src.fd = o->fd = -1;
}
