/* The warm pool, seen from the commands: sbx-create's claim and refill.
 * The member's side of a claim is in monitor/claim.c, the pool's upkeep
 * in gc.c (sbx_gc_pool). */
#include "pool.h"
#include "trace.h"
#include "capacity.h"
#include "monclient.h"
#include "policy.h"
#include "proto.h"
#include "secrets.h"
#include "session.h"
#include "util.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <string.h>
#include <sys/file.h>

int sbx_pool_member_id(const char *id)
{
	return !strncmp(id, SBX_POOL_PREFIX, sizeof SBX_POOL_PREFIX - 1);
}

/* pool- and 9 hex digits: as long as a session ID (s- and 12), so the
 * member's hostname, which a claim renames to the session's ID, fills its
 * /etc/hosts to the byte and the guest overwrites it in place; a name of
 * another length means a new file and a rename on the overlay, under TCG
 * ~20 ms more of the guest's time in each claim.  36 random bits among a
 * pool's few members; a taken one is drawn again (sbx_session_create). */
void sbx_pool_id_new(char *buf, size_t n)
{
	unsigned char r[5];
	arc4random_buf(r, sizeof r);
	snprintf(buf, n, SBX_POOL_PREFIX "%02x%02x%02x%02x%x", r[0], r[1], r[2], r[3], r[4] & 0xf);
}

int sbx_pool_request_fits(const struct sbx_create_opts *o, const struct sbx_policy *p)
{
	return o->nvols == 0 && !o->workspace;
}

int sbx_pool_member_fits(const struct sbx_session *m, const struct sbx_session *s)
{
	return m->pool && !strcmp(m->tmpl_name, s->tmpl_name) && !strcmp(m->tmpl_version, s->tmpl_version) &&
	       m->vcpus == s->vcpus && m->memory_mib == s->memory_mib && m->limits.disk_bytes == s->limits.disk_bytes &&
	       /* the disk throttle is on the VMM's command line */
	       m->limits.disk_bps == s->limits.disk_bps && m->limits.disk_iops == s->limits.disk_iops && !m->nvols &&
	       !s->nvols && !m->workspace[0] && !s->workspace[0] && !strcmp(m->accel, s->accel) &&
	       !strcmp(m->vmm, s->vmm) && !strcmp(m->boot_id, s->boot_id) && !strcmp(m->snapshot, s->snapshot) &&
	       /* a NIC exactly when the session needs one (egress, package
		* registries); its package policy travels in the claim */
	       !m->mac[0] == !s->mac[0];
}

/* ---- sbx-create's side of a claim ---------------------------------- */

struct cand {
	char id[SBX_ID_MAX + 1];
	uint64_t created_ns;
};

static int by_age(const void *a, const void *b)
{
	const struct cand *x = a, *y = b;
	return x->created_ns < y->created_ns ? -1 : x->created_ns > y->created_ns;
}

/* Live members that fit s, oldest first (they have waited longest). */
static size_t find_members(struct sbx_state *st, const struct sbx_session *s, struct cand *out, size_t max)
{
	char **ids;
	size_t n, k = 0;
	if (sbx_session_list(st, &ids, &n, NULL) < 0)
		return 0;
	for (size_t i = 0; i < n; i++) {
		struct sbx_session m;
		if (k < max && sbx_pool_member_id(ids[i]) && sbx_record_load(st, ids[i], &m, NULL) == 0 &&
		    !strcmp(m.state, "pooled") && sbx_pool_member_fits(&m, s) && sbx_session_locked(st, ids[i])) {
			snprintf(out[k].id, sizeof out[k].id, "%s", ids[i]);
			out[k++].created_ns = m.created_ns;
		}
		free(ids[i]);
	}
	free(ids);
	if (k > 1)
		qsort(out, k, sizeof *out, by_age);
	return k;
}

enum { NOT_CLAIMED = 0, CLAIMED = 1, TRY_ANOTHER = 3 };

/* A claim that failed after its commit: the session under s->id must go
 * before the create boots cold; that is the create's to do (create.c),
 * with the global lock released here. */
static int undo(int *g)
{
	if (*g >= 0) {
		close(*g);
		*g = -1;
	}
	return SBX_POOL_UNDO;
}

