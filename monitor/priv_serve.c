/* sbx-monitor: the parent's side of the split: one request from the
 * unprivileged half, every field checked, then the step (priv_steps.c). */
#include "mon.h"
#include "priv.h"
#include "priv_int.h"

#include <limits.h>
#include <poll.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>

/* --- the parent's side: one request, checked -------------------------------- */

/* What the child may write to the audit trail: the loop's own records,
 * always of this session and tenant (stamped here over whatever it said).
 * The rest (session.crash, .stop, .expire, net.lost, workspace.*) only
 * the parent writes. */
static const char *const audit_types[] = {
	"exec.start",      "exec.end",       "session.responsive", "session.unresponsive",
	"session.pause",   "session.resume", "session.suspend",    "session.create",
	"session.destroy", "port.open",      "port.close",
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
	/* A TTL the child may move (sbx-serve's set-timeout), within what a
	 * VMCTL TTL allows from the session's creation on: the child already
	 * holds the timer, so this grants it nothing new. */
	else if (priv_has(q, PT_TTL_MS) && q->num[PT_TTL_MS] != r->limits.ttl_ms &&
		 (!q->num[PT_TTL_MS] || q->num[PT_TTL_MS] > (now - r->created_ns) / 1000000u + SBX_TTL_LEFT_MAX_MS))
		rc = sbx_err_set(err, SBX_EXIT_INVALID, 0, "a TTL out of range");
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
		if (priv_has(q, PT_TTL_MS))
			r->limits.ttl_ms = q->num[PT_TTL_MS];
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
	json_array_foreach (rc == 0 ? in : NULL, i, e) {
		json_t *p = json_object_get(e, "guest_port"), *a = json_object_get(e, "address"),
		       *u = json_object_get(e, "uid");
		if (!json_is_object(e) || json_object_size(e) != 3 || !json_is_integer(p) ||
		    json_integer_value(p) < 1 || json_integer_value(p) > 65535 || !json_is_string(a) ||
		    strlen(json_string_value(a)) >= SBX_PORT_ADDR_MAX || !printable(json_string_value(a)) ||
		    !json_is_integer(u) || json_integer_value(u) < -1 ||
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
	if (q->nfds != 1 || !path || getsockname(q->fds[0], (struct sockaddr *)&su, &sl) < 0 ||
	    su.sun_family != AF_UNIX || sl <= offsetof(struct sockaddr_un, sun_path) ||
	    strncmp(su.sun_path, path, sizeof su.sun_path) || path[0] != '/')
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
	priv_msg_begin(&b, PRIV_PROGRESS);
	sbx_tlv_str(&b, PT_WHAT, what);
	sbx_tlv_u64(&b, PT_NUM_A, done);
	sbx_tlv_u64(&b, PT_NUM_B, total);
	priv_chan_send(m->priv.fd, &b, NULL, 0);
	sbx_buf_free(&b);
}

/* The proxy the parent just started (spawn_proxy), for the child's loop
 * (take_proxy): proxy.log's file when the child has none yet, the read
 * end of the proxy's stderr, a copy of its pidfd (the parent keeps its
 * own, to stop and reap it), the read end of its pipe for the idle policy
 * (netns.h).  The parent keeps nothing of the log or the pipe. */
void priv_give_proxy(struct mon *m, struct sbx_buf *r, int *fds, int *nfds)
{
	int n = 3;
	if (m->proxylog.fd >= 0) {
		fds[(*nfds)++] = m->proxylog.fd;
		n++;
	}
	fds[(*nfds)++] = m->proxylog.src.fd;
	fds[(*nfds)++] = m->proxy.fd;
	fds[(*nfds)++] = m->proxybusy.fd;
	m->proxylog.fd = m->proxylog.src.fd = m->proxybusy.fd = -1; /* closed once sent (mon_priv_serve) */
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
		priv_give_proxy(m, r, fds, nfds);
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
	priv_give_proxy(m, r, fds, nfds);
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

/* An audit record the child asks for: only of a type the monitor writes,
 * and always of this session (never another's, nor another tenant's). */
static int h_audit(struct mon *m, const struct priv_msg *q, struct sbx_err *err)
{
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

static int h_end(struct mon *m, const struct priv_msg *q, struct sbx_err *err)
{
	const char *st = q->str[PT_STATE], *why = q->str[PT_REASON];
	if (m->priv.ended || !st || !why || !printable(why) || strlen(why) >= sizeof m->s.end_reason ||
	    !sbx_state_ended(st))
		return sbx_err_set(err, SBX_EXIT_INVALID, 0, "not an end of a session");
	end_direct(m, st, why);
	return 0;
}

static void h_vm_reap(struct mon *m, struct sbx_buf *r)
{
	int status = 0;
	int n = m->vm.pid > 0 && waitpid(m->vm.pid, &status, WNOHANG) > 0;
	if (n)
		m->vm.pid = 0;
	sbx_tlv_u64(r, PT_FLAG, (uint64_t)n);
	sbx_tlv_u64(r, PT_STATUS, (uint64_t)(unsigned)status);
}

static void h_violations(struct mon *m, const struct priv_msg *q, struct sbx_buf *r)
{
	json_t *v = sbx_netlog_violations(m->lib_dfd, q->num[PT_NUM_A], q->num[PT_NUM_B]);
	char *txt = v ? json_dumps(v, JSON_COMPACT) : NULL;
	json_decref(v);
	if (txt && strlen(txt) < PRIV_MSG_MAX / 2)
		sbx_tlv_str(r, PT_TEXT, txt);
	free(txt);
}

static void h_policy(struct mon *m, struct sbx_buf *r)
{
	char *txt = sbx_read_small_at(m->lib_dfd, "policy.json", PRIV_MSG_MAX / 2, NULL);
	if (txt)
		sbx_tlv_str(r, PT_TEXT, txt);
	free(txt);
}

static int h_susp_image(struct mon *m, struct sbx_buf *r, struct sbx_err *err)
{
	uint64_t bytes = 0;
	if (susp_write_image(m, &bytes, err) < 0)
		return -1;
	sbx_tlv_u64(r, PT_NUM_A, bytes);
	return 0;
}

/* One request: the answer into r (after its CODE), fds to pass into fds. */
int priv_handle(struct mon *m, const struct priv_msg *q, struct sbx_buf *r, int *fds, int *nfds, struct sbx_err *err)
{
	int n;
	*nfds = 0;
	switch (q->op) {
	case PRIV_AUDIT: return h_audit(m, q, err);
	case PRIV_RECORD: return h_record(m, q, err);
	case PRIV_END: return h_end(m, q, err);
	case PRIV_DESTROY: sbx_tlv_u64(r, PT_FLAG, (uint64_t)destroy_direct(m, q->num[PT_FLAG] != 0)); return 0;
	case PRIV_VM_KILL: sbx_vm_kill(&m->vm); return 0;
	case PRIV_VM_REAP: h_vm_reap(m, r); return 0;
	case PRIV_VM_PAUSE: return sbx_vm_pause(&m->vm, err);
	case PRIV_VM_RESUME: /* PT_NUM_A: a bound in ms, 0 or none: the backend's */
		return sbx_vm_resume_within(&m->vm, q->num[PT_NUM_A] > 60000 ? 60000 : (unsigned)q->num[PT_NUM_A], err);
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
		return cg_set_cpu_direct(m) < 0 ? sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot set the CPU cap")
						: 0;
	case PRIV_WS_RELEASE: mon_workspace_release(m, q->num[PT_FLAG] != 0); return 0;
	case PRIV_LOG_SIZES:
		sbx_tlv_u64(r, PT_NUM_A, priv_file_size(m->lib_dfd, "net.log"));
		sbx_tlv_u64(r, PT_NUM_B, priv_file_size(m->lib_dfd, "packages.log"));
		return 0;
	case PRIV_VIOLATIONS: h_violations(m, q, r); return 0;
	case PRIV_POLICY: h_policy(m, r); return 0;
	case PRIV_PORTS_SAVE: return h_ports(m, q, err);
	case PRIV_PORT_REG: return h_port_reg(m, q, r, err);
	case PRIV_PORT_UNLINK: h_port_unlink(m, q->str[PT_PATH]); return 0;
	case PRIV_SNAP_DIR:
		if (!q->str[PT_PATH] || snap_dir_ok(m, q->str[PT_PATH]) < 0)
			return sbx_err_set(err, SBX_EXIT_INVALID, 0,
					   "not a snapshot directory of this session's tenant");
		m->priv.snap_dir_set = 1;
		return 0;
	case PRIV_SNAP_SAVE:
		if (!m->priv.snap_dir_set)
			return sbx_err_set(err, SBX_EXIT_INVALID, 0, "no snapshot directory");
		m->priv.snap_dir_set = 0;
		return snap_write(m, relay_progress, m, q->num[PT_NUM_A], q->str[PT_TEXT], err);
	case PRIV_SUSP_IMAGE: return h_susp_image(m, r, err);
	case PRIV_SUSP_DISCARD: susp_discard_direct(m); return 0;
	case PRIV_SUSP_ROOM: return susp_take_room(m, err);
	case PRIV_SUSP_VMM: return h_susp_vmm(m, r, fds, nfds, err);
	case PRIV_CLAIM: return h_claim(m, q, r, err);
	case PRIV_NET_ATTACH: return h_net_attach(m, r, fds, nfds, err);
	case PRIV_PEER:
		if (q->nfds != 1)
			return sbx_err_set(err, SBX_EXIT_INVALID, 0, "no client to look at");
		return sbx_peer_check(q->fds[0], err);
	default: return sbx_err_set(err, SBX_EXIT_INVALID, 0, "not a request");
	}
}
