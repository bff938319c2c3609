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
#include "port.h"
#include "priv.h"

#include <limits.h>
#include <poll.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>

static int split_child(const struct mon *m)
{
	return m->priv.role == PRIV_ROLE_CHILD;
}

/* --- the channel ---------------------------------------------------------- */

static void msg_begin(struct sbx_buf *b, uint32_t op)
{
	uint8_t h[4] = { (uint8_t)op, (uint8_t)(op >> 8), (uint8_t)(op >> 16), (uint8_t)(op >> 24) };
	sbx_buf_reset(b);
	sbx_buf_put(b, h, sizeof h);
}

static int chan_send(int fd, const struct sbx_buf *b, const int *fds, int nfds)
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
	struct iovec iov = { .iov_base = buf, .iov_len = size - 1 };
	union {
		char buf[CMSG_SPACE(sizeof(int) * PRIV_FDS_MAX)];
		struct cmsghdr align;
	} u;
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.buf, .msg_controllen = sizeof u.buf };
	ssize_t n;
	*nfds = 0;
	while ((n = recvmsg(fd, &mh, MSG_CMSG_CLOEXEC)) < 0 && errno == EINTR)
		;
	for (struct cmsghdr *c = n >= 0 ? CMSG_FIRSTHDR(&mh) : NULL; c; c = CMSG_NXTHDR(&mh, c))
		if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) {
			int k = (int)((c->cmsg_len - CMSG_LEN(0)) / sizeof(int));
			int *p = (int *)CMSG_DATA(c);
			for (int i = 0; i < k; i++) {
				if (*nfds < PRIV_FDS_MAX)
					fds[(*nfds)++] = p[i];
				else
					close(p[i]);
			}
		}
	if (n > 0 && !(mh.msg_flags & (MSG_TRUNC | MSG_CTRUNC)))
		return n;
	for (int i = 0; i < *nfds; i++)
		close(fds[i]);
	*nfds = 0;
	return n == 0 ? 0 : -1;
}

static void close_fds(struct priv_msg *a)
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
static int call(struct mon *m, struct sbx_buf *req, const int *fds, int nfds, struct priv_msg *a, struct sbx_err *err)
{
	struct priv_msg scratch;
	if (!a)
		a = &scratch;
	memset(a, 0, sizeof *a);
	if (chan_send(m->priv.fd, req, fds, nfds) < 0)
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
			close_fds(a);
			if (m->priv.progress && a->str[PT_WHAT])
				m->priv.progress(m->priv.progress_ctx, a->str[PT_WHAT], a->num[PT_NUM_A], a->num[PT_NUM_B]);
			continue;
		}
		if (a == &scratch)
			close_fds(a);
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
static int call0(struct mon *m, uint32_t op, struct sbx_err *err)
{
	struct sbx_buf b = { 0 };
	msg_begin(&b, op);
	int rc = call(m, &b, NULL, 0, NULL, err);
	sbx_buf_free(&b);
	return rc;
}

/* A request with no field whose answer is two numbers (left as they are
 * when it fails). */
static void call_nums(struct mon *m, uint32_t op, uint64_t *a, uint64_t *b)
{
	struct sbx_buf q = { 0 };
	struct priv_msg ans;
	msg_begin(&q, op);
	if (call(m, &q, NULL, 0, &ans, NULL) == 0) {
		*a = ans.num[PT_NUM_A];
		*b = ans.num[PT_NUM_B];
	}
	sbx_buf_free(&q);
}

/* --- the steps, in either process ----------------------------------------- */

static int audit_direct(struct mon *m, const char *type, json_t *f, struct sbx_err *err)
{
	if (f && m->s.tenant[0])
		json_object_set_new(f, "tenant", json_string(m->s.tenant));
	return sbx_audit_append(&m->st, type, f, err);
}

int mon_audit(struct mon *m, const char *type, json_t *f, struct sbx_err *err)
{
	if (!split_child(m))
		return audit_direct(m, type, f, err);
	char *txt = f ? json_dumps(f, JSON_COMPACT) : NULL;
	if (!txt)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, ENOMEM, "cannot encode the audit record");
	struct sbx_buf b = { 0 };
	msg_begin(&b, PRIV_AUDIT);
	sbx_tlv_str(&b, PT_TYPE, type);
	sbx_tlv_str(&b, PT_FIELDS, txt);
	free(txt);
	int rc = call(m, &b, NULL, 0, NULL, err);
	sbx_buf_free(&b);
	return rc;
}

int mon_record_save(struct mon *m, struct sbx_err *err)
{
	if (!split_child(m))
		return sbx_record_save(&m->st, &m->s, err);
	struct sbx_buf b = { 0 };
	msg_begin(&b, PRIV_RECORD);
	sbx_tlv_str(&b, PT_STATE, m->s.state);
	sbx_tlv_u64(&b, PT_UNRESP_NS, m->s.agent_unresponsive_ns);
	sbx_tlv_str(&b, PT_KERNEL, m->s.kernel);
	sbx_tlv_u64(&b, PT_CLAIM_MS, m->s.claim_ms);
	sbx_tlv_u64(&b, PT_RESUME_MS, m->s.resume_ms);
	int rc = call(m, &b, NULL, 0, NULL, err);
	sbx_buf_free(&b);
	return rc;
}

/* The time spent in the state left, then the new one (the record's own
 * accounting; suspend.c's susp_note_state adds the TTL). */
void mon_note_state(struct sbx_session *s, const char *state)
{
	uint64_t now = sbx_now_ns();
	if (s->state_since_ns && now > s->state_since_ns) {
		uint64_t d = now - s->state_since_ns;
		if (!strcmp(s->state, "paused"))
			s->paused_ns += d;
		else if (!strcmp(s->state, "suspended"))
			s->suspended_ns += d;
	}
	s->state_since_ns = now;
	snprintf(s->state, sizeof s->state, "%s", state);
}

static void proxy_stop_direct(struct mon *m)
{
	if (m->proxy.fd >= 0 && m->ep >= 0)
		epoll_ctl(m->ep, EPOLL_CTL_DEL, m->proxy.fd, NULL);
	sbx_netns_stop_proxy(&m->proxy_pid, &m->proxy.fd);
}

/* The child's copy of a pidfd the parent also holds: out of the epoll set
 * by hand (closing one copy of a shared file does not remove it). */
static void child_drop_fd(struct mon *m, int *fd)
{
	if (*fd >= 0) {
		epoll_ctl(m->ep, EPOLL_CTL_DEL, *fd, NULL);
		close(*fd);
	}
	*fd = -1;
}