static int claim_one(struct sbx_state *st, int *g, const char *member, struct sbx_session *s, const char *pol,
		     const struct sbx_secrets *sec, struct sbx_err *err)
{
	struct sbx_err e = { 0 };
	struct sbx_trace tr;
	sbx_trace_begin(&tr, "claim.client");
	_cleanup_mon_ struct sbx_mon m = { .fd = -1 };
	_cleanup_free_ char *rec = sbx_record_text(s);
	if (!rec || sbx_mon_open(st, member, &m, &e) < 0)
		return TRY_ANOTHER;
	/* The CLAIM goes out with the connect, not after the member's HELLO:
	 * an idle monitor's wake-up for the HELLO cost a round trip, a
	 * millisecond on a busy host.  The monitor reads it after its
	 * HELLO, as if we had waited. */
	size_t off = sbx_frame_begin(&m.out, SBX_F_CLAIM, 0);
	sbx_tlv_str(&m.out, SBX_T_SESSION, s->id);
	sbx_tlv_str(&m.out, SBX_T_RECORD, rec);
	sbx_tlv_u32(&m.out, SBX_T_CLAIM_FLAGS, sec->n ? SBX_CLAIM_SECRETS : 0);
	sbx_tlv_str(&m.out, SBX_T_POLICY, pol);
	sbx_frame_end(&m.out, off);
	if (sbx_mon_send(&m, -1) < 0)
		return TRY_ANOTHER; /* a frame cut short is never acted on */
	uint8_t buf[2048];
	struct sbx_frame f;
	/* The commit: fast (two small files, the cgroups, four renames), but
	 * allow for a loaded host.  With secrets, the monitor asks
	 * for them first (CLAIM with CLAIM_FLAGS): nothing is committed until
	 * it holds everything, so the commit needs nothing more from us.  No
	 * HELLO (a monitor that is not one), or none in time, is handled as
	 * a refusal: the CLAIM was sent, so whether it was acted on is told
	 * by the ID, below. */
	int r = sbx_mon_next(&m, 10000, &f, buf, sizeof buf, &e);
	if (r == 0 && f.type != SBX_F_HELLO)
		r = -1;
	sbx_trace_step(&tr, "connect_hello");
	if (r == 0)
		r = sbx_mon_next(&m, 10000, &f, buf, sizeof buf, &e);
	if (r == 0 && f.type == SBX_F_CLAIM && f.len && sec->n) {
		if (sbx_mon_write(&m, sec->frame, sec->frame_len) < 0)
			return TRY_ANOTHER;
		r = sbx_mon_next(&m, 10000, &f, buf, sizeof buf, &e);
	}
	sbx_trace_step(&tr, "commit");
	if (r < 0 || f.type != SBX_F_CLAIM || f.len) {
		sbx_trace_end(&tr, 0);
		/* Refused (or no answer).  We hold the global lock, so if the ID
		 * exists now, it is the member's doing: undo it. */
		if (faccessat(st->sessions_fd, s->id, F_OK, AT_SYMLINK_NOFOLLOW) == 0 ||
		    faccessat(st->rsessions_fd, s->id, F_OK, AT_SYMLINK_NOFOLLOW) == 0)
			return undo(g);
		return TRY_ANOTHER;
	}
	/* Committed: the session exists under its ID, and is finished
	 * whether or not we stay.  The rest does not need the global lock, and
	 * the monitor's failure path takes it. */
	close(*g);
	*g = -1;
	r = sbx_mon_next(&m, SBX_CLAIM_TIMEOUT_MS + 10000, &f, buf, sizeof buf, &e);
	if (r == 0 && f.type == SBX_F_ERROR) {
		uint32_t code = 0;
		char msg[300] = "the claim failed";
		sbx_error_decode(f.payload, f.len, &code, msg, sizeof msg);
		/* Destroyed by sbx-kill meanwhile: as during a boot, that is the
		 * answer (5), not a reason to boot it again. */
		if (code == SBX_EXIT_CONFLICT)
			return sbx_err_set(err, SBX_EXIT_CONFLICT, 0, "%s", msg);
	}
	sbx_trace_step(&tr, "claimed");
	if (r < 0 || f.type != SBX_F_CLAIMED) {
		sbx_trace_end(&tr, 0);
		return undo(g);
	}
	char id[SBX_ID_MAX + 1];
	snprintf(id, sizeof id, "%s", s->id);
	r = sbx_record_load(st, id, s, err);
	sbx_trace_step(&tr, "record_load");
	sbx_trace_end(&tr, r == 0);
	return r < 0 ? -1 : CLAIMED;
}

