/* sbx-monitor: privilege separation (priv.h; docs/design.md, "Splitting
 * the monitor").
 *
 * Once the session is ready, the monitor forks.  The parent stays root and
 * keeps the session lock, the state directories, session.json, the audit
 * trail, the host cgroups, the workspace, QMP and the VMM's and proxy's
 * pidfds; it does nothing but answer the child's requests, one at a time,
 * each checked.  The child jails itself (its own uid, no capabilities,
 * no_new_privs, not dumpable, new mount, network, IPC and UTS namespaces,
 * seccomp) and runs the loop: the agent, the clients, exec output, ports.
 *
 * Every privileged step of the loop is one mon_*() below.  In the child it
 * is a request; in a monitor that is not split (SBX_JAIL=off, not root)
 * and in the parent serving a request it is the step itself, as the
 * monitor always did it.  So the call sites read the same either way. */
#include "mon.h"
#include "jail.h"
#include "priv.h"
#include "priv_int.h"
#include "trace.h"

#include <limits.h>
#include <poll.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>

/* --- the channel ---------------------------------------------------------- */

void priv_msg_begin(struct sbx_buf *b, uint32_t op)
{
	uint8_t h[4] = { (uint8_t)op, (uint8_t)(op >> 8), (uint8_t)(op >> 16), (uint8_t)(op >> 24) };
	sbx_buf_reset(b);
	sbx_buf_put(b, h, sizeof h);
}

int priv_chan_send(int fd, const struct sbx_buf *b, const int *fds, int nfds)
{
	if (b->oom || b->len > PRIV_MSG_MAX)
		return errno = EMSGSIZE, -1;
	struct iovec iov = { .iov_base = b->data, .iov_len = b->len };
	union {
		char buf[CMSG_SPACE(sizeof(int) * PRIV_FDS_MAX)];
		struct cmsghdr align;
	} u;
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1 };
	if (nfds > 0) {
		memset(&u, 0, sizeof u);
		mh.msg_control = u.buf;
		mh.msg_controllen = CMSG_SPACE(sizeof(int) * (size_t)nfds);
		struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
		c->cmsg_level = SOL_SOCKET;
		c->cmsg_type = SCM_RIGHTS;
		c->cmsg_len = CMSG_LEN(sizeof(int) * (size_t)nfds);
		memcpy(CMSG_DATA(c), fds, sizeof(int) * (size_t)nfds);
	}
	ssize_t w;
	while ((w = sendmsg(fd, &mh, MSG_NOSIGNAL)) < 0 && errno == EINTR)
		;
	return w == (ssize_t)b->len ? 0 : -1;
}

/* One message into buf (size: room for a terminator too), its fds into
 * fds.  0: the other end is gone; -1: an error or a message that does not
 * fit (its fds closed). */
static ssize_t chan_recv(int fd, uint8_t *buf, size_t size, int *fds, int *nfds)
{
	return sbx_recvmsg_fds(fd, buf, size - 1, fds, nfds, PRIV_FDS_MAX);
}

void priv_close_fds(struct priv_msg *a)
{
	for (int i = 0; i < a->nfds; i++)
		if (a->fds[i] >= 0)
			close(a->fds[i]);
	a->nfds = 0;
}

/* --- the child's side: a request and its answer --------------------------- */

static uint8_t ans_buf[PRIV_MSG_MAX + 1];

/* Send req (with fds) and wait for the reply, relaying progress.  0 with
 * the answer in *a (strings valid until the next call; its fds the
 * caller's, on an error too), or -1 with err. */
int priv_call(struct mon *m, struct sbx_buf *req, const int *fds, int nfds, struct priv_msg *a, struct sbx_err *err)
{
	struct priv_msg scratch;
	if (!a)
		a = &scratch;
	memset(a, 0, sizeof *a);
	if (priv_chan_send(m->priv.fd, req, fds, nfds) < 0)
		goto gone;
	for (;;) {
		int rfds[PRIV_FDS_MAX], rn = 0;
		ssize_t n = chan_recv(m->priv.fd, ans_buf, sizeof ans_buf, rfds, &rn);
		if (n <= 0)
			goto gone;
		if (priv_decode(ans_buf, (size_t)n, sizeof ans_buf, a) < 0 ||
		    (a->op != PRIV_REPLY && a->op != PRIV_PROGRESS)) {
			for (int i = 0; i < rn; i++)
				close(rfds[i]);
			goto gone;
		}
		memcpy(a->fds, rfds, sizeof(int) * (size_t)rn);
		a->nfds = rn;
		if (a->op == PRIV_PROGRESS) {
			priv_close_fds(a);
			if (m->priv.progress && a->str[PT_WHAT])
				m->priv.progress(m->priv.progress_ctx, a->str[PT_WHAT], a->num[PT_NUM_A],
						 a->num[PT_NUM_B]);
			continue;
		}
		if (a == &scratch)
			priv_close_fds(a);
		if (!a->num[PT_CODE])
			return 0;
		sbx_err_set(err, (int)a->num[PT_CODE], (int)a->num[PT_ERRNO], "%s",
			    a->str[PT_MSG] ? a->str[PT_MSG] : "refused");
		return -1;
	}
gone:
	/* The parent is gone (PR_SET_PDEATHSIG ends us next) or answered
	 * nonsense: nothing privileged can happen any more. */
	return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "the monitor's privileged half does not answer");
}