void mon_proxy_stop(struct mon *m)
{
	if (!split_child(m))
		return proxy_stop_direct(m);
	if (m->proxy.fd < 0 && !m->proxy_pid)
		return;
	child_drop_fd(m, &m->proxy.fd);
	m->proxy_pid = 0;
	call0(m, PRIV_PROXY_STOP, NULL);
}

/* The proxy is the session's only way out: without it the guest's
 * connections are refused in its namespace.  The session runs on, without
 * network, and says so (net.lost in the record and the audit trail). */
static int proxy_reap_direct(struct mon *m)
{
	int status = 0;
	if (m->proxy_pid <= 0 || waitpid(m->proxy_pid, &status, WNOHANG) <= 0)
		return 0;
	if (m->ep >= 0)
		epoll_ctl(m->ep, EPOLL_CTL_DEL, m->proxy.fd, NULL);
	close(m->proxy.fd);
	m->proxy.fd = -1;
	m->proxy_pid = 0;
	if (WIFSIGNALED(status))
		snprintf(m->s.net_lost, sizeof m->s.net_lost, "proxy killed by signal %d", WTERMSIG(status));
	else
		snprintf(m->s.net_lost, sizeof m->s.net_lost, "proxy exited with status %d", WEXITSTATUS(status));
	sbx_record_save(&m->st, &m->s, NULL);
	json_t *f = json_pack("{s:s, s:s}", "session", m->s.id, "reason", m->s.net_lost);
	audit_direct(m, "net.lost", f, NULL);
	json_decref(f);
	return 1;
}

void mon_proxy_reap(struct mon *m)
{
	if (!split_child(m)) {
		proxy_reap_direct(m);
		return;
	}
	struct sbx_buf b = { 0 };
	struct priv_msg a;
	msg_begin(&b, PRIV_PROXY_REAP);
	int rc = call(m, &b, NULL, 0, &a, NULL);
	sbx_buf_free(&b);
	close_fds(&a);
	if (rc < 0 || !a.num[PT_FLAG])
		return;
	child_drop_fd(m, &m->proxy.fd);
	m->proxy_pid = 0;
	snprintf(m->s.net_lost, sizeof m->s.net_lost, "%s", a.str[PT_REASON] ? a.str[PT_REASON] : "proxy ended");
}

/* The VM is gone and the session ends without sbx-kill (TTL, crash,
 * power-off): record it, keep the record and output for the user, release
 * the host resources. */
static void end_direct(struct mon *m, const char *state, const char *why)
{
	proxy_stop_direct(m); /* its last lines in net.log before the record says "ended" */
	snprintf(m->s.state, sizeof m->s.state, "%s", state);
	snprintf(m->s.end_reason, sizeof m->s.end_reason, "%s", why);
	m->s.ended_ns = sbx_now_ns();
	int expired = !strcmp(state, "expired");
	json_t *f = expired ? json_pack("{s:s, s:I}", "session", m->s.id, "ttl_s", (json_int_t)(m->s.limits.ttl_ms / 1000))
			    : json_pack("{s:s, s:s}", "session", m->s.id, "reason", why);
	audit_direct(m, expired ? "session.expire" : !strcmp(state, "crashed") ? "session.crash" : "session.stop", f,
		     NULL);
	json_decref(f);
	sbx_cgroup_usage(sbx_session_cgroup(&m->s), &m->s.cpu_ns, &m->s.mem_peak);
	sbx_record_save(&m->st, &m->s, NULL);
	sbx_cgroup_remove(sbx_session_cgroup(&m->s));
	unlinkat(m->run_dfd, "monitor.sock", 0);
	unlinkat(m->run_dfd, "agent.sock", 0);
	unlinkat(m->run_dfd, "qmp.sock", 0);
	m->priv.ended = 1;
}

void mon_end(struct mon *m, const char *state, const char *why)
{
	if (!split_child(m))
		return end_direct(m, state, why);
	child_drop_fd(m, &m->proxy.fd);
	m->proxy_pid = 0;
	snprintf(m->s.state, sizeof m->s.state, "%s", state);
	snprintf(m->s.end_reason, sizeof m->s.end_reason, "%s", why);
	struct sbx_buf b = { 0 };
	msg_begin(&b, PRIV_END);
	sbx_tlv_str(&b, PT_STATE, state);
	sbx_tlv_str(&b, PT_REASON, why);
	call(m, &b, NULL, 0, NULL, NULL);
	sbx_buf_free(&b);
}

/* Everything of the session, under the global lock, so a create of the
 * same ID never sees half a session.  No deadlock although we hold the
 * session lock: whoever holds the global lock takes session locks without
 * waiting.  A claim that did not complete also leaves the member's old
 * runtime directory (a rename half done).  1 when something is left. */
static int destroy_direct(struct mon *m, int member_too)
{
	proxy_stop_direct(m);
	int g = sbx_lock_global(&m->st, NULL);
	sbx_cgroup_remove(sbx_session_cgroup(&m->s));
	sbx_rm_rf_at(m->st.sessions_fd, m->s.id);
	sbx_rm_rf_at(m->st.rsessions_fd, m->s.id);
	if (g >= 0)
		close(g);
	if (member_too && m->claim.from[0])
		sbx_rm_rf_at(m->st.rsessions_fd, m->claim.from);
	m->priv.ended = 1;
	return faccessat(m->st.sessions_fd, m->s.id, F_OK, AT_SYMLINK_NOFOLLOW) == 0 ||
	       faccessat(m->st.rsessions_fd, m->s.id, F_OK, AT_SYMLINK_NOFOLLOW) == 0;
}

int mon_destroy(struct mon *m, int member_too)
{
	if (!split_child(m))
		return destroy_direct(m, member_too);
	child_drop_fd(m, &m->proxy.fd);
	m->proxy_pid = 0;
	struct sbx_buf b = { 0 };
	struct priv_msg a;
	msg_begin(&b, PRIV_DESTROY);
	sbx_tlv_u64(&b, PT_FLAG, member_too ? 1 : 0);
	int rc = call(m, &b, NULL, 0, &a, NULL);
	sbx_buf_free(&b);
	close_fds(&a);
	return rc < 0 || a.num[PT_FLAG];
}

void mon_vm_kill(struct mon *m)
{
	if (!split_child(m))
		return sbx_vm_kill(&m->vm);
	call0(m, PRIV_VM_KILL, NULL);
	child_drop_fd(m, &m->vm.pidfd);
	m->vm.pid = 0;
}

