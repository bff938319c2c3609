/* sbx-monitor: the privileged steps of a running session, each one in
 * either process: the step itself (a monitor that did not split, or the
 * parent serving a request) or, in the child, its request (priv.c). */
#include "mon.h"
#include "priv.h"
#include "priv_int.h"

#include <limits.h>
#include <poll.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>

/* --- the steps, in either process ----------------------------------------- */

int audit_direct(struct mon *m, const char *type, json_t *f, struct sbx_err *err)
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
	priv_msg_begin(&b, PRIV_AUDIT);
	sbx_tlv_str(&b, PT_TYPE, type);
	sbx_tlv_str(&b, PT_FIELDS, txt);
	free(txt);
	int rc = priv_call(m, &b, NULL, 0, NULL, err);
	sbx_buf_free(&b);
	return rc;
}

int mon_record_save(struct mon *m, struct sbx_err *err)
{
	if (!split_child(m))
		return sbx_record_save(&m->st, &m->s, err);
	struct sbx_buf b = { 0 };
	priv_msg_begin(&b, PRIV_RECORD);
	sbx_tlv_str(&b, PT_STATE, m->s.state);
	sbx_tlv_u64(&b, PT_UNRESP_NS, m->s.agent_unresponsive_ns);
	sbx_tlv_str(&b, PT_KERNEL, m->s.kernel);
	sbx_tlv_u64(&b, PT_CLAIM_MS, m->s.claim_ms);
	sbx_tlv_u64(&b, PT_RESUME_MS, m->s.resume_ms);
	sbx_tlv_u64(&b, PT_TTL_MS, m->s.limits.ttl_ms);
	int rc = priv_call(m, &b, NULL, 0, NULL, err);
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

void proxy_stop_direct(struct mon *m)
{
	if (m->proxy.fd >= 0 && m->ep >= 0)
		epoll_ctl(m->ep, EPOLL_CTL_DEL, m->proxy.fd, NULL);
	sbx_netns_stop_proxy(&m->proxy_pid, &m->proxy.fd);
	mon_proxy_busy_close(m);
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
	mon_proxy_busy_close(m);
	m->proxy_pid = 0;
	priv_call0(m, PRIV_PROXY_STOP, NULL);
}

/* The proxy is the session's only way out: without it the guest's
 * connections are refused in its namespace.  The session runs on, without
 * network, and says so (net.lost in the record and the audit trail). */
int proxy_reap_direct(struct mon *m)
{
	int status = 0;
	if (m->proxy_pid <= 0 || waitpid(m->proxy_pid, &status, WNOHANG) <= 0)
		return 0;
	if (m->ep >= 0)
		epoll_ctl(m->ep, EPOLL_CTL_DEL, m->proxy.fd, NULL);
	close(m->proxy.fd);
	m->proxy.fd = -1;
	m->proxy_pid = 0;
	mon_proxy_busy_close(m);
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
	priv_msg_begin(&b, PRIV_PROXY_REAP);
	int rc = priv_call(m, &b, NULL, 0, &a, NULL);
	sbx_buf_free(&b);
	priv_close_fds(&a);
	if (rc < 0 || !a.num[PT_FLAG])
		return;
	child_drop_fd(m, &m->proxy.fd);
	mon_proxy_busy_close(m);
	m->proxy_pid = 0;
	snprintf(m->s.net_lost, sizeof m->s.net_lost, "%s", a.str[PT_REASON] ? a.str[PT_REASON] : "proxy ended");
}

/* The VM is gone and the session ends without sbx-kill (TTL, crash,
 * power-off): record it, keep the record and output for the user, release
 * the host resources. */
void end_direct(struct mon *m, const char *state, const char *why)
{
	proxy_stop_direct(m); /* its last lines in net.log before the record says "ended" */
	snprintf(m->s.state, sizeof m->s.state, "%s", state);
	snprintf(m->s.end_reason, sizeof m->s.end_reason, "%s", why);
	m->s.ended_ns = sbx_now_ns();
	int expired = !strcmp(state, "expired");
	json_t *f =
		expired ? json_pack("{s:s, s:I}", "session", m->s.id, "ttl_s", (json_int_t)(m->s.limits.ttl_ms / 1000))
			: json_pack("{s:s, s:s}", "session", m->s.id, "reason", why);
	audit_direct(m,
		     expired                     ? "session.expire"
		     : !strcmp(state, "crashed") ? "session.crash"
						 : "session.stop",
		     f, NULL);
	json_decref(f);
	sbx_cgroup_usage(sbx_session_cgroup(&m->s), &m->s.cpu_ns, &m->s.mem_peak);
	sbx_record_save(&m->st, &m->s, NULL);
	sbx_cgroup_remove(sbx_session_cgroup(&m->s));
	/* The spare exec directory is the unprivileged half's, which drops
	 * it as it ends; an ended session keeps no spare whatever became of
	 * that half, or of its books (t0250 on CI once found one left). */
	_cleanup_close_ int xfd = openat(m->lib_dfd, "execs", O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
	if (xfd >= 0)
		exec_spare_remove(xfd);
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
	mon_proxy_busy_close(m);
	m->proxy_pid = 0;
	snprintf(m->s.state, sizeof m->s.state, "%s", state);
	snprintf(m->s.end_reason, sizeof m->s.end_reason, "%s", why);
	struct sbx_buf b = { 0 };
	priv_msg_begin(&b, PRIV_END);
	sbx_tlv_str(&b, PT_STATE, state);
	sbx_tlv_str(&b, PT_REASON, why);
	priv_call(m, &b, NULL, 0, NULL, NULL);
	sbx_buf_free(&b);
}

/* Everything of the session, under the global lock, so a create of the
 * same ID never sees half a session.  No deadlock although we hold the
 * session lock: whoever holds the global lock takes session locks without
 * waiting.  A claim that did not complete also leaves the member's old
 * runtime directory (a rename half done).  1 when something is left. */
int destroy_direct(struct mon *m, int member_too)
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
	mon_proxy_busy_close(m);
	m->proxy_pid = 0;
	struct sbx_buf b = { 0 };
	struct priv_msg a;
	priv_msg_begin(&b, PRIV_DESTROY);
	sbx_tlv_u64(&b, PT_FLAG, member_too ? 1 : 0);
	int rc = priv_call(m, &b, NULL, 0, &a, NULL);
	sbx_buf_free(&b);
	priv_close_fds(&a);
	return rc < 0 || a.num[PT_FLAG];
}

void mon_vm_kill(struct mon *m)
{
	if (!split_child(m))
		return sbx_vm_kill(&m->vm);
	priv_call0(m, PRIV_VM_KILL, NULL);
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
	priv_msg_begin(&b, PRIV_VM_REAP);
	int rc = priv_call(m, &b, NULL, 0, &a, NULL);
	sbx_buf_free(&b);
	priv_close_fds(&a);
	if (rc < 0 || !a.num[PT_FLAG])
		return 0;
	*status = (int)a.num[PT_STATUS];
	return 1;
}

int mon_vm_pause(struct mon *m, struct sbx_err *err)
{
	return split_child(m) ? priv_call0(m, PRIV_VM_PAUSE, err) : sbx_vm_pause(&m->vm, err);
}

int mon_vm_resume_within(struct mon *m, unsigned timeout_ms, struct sbx_err *err)
{
	if (!split_child(m))
		return sbx_vm_resume_within(&m->vm, timeout_ms, err);
	return priv_call_num(m, PRIV_VM_RESUME, PT_NUM_A, timeout_ms, err);
}

int mon_vm_resume(struct mon *m, struct sbx_err *err)
{
	return mon_vm_resume_within(m, 0, err);
}

void mon_cg_usage(struct mon *m, uint64_t *cpu, uint64_t *peak)
{
	if (!split_child(m)) {
		sbx_cgroup_usage(sbx_session_cgroup(&m->s), cpu, peak);
		return;
	}
	priv_call_nums(m, PRIV_CG_USAGE, cpu, peak);
}

/* The record's CPU cap (a claim's new policy, a restore's held-back one). */
unsigned mon_cpu_milli(const struct mon *m)
{
	return m->s.limits.cpu_milli ? m->s.limits.cpu_milli : m->s.vcpus * 1000;
}

unsigned mon_cpu_weight(const struct mon *m)
{
	return m->s.pool ? SBX_CG_POOL_WEIGHT : 0;
}

/* A claim's (PRIV_CG_SET_CPU): the session's cap, and the default weight
 * in place of the member's low one. */
int cg_set_cpu_direct(struct mon *m)
{
	return sbx_cgroup_set_cpu(sbx_session_cgroup(&m->s), mon_cpu_milli(m), SBX_CG_DEFAULT_WEIGHT);
}

int mon_cg_set_cpu(struct mon *m)
{
	if (!split_child(m))
		return cg_set_cpu_direct(m);
	struct sbx_err e = { 0 };
	int rc = priv_call0(m, PRIV_CG_SET_CPU, &e);
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
	priv_call_num(m, PRIV_WS_RELEASE, PT_FLAG, failed ? 1 : 0, NULL);
}

uint64_t priv_file_size(int dfd, const char *name)
{
	struct stat st;
	return fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW) == 0 ? (uint64_t)st.st_size : 0;
}