/* A request with no field and no answer but its verdict. */
int priv_call0(struct mon *m, uint32_t op, struct sbx_err *err)
{
	struct sbx_buf b = { 0 };
	priv_msg_begin(&b, op);
	int rc = priv_call(m, &b, NULL, 0, NULL, err);
	sbx_buf_free(&b);
	return rc;
}

/* A request with one number and no answer but its verdict. */
int priv_call_num(struct mon *m, uint32_t op, uint16_t tag, uint64_t v, struct sbx_err *err)
{
	struct sbx_buf b = { 0 };
	priv_msg_begin(&b, op);
	sbx_tlv_u64(&b, tag, v);
	int rc = priv_call(m, &b, NULL, 0, NULL, err);
	sbx_buf_free(&b);
	return rc;
}

/* A request with one string (none when s is NULL) and no answer but its
 * verdict. */
int priv_call_str(struct mon *m, uint32_t op, uint16_t tag, const char *s, struct sbx_err *err)
{
	struct sbx_buf b = { 0 };
	priv_msg_begin(&b, op);
	if (s)
		sbx_tlv_str(&b, tag, s);
	int rc = priv_call(m, &b, NULL, 0, NULL, err);
	sbx_buf_free(&b);
	return rc;
}

/* A request with no field whose answer is two numbers (left as they are
 * when it fails). */
void priv_call_nums(struct mon *m, uint32_t op, uint64_t *a, uint64_t *b)
{
	struct sbx_buf q = { 0 };
	struct priv_msg ans;
	priv_msg_begin(&q, op);
	if (priv_call(m, &q, NULL, 0, &ans, NULL) == 0) {
		*a = ans.num[PT_NUM_A];
		*b = ans.num[PT_NUM_B];
	}
	sbx_buf_free(&q);
}

/* --- the split ---------------------------------------------------------------- */

/* Every session's, with a NIC too: its network is rebuilt at a resume
 * (PRIV_SUSP_VMM) and a claim (PRIV_NET_ATTACH) by the parent, and a
 * restore's is built at boot, before the split. */
static int split_wanted(void)
{
	struct sbx_err e = { 0 };
	return getuid() == 0 && sbx_jail_enabled(&e) == 1;
}

/* The parent's copies of what the child owns: closed, so that only the
 * child holds the clients, the agent and the output (and the parent no
 * epoll set or timer). */
static void parent_forget(struct mon *m)
{
	while (m->execs)
		exec_free(m, m->execs);
	while (m->clients) {
		struct client *c = m->clients;
		m->clients = c->next;
		close(c->src.fd);
		if (c->port_fd1)
			close(c->port_fd1 - 1);
		sbx_buf_free(&c->in);
		sbx_buf_free(&c->out);
		sbx_buf_free(&c->held);
		free(c);
	}
	m->nclients = 0;
	m->priv.proxylog_child = m->proxylog.fd >= 0;
	int *fds[] = { &m->ep,         &m->listen.fd,     &m->agent.fd,  &m->timer.fd,        &m->console.src.fd,
		       &m->console.fd, &m->vmmlog.src.fd, &m->vmmlog.fd, &m->proxylog.src.fd, &m->proxylog.fd,
		       &m->execs_dfd,  &m->proxybusy.fd };
	for (size_t i = 0; i < SBX_ARRAY_LEN(fds); i++) {
		if (*fds[i] >= 0)
			close(*fds[i]);
		*fds[i] = -1;
	}
	sbx_buf_free(&m->ain);
	if (m->aout.data)
		explicit_bzero(m->aout.data, m->aout.cap);
	sbx_buf_free(&m->aout);
	sbx_secrets_free(&m->sec); /* the child's to hand to the guest */
}

static int cmp_int(const void *a, const void *b)
{
	return *(const int *)a - *(const int *)b;
}