int mon_vm_reap(struct mon *m, int *status)
{
	if (!split_child(m))
		return waitpid(m->vm.pid, status, WNOHANG) > 0;
	if (!m->vm.pid)
		return 0;
	struct sbx_buf b = { 0 };
	struct priv_msg a;
	msg_begin(&b, PRIV_VM_REAP);
	int rc = call(m, &b, NULL, 0, &a, NULL);
	sbx_buf_free(&b);
	close_fds(&a);
	if (rc < 0 || !a.num[PT_FLAG])
		return 0;
	*status = (int)a.num[PT_STATUS];
	return 1;
}

int mon_vm_pause(struct mon *m, struct sbx_err *err)
{
	return split_child(m) ? call0(m, PRIV_VM_PAUSE, err) : sbx_vm_pause(&m->vm, err);
}

int mon_vm_resume(struct mon *m, struct sbx_err *err)
{
	return split_child(m) ? call0(m, PRIV_VM_RESUME, err) : sbx_vm_resume(&m->vm, err);
}

void mon_cg_usage(struct mon *m, uint64_t *cpu, uint64_t *peak)
{
	if (!split_child(m)) {
		sbx_cgroup_usage(sbx_session_cgroup(&m->s), cpu, peak);
		return;
	}
	call_nums(m, PRIV_CG_USAGE, cpu, peak);
}

/* The record's CPU cap (a claim's new policy, a restore's held-back one). */
static int cg_set_cpu_direct(struct mon *m)
{
	unsigned cpu = m->s.limits.cpu_milli ? m->s.limits.cpu_milli : m->s.vcpus * 1000;
	return sbx_cgroup_set_cpu(sbx_session_cgroup(&m->s), cpu);
}

int mon_cg_set_cpu(struct mon *m)
{
	if (!split_child(m))
		return cg_set_cpu_direct(m);
	struct sbx_err e = { 0 };
	int rc = call0(m, PRIV_CG_SET_CPU, &e);
	if (rc < 0)
		errno = e.errnum ? e.errnum : EPERM;
	return rc;
}

int mon_has_workspace(const struct mon *m)
{
	return split_child(m) ? m->s.workspace[0] && !m->priv.ws_released : m->ws.lock_fd >= 0;
}

void mon_drop_workspace(struct mon *m, int failed)
{
	if (!split_child(m))
		return mon_workspace_release(m, failed);
	if (!mon_has_workspace(m))
		return;
	m->priv.ws_released = 1;
	struct sbx_buf b = { 0 };
	msg_begin(&b, PRIV_WS_RELEASE);
	sbx_tlv_u64(&b, PT_FLAG, failed ? 1 : 0);
	call(m, &b, NULL, 0, NULL, NULL);
	sbx_buf_free(&b);
}

static uint64_t file_size(int dfd, const char *name)
{
	struct stat st;
	return fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW) == 0 ? (uint64_t)st.st_size : 0;
}

void mon_log_sizes(struct mon *m, uint64_t *net, uint64_t *pkg)
{
	*net = *pkg = 0;
	if (!split_child(m)) {
		*net = file_size(m->lib_dfd, "net.log");
		*pkg = file_size(m->lib_dfd, "packages.log");
		return;
	}
	call_nums(m, PRIV_LOG_SIZES, net, pkg);
}

json_t *mon_violations(struct mon *m, uint64_t net_off, uint64_t pkg_off)
{
	if (!split_child(m))
		return sbx_netlog_violations(m->lib_dfd, net_off, pkg_off);
	struct sbx_buf b = { 0 };
	struct priv_msg a;
	msg_begin(&b, PRIV_VIOLATIONS);
	sbx_tlv_u64(&b, PT_NUM_A, net_off);
	sbx_tlv_u64(&b, PT_NUM_B, pkg_off);
	json_t *v = NULL;
	if (call(m, &b, NULL, 0, &a, NULL) == 0 && a.str[PT_TEXT])
		v = json_loads(a.str[PT_TEXT], 0, NULL);
	sbx_buf_free(&b);
	if (v && !json_is_object(v)) {
		json_decref(v);
		v = NULL;
	}
	return v;
}

char *mon_policy_text(struct mon *m)
{
	if (!split_child(m))
		return sbx_read_small_at(m->lib_dfd, "policy.json", 1 << 20, NULL);
	struct sbx_buf b = { 0 };
	struct priv_msg a;
	msg_begin(&b, PRIV_POLICY);
	char *txt = call(m, &b, NULL, 0, &a, NULL) == 0 && a.str[PT_TEXT] ? strdup(a.str[PT_TEXT]) : NULL;
	sbx_buf_free(&b);
	return txt;
}

void mon_ports_save(struct mon *m, const char *txt)
{
	if (!split_child(m)) {
		if (txt)
			sbx_atomic_write_at(m->lib_dfd, "ports.json", txt, strlen(txt), 0644, NULL);
		else
			unlinkat(m->lib_dfd, "ports.json", 0);
		return;
	}
	struct sbx_buf b = { 0 };
	msg_begin(&b, PRIV_PORTS_SAVE);
	if (txt)
		sbx_tlv_str(&b, PT_TEXT, txt);
	call(m, &b, NULL, 0, NULL, NULL);
	sbx_buf_free(&b);
}

int mon_port_reg(struct mon *m, int fd, const char *path, uint64_t *dev, uint64_t *ino)
{
	if (!split_child(m)) {
		struct stat sb;
		if (lstat(path, &sb) < 0 || !S_ISSOCK(sb.st_mode))
			return -1;
		*dev = sb.st_dev;
		*ino = sb.st_ino;
		return 0;
	}
	struct sbx_buf b = { 0 };
	struct priv_msg a;
	msg_begin(&b, PRIV_PORT_REG);
	sbx_tlv_str(&b, PT_PATH, path);
	int rc = call(m, &b, &fd, 1, &a, NULL);
	sbx_buf_free(&b);
	if (rc == 0) {
		close_fds(&a);
		*dev = a.num[PT_NUM_A];
		*ino = a.num[PT_NUM_B];
	}
	return rc;
}

/* Our socket file only: the one seen at open, not what took its name. */
static void port_unlink_direct(const char *path, uint64_t dev, uint64_t ino)
{
	struct stat sb;
	if (path[0] && lstat(path, &sb) == 0 && S_ISSOCK(sb.st_mode) && sb.st_dev == dev && sb.st_ino == ino)
		unlink(path);
}

void mon_port_unlink(struct mon *m, const char *path, uint64_t dev, uint64_t ino)
{
	if (!split_child(m))
		return port_unlink_direct(path, dev, ino);
	if (!path[0])
		return;
	struct sbx_buf b = { 0 };
	msg_begin(&b, PRIV_PORT_UNLINK);
	sbx_tlv_str(&b, PT_PATH, path);
	call(m, &b, NULL, 0, NULL, NULL);
	sbx_buf_free(&b);
}