/* A session without a NIC never has a proxy (mon_boot starts one only
 * with a MAC), so it has no net.log or packages.log to read: no round
 * trip to the privileged half for them, twice an exec. */
static int mon_has_proxy_logs(const struct mon *m)
{
	return m->s.mac[0] != 0;
}

void mon_log_sizes(struct mon *m, uint64_t *net, uint64_t *pkg)
{
	*net = *pkg = 0;
	if (!mon_has_proxy_logs(m))
		return;
	if (!split_child(m)) {
		*net = priv_file_size(m->lib_dfd, "net.log");
		*pkg = priv_file_size(m->lib_dfd, "packages.log");
		return;
	}
	priv_call_nums(m, PRIV_LOG_SIZES, net, pkg);
}

json_t *mon_violations(struct mon *m, uint64_t net_off, uint64_t pkg_off)
{
	if (!mon_has_proxy_logs(m))
		return sbx_netlog_violations(-1, 0, 0); /* the zero counts */
	if (!split_child(m))
		return sbx_netlog_violations(m->lib_dfd, net_off, pkg_off);
	struct sbx_buf b = { 0 };
	struct priv_msg a;
	priv_msg_begin(&b, PRIV_VIOLATIONS);
	sbx_tlv_u64(&b, PT_NUM_A, net_off);
	sbx_tlv_u64(&b, PT_NUM_B, pkg_off);
	json_t *v = NULL;
	if (priv_call(m, &b, NULL, 0, &a, NULL) == 0 && a.str[PT_TEXT])
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
	priv_msg_begin(&b, PRIV_POLICY);
	char *txt = priv_call(m, &b, NULL, 0, &a, NULL) == 0 && a.str[PT_TEXT] ? strdup(a.str[PT_TEXT]) : NULL;
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
	priv_call_str(m, PRIV_PORTS_SAVE, PT_TEXT, txt, NULL);
}