/* Every fd but the ones in keep[] (sorted here), closed. */
static void close_all_but(int *keep, int n)
{
	qsort(keep, (size_t)n, sizeof *keep, cmp_int);
	unsigned from = 0;
	for (int i = 0; i < n; i++) {
		if (keep[i] < 0)
			continue;
		if ((unsigned)keep[i] > from)
			syscall(SYS_close_range, from, (unsigned)keep[i] - 1, 0);
		from = (unsigned)keep[i] + 1;
	}
	syscall(SYS_close_range, from, ~0u, 0);
}

/* In the child, as root: let go of what only the parent holds, hand the
 * exec directory to our uid, keep only our fds, then the jail. */
static int child_enter(struct mon *m, int chan, pid_t parent, int lock_fd, struct sbx_err *err)
{
	if (prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0) < 0 || getppid() != parent)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "the monitor went away");
	int ppfd = (int)syscall(SYS_pidfd_open, parent, 0);
	if (ppfd < 0)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot open a pidfd of the monitor");
	/* A signalfd in an epoll set is woken through the signal queue of the
	 * process that added it: the inherited one would be woken by the
	 * parent's signals, never by the SIGTERM the parent passes on to us
	 * (which then waited for the loop's next event, for ever in an idle
	 * session; t0240).  Ours, added by us. */
	sigset_t set;
	mon_signals(&set);
	int sfd = signalfd(-1, &set, SFD_CLOEXEC | SFD_NONBLOCK);
	if (sfd < 0)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot set up the event loop");
	epoll_ctl(m->ep, EPOLL_CTL_DEL, m->sig.fd, NULL);
	close(m->sig.fd);
	m->sig.fd = sfd;
	mon_ep_mod(m, &m->sig, EPOLLIN, EPOLL_CTL_ADD);
	uid_t uid = SBX_JAIL_UID_BASE + PRIV_UID_OFFSET + (uid_t)getpid();
	if (fchown(m->execs_dfd, uid, uid) < 0)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot hand the exec directory over");
	/* ... and the records of the execs a restore kept (snapexec.c), made
	 * by root before the split: the child ends them. */
	for (struct exec *ex = m->execs; ex; ex = ex->next)
		if (fchown(ex->dfd, uid, uid) < 0 || fchown(ex->out_fd, uid, uid) < 0 ||
		    fchown(ex->err_fd, uid, uid) < 0)
			return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot hand the exec directory over");
	/* No file it writes grows past the largest cap it keeps (an exec's
	 * output, the logs), with room for what a cut writes first; a pool
	 * member's is the largest a claim may bring.  A write past it fails
	 * (EFBIG) rather than ending the session. */
	uint64_t fs = m->output_cap > PROXY_LOG_CAP ? m->output_cap : PROXY_LOG_CAP;
	if (m->s.pool && fs < (1ull << 30))
		fs = 1ull << 30;
	struct rlimit rl = { fs + (8u << 20), fs + (8u << 20) };
	signal(SIGXFSZ, SIG_IGN);
	if (fs < (1ull << 40) && setrlimit(RLIMIT_FSIZE, &rl) < 0)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot limit the file size");
	(void)lock_fd;         /* closed with the rest */
	if (m->readyp.fd >= 0) /* the parent's to answer; out of our epoll set first */
		epoll_ctl(m->ep, EPOLL_CTL_DEL, m->readyp.fd, NULL);
	int keep[32 + MAX_CLIENTS], n = 0;
	int mine[] = { 0,
		       1,
		       2,
		       chan,
		       ppfd,
		       m->ep,
		       m->listen.fd,
		       m->agent.fd,
		       m->sig.fd,
		       m->timer.fd,
		       m->console.src.fd,
		       m->console.fd,
		       m->vmmlog.src.fd,
		       m->vmmlog.fd,
		       m->proxylog.src.fd,
		       m->proxylog.fd,
		       m->vmev.fd,
		       m->vm.pidfd,
		       m->proxy.fd,
		       m->execs_dfd,
		       m->pkglog_fd,
		       sbx_trace_fd(),
		       m->proxybusy.fd };
	for (size_t i = 0; i < SBX_ARRAY_LEN(mine); i++)
		keep[n++] = mine[i];
	for (struct client *c = m->clients; c && n < (int)SBX_ARRAY_LEN(keep) - 1; c = c->next) {
		keep[n++] = c->src.fd;
		if (c->port_fd1)
			keep[n++] = c->port_fd1 - 1;
	}
	for (struct exec *ex = m->execs; ex && n < (int)SBX_ARRAY_LEN(keep) - 3; ex = ex->next) {
		keep[n++] = ex->dfd;
		keep[n++] = ex->out_fd;
		keep[n++] = ex->err_fd;
	}
	close_all_but(keep, n);
	/* What was the parent's, now closed here: a pool member's bare
	 * namespace too, which a claim asks the parent to complete. */
	m->priv.bare_netns = m->bare_netns >= 0;
	m->bare_netns = -1;
	m->st.lib_fd = m->st.run_fd = m->st.sessions_fd = m->st.rsessions_fd = -1;
	m->lib_dfd = m->run_dfd = m->agent_listen.fd = m->readyp.fd = -1;
	m->vm.ctl_fd = -1;
	m->ws.lock_fd = m->ws.dir_fd = -1;
	if (sbx_jail_namespaces("sbx-monitor", err) < 0 || sbx_jail_self(uid, ppfd, err) < 0)
		return -1;
	close(ppfd);
	return 0;
}