int mon_snap_dir(struct mon *m, const char *rel)
{
	if (!split_child(m))
		return snap_dir_ok(m, rel);
	struct sbx_buf b = { 0 };
	msg_begin(&b, PRIV_SNAP_DIR);
	sbx_tlv_str(&b, PT_PATH, rel);
	int rc = call(m, &b, NULL, 0, NULL, NULL);
	sbx_buf_free(&b);
	return rc;
}

int mon_snap_write(struct mon *m, sbx_zprogress progress, struct sbx_err *err)
{
	if (!split_child(m))
		return snap_write(m, progress, m, err);
	m->priv.progress = progress;
	m->priv.progress_ctx = m;
	int rc = call0(m, PRIV_SNAP_SAVE, err);
	m->priv.progress = NULL;
	return rc;
}

int mon_susp_image(struct mon *m, uint64_t *bytes, struct sbx_err *err)
{
	if (!split_child(m))
		return susp_write_image(m, bytes, err);
	struct sbx_buf b = { 0 };
	struct priv_msg a;
	msg_begin(&b, PRIV_SUSP_IMAGE);
	int rc = call(m, &b, NULL, 0, &a, err);
	sbx_buf_free(&b);
	if (rc == 0)
		*bytes = a.num[PT_NUM_A];
	return rc;
}

static void susp_discard_direct(struct mon *m)
{
	sbx_rm_rf_at(m->lib_dfd, SBX_SUSPEND_TMP);
	sbx_rm_rf_at(m->lib_dfd, SBX_SUSPEND_DIR);
}

void mon_susp_discard(struct mon *m)
{
	if (!split_child(m))
		return susp_discard_direct(m);
	call0(m, PRIV_SUSP_DISCARD, NULL);
}

int mon_susp_room(struct mon *m, struct sbx_err *err)
{
	return split_child(m) ? call0(m, PRIV_SUSP_ROOM, err) : susp_take_room(m, err);
}

/* A VMM booted again from the suspend image: its pipes, pidfd and agent
 * connection into the loop.  fds: console, vmm.log, agent (-1: none). */
static void vmm_install(struct mon *m, const int *fds)
{
	struct vmmout *outs[] = { &m->console, &m->vmmlog };
	for (int i = 0; i < 2; i++)
		if (fds[i] >= 0) {
			outs[i]->src.fd = fds[i];
			mon_ep_mod(m, &outs[i]->src, EPOLLIN, EPOLL_CTL_ADD);
		}
	if (fds[2] >= 0) {
		m->agent.fd = fds[2];
		mon_ep_mod(m, &m->agent, EPOLLIN, EPOLL_CTL_ADD);
	}
}

/* The proxy the parent started (give_proxy): are n fds of a, from the
 * request's answer, what it sends ([proxy.log,] the read end of the
 * proxy's stderr, a copy of its pidfd)?  proxy.log only when this half
 * has none (a claim's first proxy; a resume's keeps the file). */
static int proxy_fds_ok(const struct mon *m, const struct priv_msg *a, int n)
{
	return (n == 2 || n == 3) && (n == 3) == (m->proxylog.fd < 0) && a->num[PT_PROXY_PID] > 0 &&
	       a->num[PT_PROXY_PID] < (uint64_t)INT_MAX;
}

/* Those fds (checked) into the loop, and the proxy into our record. */
static void take_proxy(struct mon *m, const struct priv_msg *a, int from, int n)
{
	const int *f = a->fds + from;
	if (n == 3) {
		m->proxylog.fd = *f++;
		m->proxylog.name = "proxy.log";
		m->proxylog.cap = PROXY_LOG_CAP;
		m->proxylog.size = m->proxylog.dropped = 0;
	}
	if (m->proxylog.src.fd >= 0)
		child_drop_fd(m, &m->proxylog.src.fd);
	m->proxylog.src.fd = *f++;
	mon_ep_mod(m, &m->proxylog.src, EPOLLIN, EPOLL_CTL_ADD);
	child_drop_fd(m, &m->proxy.fd);
	m->proxy.fd = *f;
	mon_ep_mod(m, &m->proxy, EPOLLIN, EPOLL_CTL_ADD);
	m->proxy_pid = (int)a->num[PT_PROXY_PID];
	m->s.proxy_pid = m->proxy_pid;
	m->s.proxy_start = a->num[PT_PROXY_START];
}

int mon_susp_vmm(struct mon *m, struct sbx_err *err)
{
	int fds[3] = { -1, -1, -1 };
	int rc;
	if (!split_child(m)) {
		rc = susp_boot_vmm(m, fds, err);
	} else {
		struct sbx_buf b = { 0 };
		struct priv_msg a;
		msg_begin(&b, PRIV_SUSP_VMM);
		rc = call(m, &b, NULL, 0, &a, err);
		sbx_buf_free(&b);
		/* fds: console, vmm.log (on a failure too: what the VMM said),
		 * then on success the agent and the pidfd [, the event stream]
		 * [, with a NIC the new proxy's, NUM_A of them, last]. */
		for (int i = 0; i < a.nfds && i < 3; i++)
			fds[i] = a.fds[i];
		int np = rc == 0 && a.num[PT_NUM_A] <= PRIV_FDS_MAX ? (int)a.num[PT_NUM_A] : 0, nv = a.nfds - np;
		if (rc == 0 && nv >= 4 && nv <= 5 && (m->s.mac[0] ? proxy_fds_ok(m, &a, np) : np == 0)) {
			m->vm.pid = (int)a.num[PT_PID];
			m->vm.start_time = a.num[PT_START];
			m->vm.pidfd = a.fds[3];
			m->vm.event_fd = nv == 5 ? a.fds[4] : -1;
			if (np)
				take_proxy(m, &a, nv, np);
		} else {
			for (int i = 3; i < a.nfds; i++)
				close(a.fds[i]);
			if (rc == 0) {
				for (int i = 0; i < 3; i++)
					if (fds[i] >= 0)
						close(fds[i]);
				return sbx_err_set(err, SBX_EXIT_INTERNAL, 0, "the resumed VMM's descriptors did not come");
			}
		}
	}
	vmm_install(m, fds);
	if (rc < 0) {
		/* What the VMM said before it went is in the pipe still. */
		char tail[200];
		vmmout_drain_all(m);
		sbx_log_tail_fd(m->vmmlog.fd, tail, sizeof tail);
		size_t l = strlen(err->msg);
		if (tail[0] && !strstr(err->msg, tail) && l < sizeof err->msg - 1)
			snprintf(err->msg + l, sizeof err->msg - l, "; vmm.log: %s", tail);
		vmmout_close_pipes(m);
		return -1;
	}
	m->vmm.fd = m->vm.pidfd;
	mon_ep_mod(m, &m->vmm, EPOLLIN, EPOLL_CTL_ADD);
	if ((m->vmev.fd = m->vm.event_fd) > 0)
		mon_ep_mod(m, &m->vmev, EPOLLIN, EPOLL_CTL_ADD);
	return 0;
}