/* A client of monitor.sock: sbx's own root or not (peer.h).  The parent
 * judges for the child, which has no /proc to read the peer's
 * capabilities and user namespace in. */
int mon_peer_check(struct mon *m, int fd, struct sbx_err *err)
{
	if (!split_child(m))
		return sbx_peer_check(fd, err);
	struct sbx_buf b = { 0 };
	priv_msg_begin(&b, PRIV_PEER);
	int rc = priv_call(m, &b, &fd, 1, NULL, err);
	sbx_buf_free(&b);
	return rc;
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
	priv_msg_begin(&b, PRIV_PORT_REG);
	sbx_tlv_str(&b, PT_PATH, path);
	int rc = priv_call(m, &b, &fd, 1, &a, NULL);
	sbx_buf_free(&b);
	if (rc == 0) {
		priv_close_fds(&a);
		*dev = a.num[PT_NUM_A];
		*ino = a.num[PT_NUM_B];
	}
	return rc;
}

/* Our socket file only: the one seen at open, not what took its name. */
void port_unlink_direct(const char *path, uint64_t dev, uint64_t ino)
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
	priv_call_str(m, PRIV_PORT_UNLINK, PT_PATH, path, NULL);
}

int mon_snap_dir(struct mon *m, const char *rel)
{
	if (!split_child(m))
		return snap_dir_ok(m, rel);
	return priv_call_str(m, PRIV_SNAP_DIR, PT_PATH, rel, NULL);
}