int mon_priv_start(struct mon *m, int lock_fd, struct sbx_err *err)
{
	m->priv.fd = -1;
	if (!split_wanted())
		return 0;
	int sv[2];
	if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) < 0)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot make the monitor's request channel");
	int sz = 2 * PRIV_MSG_MAX;
	for (int i = 0; i < 2; i++) {
		setsockopt(sv[i], SOL_SOCKET, SO_SNDBUFFORCE, &sz, sizeof sz);
		setsockopt(sv[i], SOL_SOCKET, SO_RCVBUFFORCE, &sz, sizeof sz);
	}
	pid_t parent = getpid();
	sbx_secrets_fork_keep(&m->sec, 1); /* the child speaks to the guest: it hands them over */
	pid_t pid = fork();
	sbx_secrets_fork_keep(&m->sec, 0);
	if (pid < 0) {
		close(sv[0]);
		close(sv[1]);
		return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot fork the monitor's unprivileged half");
	}
	if (pid == 0) {
		close(sv[0]);
		m->priv.role = PRIV_ROLE_CHILD;
		m->priv.fd = sv[1];
		struct sbx_err e = { 0 };
		if (child_enter(m, sv[1], parent, lock_fd, &e) < 0) {
			struct sbx_buf b = { 0 };
			priv_msg_begin(&b, PRIV_EXIT);
			sbx_tlv_u64(&b, PT_STATUS, 126);
			sbx_tlv_str(&b, PT_MSG, e.msg);
			priv_chan_send(sv[1], &b, NULL, 0);
			_exit(126);
		}
		struct sbx_buf b = { 0 };
		priv_msg_begin(&b, PRIV_READY);
		priv_chan_send(m->priv.fd, &b, NULL, 0);
		sbx_buf_free(&b);
		return 1;
	}
	close(sv[1]);
	m->priv.role = PRIV_ROLE_PARENT;
	m->priv.fd = sv[0];
	m->priv.child = pid;
	m->priv.child_pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
	parent_forget(m);
	/* Its first word: jailed (or why not). */
	struct pollfd p = { .fd = m->priv.fd, .events = POLLIN };
	static uint8_t buf[PRIV_MSG_MAX + 1];
	struct priv_msg q;
	int fds[PRIV_FDS_MAX], nfds = 0;
	ssize_t got = poll(&p, 1, 30000) == 1 ? chan_recv(m->priv.fd, buf, sizeof buf, fds, &nfds) : -1;
	for (int i = 0; i < nfds; i++)
		close(fds[i]);
	if (got > 0 && priv_decode(buf, (size_t)got, sizeof buf, &q) == 0 && q.op == PRIV_READY)
		return 0;
	kill(pid, SIGKILL);
	waitpid(pid, NULL, 0);
	m->priv.child = 0;
	sbx_err_set(err, SBX_EXIT_INTERNAL, 0, "cannot start the monitor's unprivileged half%s%s",
		    got > 0 && q.op == PRIV_EXIT && q.str[PT_MSG] ? ": " : "",
		    got > 0 && q.op == PRIV_EXIT && q.str[PT_MSG] ? q.str[PT_MSG] : "");
	m->priv.role = PRIV_ROLE_NONE;
	close(m->priv.fd);
	m->priv.fd = -1;
	return -1;
}

/* Returns 1 in the child (which then ends with _exit: see loop.c). */
int mon_priv_exit(struct mon *m, int rc)
{
	if (!split_child(m))
		return 0;
	struct sbx_buf b = { 0 };
	priv_msg_begin(&b, PRIV_EXIT);
	sbx_tlv_u64(&b, PT_STATUS, (uint64_t)rc);
	priv_chan_send(m->priv.fd, &b, NULL, 0);
	sbx_buf_free(&b);
	return 1;
}