int mon_claim_commit(struct mon *m, const char *id, const char *rec, const char *pol, int *code, char *why, size_t n)
{
	if (!split_child(m))
		return claim_commit(m, id, rec, pol, code, why, n);
	struct sbx_buf b = { 0 };
	struct priv_msg a;
	struct sbx_err e = { 0 };
	msg_begin(&b, PRIV_CLAIM);
	sbx_tlv_str(&b, PT_ID, id);
	sbx_tlv_str(&b, PT_TEXT, rec);
	sbx_tlv_str(&b, PT_TEXT2, pol);
	int rc = call(m, &b, NULL, 0, &a, &e);
	sbx_buf_free(&b);
	if (rc < 0) {
		*code = e.code;
		snprintf(why, n, "%s", e.msg);
		return -1;
	}
	/* Committed: the session's record as the parent saved it. */
	struct sbx_session ns;
	if (!a.str[PT_TEXT] || sbx_record_parse(a.str[PT_TEXT], id, &ns) < 0) {
		snprintf(why, n, "the claimed session's record did not come back");
		return 1;
	}
	snprintf(m->claim.from, sizeof m->claim.from, "%s", m->s.id);
	m->s = ns;
	if (a.num[PT_FLAG])
		snprintf(why, n, "%s", a.str[PT_MSG] ? a.str[PT_MSG] : "the claim failed");
	return a.num[PT_FLAG] ? 1 : 0;
}

/* A pool member's claim: its bare namespace completed and the claimed
 * session's proxy started (mon_attach_network; the parent's, which holds
 * the namespace, when split).  1 when it was, 0 when there is no network
 * to attach, -1 with err when it failed. */
int mon_claim_network(struct mon *m, struct sbx_err *err)
{
	if (!split_child(m)) {
		if (m->bare_netns < 0)
			return 0;
		int rc = mon_attach_network(m, m->bare_netns, err);
		close(m->bare_netns);
		m->bare_netns = -1;
		return rc < 0 ? -1 : 1;
	}
	if (!m->priv.bare_netns)
		return 0;
	m->priv.bare_netns = 0;
	struct sbx_buf b = { 0 };
	struct priv_msg a;
	msg_begin(&b, PRIV_NET_ATTACH);
	int rc = call(m, &b, NULL, 0, &a, err);
	sbx_buf_free(&b);
	if (rc == 0 && a.num[PT_NUM_A] == (uint64_t)a.nfds && proxy_fds_ok(m, &a, a.nfds)) {
		take_proxy(m, &a, 0, a.nfds);
		return 1;
	}
	close_fds(&a);
	return rc < 0 ? -1 : sbx_err_set(err, SBX_EXIT_INTERNAL, 0, "the proxy's descriptors did not come");
}

/* --- the parent's side: one request, checked -------------------------------- */

/* What the child may write to the audit trail: the loop's own records,
 * always of this session and tenant (stamped here over whatever it said).
 * The rest (session.crash, .stop, .expire, net.lost, workspace.*) only
 * the parent writes. */
static const char *const audit_types[] = {
	"exec.start",	     "exec.end",	"session.responsive", "session.unresponsive", "session.pause",
	"session.resume",    "session.suspend", "session.create",     "session.destroy",      "port.open",
	"port.close",
};

static int printable(const char *s)
{
	for (; *s; s++)
		if ((unsigned char)*s < 0x20 || *s == 0x7f)
			return 0;
	return 1;
}

/* The record's state moves only along the monitor's own transitions; the
 * end states come by PRIV_END, a claim's running by a committed claim. */
static int transition_ok(const struct mon *m, const char *from, const char *to)
{
	static const char *const ok[][2] = {
		{ "running", "paused" },   { "paused", "running" },    { "running", "suspended" },
		{ "paused", "suspended" }, { "suspended", "running" },
	};
	if (!strcmp(from, to))
		return 1;
	if (!strcmp(from, "creating") && !strcmp(to, "running"))
		return m->priv.claimed;
	for (size_t i = 0; i < SBX_ARRAY_LEN(ok); i++)
		if (!strcmp(ok[i][0], from) && !strcmp(ok[i][1], to))
			return 1;
	return 0;
}

#define MAX_MS (24ull * 3600 * 1000)

static int h_record(struct mon *m, const struct priv_msg *q, struct sbx_err *err)
{
	struct sbx_session *r = malloc(sizeof *r);
	if (!r)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, ENOMEM, "out of memory");
	*r = m->s;
	const char *st = q->str[PT_STATE];
	uint64_t now = sbx_now_ns(), un = q->num[PT_UNRESP_NS];
	int rc = 0, to_susp = 0;
	if (!st || !transition_ok(m, r->state, st))
		rc = sbx_err_set(err, SBX_EXIT_INVALID, 0, "no such state change");
	else if (!priv_has(q, PT_UNRESP_NS) || (un && (un > now || un < r->created_ns)))
		rc = sbx_err_set(err, SBX_EXIT_INVALID, 0, "agent_unresponsive_ns out of range");
	else if (!q->str[PT_KERNEL] || !printable(q->str[PT_KERNEL]) || strlen(q->str[PT_KERNEL]) >= sizeof r->kernel)
		rc = sbx_err_set(err, SBX_EXIT_INVALID, 0, "bad kernel release");
	else if (q->num[PT_CLAIM_MS] > MAX_MS || q->num[PT_RESUME_MS] > MAX_MS)
		rc = sbx_err_set(err, SBX_EXIT_INVALID, 0, "times out of range");
	if (rc == 0) {
		if (strcmp(r->state, st)) {
			int from_susp = !strcmp(r->state, "suspended"), from_creating = !strcmp(r->state, "creating");
			to_susp = !strcmp(st, "suspended");
			mon_note_state(r, st);
			if (to_susp) {
				r->suspends++;
				r->vmm_pid = 0;
				r->vmm_start = 0;
			} else if (from_susp) {
				r->vmm_pid = m->vm.pid;
				r->vmm_start = m->vm.start_time;
			} else if (from_creating) {
				r->ready_ns = now;
				m->priv.claimed = 0;
			}
		}
		r->agent_unresponsive_ns = un;
		snprintf(r->kernel, sizeof r->kernel, "%s", q->str[PT_KERNEL]);
		r->claim_ms = q->num[PT_CLAIM_MS];
		r->resume_ms = q->num[PT_RESUME_MS];
		rc = sbx_record_save(&m->st, r, err);
	}
	if (rc == 0)
		m->s = *r;
	free(r);
	if (rc == 0 && to_susp)
		susp_fault_point(m, "recorded");
	return rc;
}