int mon_snap_write(struct mon *m, sbx_zprogress progress, const char *execs, struct sbx_err *err)
{
	if (!split_child(m))
		return snap_write(m, progress, m, m->snap.max_bytes, execs, err);
	m->priv.progress = progress;
	m->priv.progress_ctx = m;
	struct sbx_buf b = { 0 };
	priv_msg_begin(&b, PRIV_SNAP_SAVE);
	sbx_tlv_u64(&b, PT_NUM_A, m->snap.max_bytes);
	if (execs)
		sbx_tlv_str(&b, PT_TEXT, execs);
	int rc = b.len + 64 > PRIV_MSG_MAX ? sbx_err_set(err, SBX_EXIT_CONFLICT, 0,
							 "too many execs are running to save "
							 "their records: end some of them first")
					   : priv_call(m, &b, NULL, 0, NULL, err);
	sbx_buf_free(&b);
	m->priv.progress = NULL;
	return rc;
}

int mon_susp_image(struct mon *m, uint64_t *bytes, struct sbx_err *err)
{
	if (!split_child(m))
		return susp_write_image(m, bytes, err);
	struct sbx_buf b = { 0 };
	struct priv_msg a;
	priv_msg_begin(&b, PRIV_SUSP_IMAGE);
	int rc = priv_call(m, &b, NULL, 0, &a, err);
	sbx_buf_free(&b);
	if (rc == 0)
		*bytes = a.num[PT_NUM_A];
	return rc;
}

void susp_discard_direct(struct mon *m)
{
	sbx_rm_rf_at(m->lib_dfd, SBX_SUSPEND_TMP);
	sbx_rm_rf_at(m->lib_dfd, SBX_SUSPEND_DIR);
}

void mon_susp_discard(struct mon *m)
{
	if (!split_child(m))
		return susp_discard_direct(m);
	priv_call0(m, PRIV_SUSP_DISCARD, NULL);
}

int mon_susp_room(struct mon *m, struct sbx_err *err)
{
	return split_child(m) ? priv_call0(m, PRIV_SUSP_ROOM, err) : susp_take_room(m, err);
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
 * proxy's stderr, a copy of its pidfd, its pipe's read end)?  proxy.log
 * only when this half has none (a claim's first proxy; a resume's keeps
 * the file). */
static int proxy_fds_ok(const struct mon *m, const struct priv_msg *a, int n)
{
	return (n == 3 || n == 4) && (n == 4) == (m->proxylog.fd < 0) && a->num[PT_PROXY_PID] > 0 &&
	       a->num[PT_PROXY_PID] < (uint64_t)INT_MAX;
}

/* Those fds (checked) into the loop, and the proxy into our record. */
void priv_take_proxy(struct mon *m, const struct priv_msg *a, int from, int n)
{
	const int *f = a->fds + from;
	if (n == 4) {
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
	m->proxy.fd = *f++;
	mon_ep_mod(m, &m->proxy, EPOLLIN, EPOLL_CTL_ADD);
	mon_proxy_busy_close(m);
	m->proxybusy.fd = *f;
	mon_ep_mod(m, &m->proxybusy, EPOLLIN, EPOLL_CTL_ADD);
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
		priv_msg_begin(&b, PRIV_SUSP_VMM);
		rc = priv_call(m, &b, NULL, 0, &a, err);
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
				priv_take_proxy(m, &a, nv, np);
		} else {
			for (int i = 3; i < a.nfds; i++)
				close(a.fds[i]);
			if (rc == 0) {
				for (int i = 0; i < 3; i++)
					if (fds[i] >= 0)
						close(fds[i]);
				return sbx_err_set(err, SBX_EXIT_INTERNAL, 0,
						   "the resumed VMM's descriptors did not come");
			}
		}
	}
	vmm_install(m, fds);
	if (rc < 0) {
		vmmout_explain(m, err); /* what the VMM said before it went is in the pipe still */
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
	priv_msg_begin(&b, PRIV_CLAIM);
	sbx_tlv_str(&b, PT_ID, id);
	sbx_tlv_str(&b, PT_TEXT, rec);
	sbx_tlv_str(&b, PT_TEXT2, pol);
	int rc = priv_call(m, &b, NULL, 0, &a, &e);
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
	mon_title(m);
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
	priv_msg_begin(&b, PRIV_NET_ATTACH);
	int rc = priv_call(m, &b, NULL, 0, &a, err);
	sbx_buf_free(&b);
	if (rc == 0 && a.num[PT_NUM_A] == (uint64_t)a.nfds && proxy_fds_ok(m, &a, a.nfds)) {
		priv_take_proxy(m, &a, 0, a.nfds);
		return 1;
	}
	priv_close_fds(&a);
	return rc < 0 ? -1 : sbx_err_set(err, SBX_EXIT_INTERNAL, 0, "the proxy's descriptors did not come");
}