/* The child ended without saying it was done (killed, crashed, or it sent
 * what no monitor sends): the session ends as a crash, as if the monitor
 * had (the VMM goes, the record says why, the rest is released). */
static int child_lost(struct mon *m, int status, const char *what)
{
	char why[200];
	if (what)
		snprintf(why, sizeof why, "the monitor's unprivileged half %s", what);
	else if (WIFSIGNALED(status))
		snprintf(why, sizeof why, "the monitor's unprivileged half was killed by signal %d", WTERMSIG(status));
	else
		snprintf(why, sizeof why, "the monitor's unprivileged half exited with status %d", WEXITSTATUS(status));
	if (m->vm.pid)
		sbx_vm_kill(&m->vm);
	if (!m->priv.ended)
		end_direct(m, "crashed", why);
	else
		proxy_stop_direct(m);
	mon_workspace_release(m, 0);
	return SBX_EXIT_INTERNAL;
}

int mon_priv_serve(struct mon *m)
{
	static uint8_t buf[PRIV_MSG_MAX + 1];
	struct sbx_buf r = { 0 };
	int done = -1, status = 0;
	for (;;) {
		struct pollfd p[3] = { { .fd = m->priv.fd, .events = POLLIN },
				       { .fd = m->sig.fd, .events = POLLIN },
				       { .fd = m->priv.child_pidfd, .events = POLLIN } };
		if (poll(p, 3, -1) < 0) {
			if (errno == EINTR)
				continue;
			break;
		}
		if (p[1].revents & POLLIN) {
			struct signalfd_siginfo si;
			while (read(m->sig.fd, &si, sizeof si) == sizeof si)
				if (si.ssi_signo == SIGTERM || si.ssi_signo == SIGINT || si.ssi_signo == SIGHUP)
					kill(m->priv.child, (int)si.ssi_signo); /* the child ends the session */
		}
		if (p[0].revents & (POLLIN | POLLHUP | POLLERR)) {
			struct priv_msg q;
			int fds[PRIV_FDS_MAX], nfds = 0;
			ssize_t n = chan_recv(m->priv.fd, buf, sizeof buf, fds, &nfds);
			if (n == 0 || (n < 0 && errno != EAGAIN))
				break;
			if (n < 0)
				continue;
			if (priv_decode(buf, (size_t)n, sizeof buf, &q) < 0 || q.op == PRIV_REPLY ||
			    q.op == PRIV_PROGRESS || q.op == PRIV_READY) {
				for (int i = 0; i < nfds; i++)
					close(fds[i]);
				kill(m->priv.child, SIGKILL);
				waitpid(m->priv.child, NULL, 0);
				sbx_buf_free(&r);
				return child_lost(m, 0, "sent a malformed request");
			}
			memcpy(q.fds, fds, sizeof(int) * (size_t)nfds);
			q.nfds = nfds;
			if (q.op == PRIV_EXIT) {
				done = (int)q.num[PT_STATUS];
				priv_close_fds(&q);
				continue;
			}
			struct sbx_err err = { 0 };
			int out[PRIV_FDS_MAX], nout = 0;
			priv_msg_begin(&r, PRIV_REPLY);
			struct sbx_buf res = { 0 };
			int rc = priv_handle(m, &q, &res, out, &nout, &err);
			priv_close_fds(&q);
			sbx_tlv_u64(&r, PT_CODE, rc < 0 ? (uint64_t)(err.code ? err.code : SBX_EXIT_INTERNAL) : 0);
			if (rc < 0) {
				sbx_tlv_str(&r, PT_MSG, err.msg);
				sbx_tlv_u64(&r, PT_ERRNO, (uint64_t)err.errnum);
			}
			sbx_buf_put(&r, res.data, res.len);
			sbx_buf_free(&res);
			priv_chan_send(m->priv.fd, &r, out, nout);
			/* Passed on: the parent keeps only the VMM's pidfd and
			 * events and the proxy's pidfd. */
			for (int i = 0; i < nout; i++)
				if (out[i] != m->vm.pidfd && out[i] != m->vm.event_fd && out[i] != m->proxy.fd)
					close(out[i]);
		}
		if (p[2].revents & POLLIN)
			break;
	}
	sbx_buf_free(&r);
	while (waitpid(m->priv.child, &status, 0) < 0 && errno == EINTR)
		;
	if (done >= 0 && WIFEXITED(status) && WEXITSTATUS(status) == (done & 0xff))
		return done;
	return child_lost(m, status, NULL);
}