/* ports.json from the child: checked and written in the parent's own
 * encoding. */
static int h_ports(struct mon *m, const struct priv_msg *q, struct sbx_err *err)
{
	if (!q->str[PT_TEXT]) {
		unlinkat(m->lib_dfd, "ports.json", 0);
		return 0;
	}
	json_t *in = json_loads(q->str[PT_TEXT], JSON_REJECT_DUPLICATES, NULL), *out = json_array(), *e;
	size_t i;
	int rc = json_is_array(in) && json_array_size(in) <= 64 && out ? 0 : -1;
	json_array_foreach(rc == 0 ? in : NULL, i, e) {
		json_t *p = json_object_get(e, "guest_port"), *a = json_object_get(e, "address"), *u = json_object_get(e, "uid");
		if (!json_is_object(e) || json_object_size(e) != 3 || !json_is_integer(p) || json_integer_value(p) < 1 ||
		    json_integer_value(p) > 65535 || !json_is_string(a) || strlen(json_string_value(a)) >= SBX_PORT_ADDR_MAX ||
		    !printable(json_string_value(a)) || !json_is_integer(u) || json_integer_value(u) < -1 ||
		    json_integer_value(u) > (json_int_t)UINT32_MAX) {
			rc = -1;
			break;
		}
		json_array_append_new(out, json_pack("{s:O, s:O, s:O}", "guest_port", p, "address", a, "uid", u));
	}
	char *txt = rc == 0 ? json_dumps(out, JSON_COMPACT) : NULL;
	json_decref(in);
	json_decref(out);
	if (!txt)
		return sbx_err_set(err, SBX_EXIT_INVALID, 0, "not a list of forwards");
	rc = sbx_atomic_write_at(m->lib_dfd, "ports.json", txt, strlen(txt), 0644, err);
	free(txt);
	return rc;
}

/* A unix listener a client handed over: the parent learns its file from
 * the socket itself and alone may remove it later. */
static int h_port_reg(struct mon *m, const struct priv_msg *q, struct sbx_buf *r, struct sbx_err *err)
{
	struct sockaddr_un su;
	socklen_t sl = sizeof su;
	struct stat sb;
	const char *path = q->str[PT_PATH];
	if (q->nfds != 1 || !path || getsockname(q->fds[0], (struct sockaddr *)&su, &sl) < 0 || su.sun_family != AF_UNIX ||
	    sl <= offsetof(struct sockaddr_un, sun_path) || strncmp(su.sun_path, path, sizeof su.sun_path) || path[0] != '/')
		return sbx_err_set(err, SBX_EXIT_INVALID, 0, "not that unix socket");
	if (lstat(path, &sb) < 0 || !S_ISSOCK(sb.st_mode))
		return sbx_err_set(err, SBX_EXIT_INVALID, errno, "the unix socket %s is not there", path);
	unsigned slot = 0;
	while (slot < SBX_ARRAY_LEN(m->priv.ports) && m->priv.ports[slot].path[0])
		slot++;
	if (slot == SBX_ARRAY_LEN(m->priv.ports))
		return sbx_err_set(err, SBX_EXIT_TEMPFAIL, 0, "too many forwards");
	snprintf(m->priv.ports[slot].path, sizeof m->priv.ports[slot].path, "%s", path);
	m->priv.ports[slot].dev = sb.st_dev;
	m->priv.ports[slot].ino = sb.st_ino;
	sbx_tlv_u64(r, PT_NUM_A, sb.st_dev);
	sbx_tlv_u64(r, PT_NUM_B, sb.st_ino);
	return 0;
}

static void h_port_unlink(struct mon *m, const char *path)
{
	for (unsigned i = 0; path && i < SBX_ARRAY_LEN(m->priv.ports); i++)
		if (m->priv.ports[i].path[0] && !strcmp(m->priv.ports[i].path, path)) {
			port_unlink_direct(path, m->priv.ports[i].dev, m->priv.ports[i].ino);
			m->priv.ports[i].path[0] = 0;
		}
}

/* The save's progress, to the child waiting on PRIV_SNAP_SAVE. */
static void relay_progress(void *ctx, const char *what, uint64_t done, uint64_t total)
{
	struct mon *m = ctx;
	static uint64_t last;
	uint64_t now = sbx_mono_ns();
	if (now - last < 50000000u && done != total)
		return; /* the child shows at most 10 a second */
	last = now;
	struct sbx_buf b = { 0 };
	msg_begin(&b, PRIV_PROGRESS);
	sbx_tlv_str(&b, PT_WHAT, what);
	sbx_tlv_u64(&b, PT_NUM_A, done);
	sbx_tlv_u64(&b, PT_NUM_B, total);
	chan_send(m->priv.fd, &b, NULL, 0);
	sbx_buf_free(&b);
}

/* The proxy the parent just started (spawn_proxy), for the child's loop
 * (take_proxy): proxy.log's file when the child has none yet, the read
 * end of the proxy's stderr, a copy of its pidfd (the parent keeps its
 * own, to stop and reap it).  The parent keeps nothing of the log. */
static void give_proxy(struct mon *m, struct sbx_buf *r, int *fds, int *nfds)
{
	int n = 2;
	if (m->proxylog.fd >= 0) {
		fds[(*nfds)++] = m->proxylog.fd;
		n++;
	}
	fds[(*nfds)++] = m->proxylog.src.fd;
	fds[(*nfds)++] = m->proxy.fd;
	m->proxylog.fd = m->proxylog.src.fd = -1; /* closed once sent (mon_priv_serve) */
	m->priv.proxylog_child = 1;
	sbx_tlv_u64(r, PT_NUM_A, (uint64_t)n);
	sbx_tlv_u64(r, PT_PROXY_PID, (uint64_t)m->proxy_pid);
	sbx_tlv_u64(r, PT_PROXY_START, m->s.proxy_start);
}