int sbx_pool_claim(struct sbx_state *st, int *g, struct sbx_session *s, const struct sbx_policy *p,
		   const struct sbx_secrets *sec, struct sbx_err *err)
{
	struct cand c[4];
	size_t n = find_members(st, s, c, SBX_ARRAY_LEN(c));
	if (!n)
		return NOT_CLAIMED;
	/* The member's VM is counted already: only the tenant's cap applies. */
	if (sbx_capacity_admit_claim(st, s->tenant, s->vcpus, s->memory_mib, err) < 0)
		return -1;
	/* What the session is created under, beside its record (as a boot
	 * writes it): the member has the pool's. */
	json_t *pj = sbx_policy_json(p);
	_cleanup_free_ char *pol = pj ? json_dumps(pj, JSON_INDENT(2)) : NULL;
	json_decref(pj);
	if (!pol)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, ENOMEM, "cannot encode the policy");
	for (size_t i = 0; i < n; i++) {
		int r = claim_one(st, g, c[i].id, s, pol, sec, err);
		if (r != TRY_ANOTHER) {
			/* After the claim, not beside it: the refill's boot writes
			 * (records, the trail, each synced) slowed the claim's own
			 * syncs 2-3x when it started at the commit. */
			sbx_pool_refill(p);
			return r;
		}
	}
	return NOT_CLAIMED;
}

void sbx_pool_refill(const struct sbx_policy *p)
{
	char self[PATH_MAX], path[PATH_MAX + 16];
	ssize_t r = readlink("/proc/self/exe", self, sizeof self - 1);
	if (r <= 0)
		return;
	self[r] = 0;
	char *slash = strrchr(self, '/');
	if (!slash)
		return;
	*slash = 0;
	snprintf(path, sizeof path, "%s/sbx-gc", self);
	if (access(path, X_OK) < 0)
		return;
	/* The members it boots are for anyone: none of this create's secrets
	 * may follow into their monitors' environment. */
	size_t n = 0, k = 0;
	while (environ[n])
		n++;
	_cleanup_free_ char **env = calloc(n + 1, sizeof *env);
	if (!env)
		return;
	for (size_t i = 0; i < n; i++) {
		int secret = 0;
		for (unsigned j = 0; j < p->nsecrets && !secret; j++) {
			size_t l = strlen(p->secrets[j].from_env);
			secret = l && !strncmp(environ[i], p->secrets[j].from_env, l) && environ[i][l] == '=';
		}
		if (!secret)
			env[k++] = environ[i];
	}
	/* Detached like a monitor (its own session, no terminal, stdio on
	 * /dev/null, default signals, none blocked).  A fork, not posix_spawn:
	 * posix_spawn waits for the child's exec (it is a vfork), and that
	 * wait, a few milliseconds under load, was the claim's.  The child
	 * calls only async-signal-safe functions; it is our child only until
	 * we exit, in a moment. */
	_cleanup_close_ int null = open("/dev/null", O_RDWR | O_CLOEXEC);
	if (null < 0)
		return;
	char *argv[] = { "sbx-gc", "--pool-only", NULL };
	pid_t pid = fork();
	if (pid != 0)
		return;                /* our side, or no child (-1): the next claim's refill makes up */
	for (int fd = 0; fd < 3; fd++) /* /dev/null may be one of them already (stdio closed) */
		if (fd == null ? fcntl(fd, F_SETFD, 0) < 0 : dup2(null, fd) < 0)
			_exit(127);
	struct sigaction dfl = { .sa_handler = SIG_DFL };
	for (int sig = 1; sig < NSIG; sig++)
		sigaction(sig, &dfl, NULL); /* SIGKILL, SIGSTOP and the reserved ones fail: nothing to reset */
	sigset_t none;
	sigemptyset(&none);
	sigprocmask(SIG_SETMASK, &none, NULL);
	setsid();
	execve(path, argv, env);
	_exit(127);
}