/* A network step that failed: the parent holds nothing of its log. */
static void net_failed(struct mon *m)
{
	proxy_stop_direct(m);
	vmmout_close(&m->proxylog);
	m->s.proxy_pid = 0;
	m->s.proxy_start = 0;
}

/* A resume: only of a session the parent's record says is suspended, with
 * no VMM or proxy of its own running; the network from its own record and
 * policy.json (susp_boot_vmm). */
static int h_susp_vmm(struct mon *m, struct sbx_buf *r, int *fds, int *nfds, struct sbx_err *err)
{
	int got[3] = { -1, -1, -1 };
	*nfds = 0;
	if (strcmp(m->s.state, "suspended") || m->vm.pid > 0 || m->proxy_pid > 0)
		return sbx_err_set(err, SBX_EXIT_INVALID, 0, "the session is not suspended");
	int rc = susp_boot_vmm(m, got, err);
	for (int i = 0; i < 2; i++)
		if (got[i] >= 0)
			fds[(*nfds)++] = got[i];
	if (rc < 0 || *nfds != 2 || got[2] < 0) {
		if (got[2] >= 0)
			close(got[2]);
		if (rc == 0) {
			mon_vm_kill(m);
			rc = sbx_err_set(err, SBX_EXIT_INTERNAL, 0, "the resumed VMM's pipes are missing");
		}
		net_failed(m);
		return rc;
	}
	fds[(*nfds)++] = got[2];
	fds[(*nfds)++] = m->vm.pidfd;
	if (m->vm.event_fd > 0)
		fds[(*nfds)++] = m->vm.event_fd;
	if (m->s.mac[0])
		give_proxy(m, r, fds, nfds);
	sbx_tlv_u64(r, PT_PID, (uint64_t)m->vm.pid);
	sbx_tlv_u64(r, PT_START, m->vm.start_time);
	return 0;
}

/* A claim's network: once, for this session's committed claim, from its
 * own record and policy.json (as the commit wrote them) and the bare
 * namespace the parent kept. */
static int h_net_attach(struct mon *m, struct sbx_buf *r, int *fds, int *nfds, struct sbx_err *err)
{
	*nfds = 0;
	if (m->bare_netns < 0 || !m->priv.claimed || strcmp(m->s.state, "creating") || m->proxy_pid > 0)
		return sbx_err_set(err, SBX_EXIT_INVALID, 0, "no claimed session's network to attach");
	if (mon_claim_network(m, err) < 0) {
		net_failed(m);
		return -1;
	}
	give_proxy(m, r, fds, nfds);
	return 0;
}

static int h_claim(struct mon *m, const struct priv_msg *q, struct sbx_buf *r, struct sbx_err *err)
{
	char why[256] = "";
	int code = SBX_EXIT_INVALID;
	if (!q->str[PT_ID] || !q->str[PT_TEXT] || !q->str[PT_TEXT2] || !m->s.pool)
		return sbx_err_set(err, SBX_EXIT_INVALID, 0, "malformed claim");
	int rc = claim_commit(m, q->str[PT_ID], q->str[PT_TEXT], q->str[PT_TEXT2], &code, why, sizeof why);
	if (rc < 0)
		return sbx_err_set(err, code, 0, "%s", why);
	m->priv.claimed = 1;
	char *txt = sbx_record_text(&m->s);
	if (!txt)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, ENOMEM, "out of memory");
	sbx_tlv_u64(r, PT_FLAG, rc ? 1 : 0);
	sbx_tlv_str(r, PT_TEXT, txt);
	if (rc)
		sbx_tlv_str(r, PT_MSG, why);
	free(txt);
	return 0;
}

/* One request: the answer into r (after its CODE), fds to pass into fds. */
static int handle(struct mon *m, const struct priv_msg *q, struct sbx_buf *r, int *fds, int *nfds, struct sbx_err *err)
{
	int status = 0, n;
	*nfds = 0;
	switch (q->op) {
	case PRIV_AUDIT: {
		const char *t = q->str[PT_TYPE];
		int known = 0;
		for (size_t i = 0; t && i < SBX_ARRAY_LEN(audit_types); i++)
			known |= !strcmp(t, audit_types[i]);
		json_t *f = known && q->str[PT_FIELDS] && strlen(q->str[PT_FIELDS]) <= (64u << 10)
				    ? json_loads(q->str[PT_FIELDS], JSON_REJECT_DUPLICATES, NULL)
				    : NULL;
		if (!json_is_object(f)) {
			json_decref(f);
			return sbx_err_set(err, SBX_EXIT_INVALID, 0, "not an audit record the monitor writes");
		}
		json_object_set_new(f, "session", json_string(m->s.id));
		json_object_del(f, "tenant");
		int rc = audit_direct(m, t, f, err);
		json_decref(f);
		return rc;
	}
	case PRIV_RECORD:
		return h_record(m, q, err);
	case PRIV_END: {
		const char *st = q->str[PT_STATE], *why = q->str[PT_REASON];
		if (m->priv.ended || !st || !why || !printable(why) || strlen(why) >= sizeof m->s.end_reason ||
		    (strcmp(st, "expired") && strcmp(st, "crashed") && strcmp(st, "stopped")))
			return sbx_err_set(err, SBX_EXIT_INVALID, 0, "not an end of a session");
		end_direct(m, st, why);
		return 0;
	}
	case PRIV_DESTROY:
		sbx_tlv_u64(r, PT_FLAG, (uint64_t)destroy_direct(m, q->num[PT_FLAG] != 0));
		return 0;
	case PRIV_VM_KILL:
		sbx_vm_kill(&m->vm);
		return 0;
	case PRIV_VM_REAP:
		n = m->vm.pid > 0 && waitpid(m->vm.pid, &status, WNOHANG) > 0;
		if (n)
			m->vm.pid = 0;
		sbx_tlv_u64(r, PT_FLAG, (uint64_t)n);
		sbx_tlv_u64(r, PT_STATUS, (uint64_t)(unsigned)status);
		return 0;
	case PRIV_VM_PAUSE:
		return sbx_vm_pause(&m->vm, err);
	case PRIV_VM_RESUME:
		return sbx_vm_resume(&m->vm, err);
	case PRIV_PROXY_STOP:
		proxy_stop_direct(m);
		m->s.proxy_pid = 0; /* the record forgets it at its next save (a suspend's) */
		m->s.proxy_start = 0;
		return 0;
	case PRIV_PROXY_REAP:
		n = proxy_reap_direct(m);
		sbx_tlv_u64(r, PT_FLAG, (uint64_t)n);
		if (n)
			sbx_tlv_str(r, PT_REASON, m->s.net_lost);
		return 0;
	case PRIV_CG_USAGE: {
		uint64_t cpu = 0, peak = 0;
		sbx_cgroup_usage(sbx_session_cgroup(&m->s), &cpu, &peak);
		sbx_tlv_u64(r, PT_NUM_A, cpu);
		sbx_tlv_u64(r, PT_NUM_B, peak);
		return 0;
	}
	case PRIV_CG_SET_CPU:
		return cg_set_cpu_direct(m) < 0 ? sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot set the CPU cap") : 0;
	case PRIV_WS_RELEASE:
		mon_workspace_release(m, q->num[PT_FLAG] != 0);
		return 0;
	case PRIV_LOG_SIZES:
		sbx_tlv_u64(r, PT_NUM_A, file_size(m->lib_dfd, "net.log"));
		sbx_tlv_u64(r, PT_NUM_B, file_size(m->lib_dfd, "packages.log"));
		return 0;
	case PRIV_VIOLATIONS: {
		json_t *v = sbx_netlog_violations(m->lib_dfd, q->num[PT_NUM_A], q->num[PT_NUM_B]);
		char *txt = v ? json_dumps(v, JSON_COMPACT) : NULL;
		json_decref(v);
		if (txt && strlen(txt) < PRIV_MSG_MAX / 2)
			sbx_tlv_str(r, PT_TEXT, txt);
		free(txt);
		return 0;
	}
	case PRIV_POLICY: {
		char *txt = sbx_read_small_at(m->lib_dfd, "policy.json", PRIV_MSG_MAX / 2, NULL);
		if (txt)
			sbx_tlv_str(r, PT_TEXT, txt);
		free(txt);
		return 0;
	}
	case PRIV_PORTS_SAVE:
		return h_ports(m, q, err);
	case PRIV_PORT_REG:
		return h_port_reg(m, q, r, err);
	case PRIV_PORT_UNLINK:
		h_port_unlink(m, q->str[PT_PATH]);
		return 0;
	case PRIV_SNAP_DIR:
		if (!q->str[PT_PATH] || snap_dir_ok(m, q->str[PT_PATH]) < 0)
			return sbx_err_set(err, SBX_EXIT_INVALID, 0, "not a snapshot directory of this session's tenant");
		m->priv.snap_dir_set = 1;
		return 0;
	case PRIV_SNAP_SAVE:
		if (!m->priv.snap_dir_set)
			return sbx_err_set(err, SBX_EXIT_INVALID, 0, "no snapshot directory");
		m->priv.snap_dir_set = 0;
		return snap_write(m, relay_progress, m, err);
	case PRIV_SUSP_IMAGE: {
		uint64_t bytes = 0;
		if (susp_write_image(m, &bytes, err) < 0)
			return -1;
		sbx_tlv_u64(r, PT_NUM_A, bytes);
		return 0;
	}
	case PRIV_SUSP_DISCARD:
		susp_discard_direct(m);
		return 0;
	case PRIV_SUSP_ROOM:
		return susp_take_room(m, err);
	case PRIV_SUSP_VMM:
		return h_susp_vmm(m, r, fds, nfds, err);
	case PRIV_CLAIM:
		return h_claim(m, q, r, err);
	case PRIV_NET_ATTACH:
		return h_net_attach(m, r, fds, nfds, err);
	default:
		return sbx_err_set(err, SBX_EXIT_INVALID, 0, "not a request");
	}
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
	int *fds[] = { &m->ep,	       &m->listen.fd,	   &m->agent.fd,     &m->timer.fd,   &m->console.src.fd,
		       &m->console.fd, &m->vmmlog.src.fd,  &m->vmmlog.fd,    &m->proxylog.src.fd, &m->proxylog.fd,
		       &m->execs_dfd };
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
	uid_t uid = SBX_JAIL_UID_BASE + PRIV_UID_OFFSET + (uid_t)getpid();
	if (fchown(m->execs_dfd, uid, uid) < 0)
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
	(void)lock_fd; /* closed with the rest */
	if (m->readyp.fd >= 0) /* the parent's to answer; out of our epoll set first */
		epoll_ctl(m->ep, EPOLL_CTL_DEL, m->readyp.fd, NULL);
	int keep[32 + MAX_CLIENTS], n = 0;
	int mine[] = { 0,	    1,		   2,		  chan,		    ppfd,	      m->ep,
		       m->listen.fd, m->agent.fd,  m->sig.fd,	  m->timer.fd,	    m->console.src.fd, m->console.fd,
		       m->vmmlog.src.fd, m->vmmlog.fd, m->proxylog.src.fd, m->proxylog.fd, m->vmev.fd,	      m->vm.pidfd,
		       m->proxy.fd,  m->execs_dfd };
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
			msg_begin(&b, PRIV_EXIT);
			sbx_tlv_u64(&b, PT_STATUS, 126);
			sbx_tlv_str(&b, PT_MSG, e.msg);
			chan_send(sv[1], &b, NULL, 0);
			_exit(126);
		}
		struct sbx_buf b = { 0 };
		msg_begin(&b, PRIV_READY);
		chan_send(m->priv.fd, &b, NULL, 0);
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

void mon_priv_exit(struct mon *m, int rc)
{
	if (!split_child(m))
		return;
	struct sbx_buf b = { 0 };
	msg_begin(&b, PRIV_EXIT);
	sbx_tlv_u64(&b, PT_STATUS, (uint64_t)rc);
	chan_send(m->priv.fd, &b, NULL, 0);
	sbx_buf_free(&b);
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
			if (priv_decode(buf, (size_t)n, sizeof buf, &q) < 0 || q.op == PRIV_REPLY || q.op == PRIV_PROGRESS ||
			    q.op == PRIV_READY) {
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
				close_fds(&q);
				continue;
			}
			struct sbx_err err = { 0 };
			int out[PRIV_FDS_MAX], nout = 0;
			msg_begin(&r, PRIV_REPLY);
			struct sbx_buf res = { 0 };
			int rc = handle(m, &q, &res, out, &nout, &err);
			close_fds(&q);
			sbx_tlv_u64(&r, PT_CODE, rc < 0 ? (uint64_t)(err.code ? err.code : SBX_EXIT_INTERNAL) : 0);
			if (rc < 0) {
				sbx_tlv_str(&r, PT_MSG, err.msg);
				sbx_tlv_u64(&r, PT_ERRNO, (uint64_t)err.errnum);
			}
			sbx_buf_put(&r, res.data, res.len);
			sbx_buf_free(&res);
			chan_send(m->priv.fd, &r, out, nout);
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
