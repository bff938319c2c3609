/* The warm pool, seen from the commands: sbx-create's claim and refill,
 * sbx-gc's upkeep.  The member's side of a claim is in monitor.c. */
#include "pool.h"
#include "trace.h"
#include "capacity.h"
#include "hostconf.h"
#include "monclient.h"
#include "policy.h"
#include "proto.h"
#include "secrets.h"
#include "session.h"
#include "template.h"
#include "util.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <spawn.h>
#include <stdarg.h>
#include <string.h>
#include <sys/file.h>

int sbx_pool_member_id(const char *id)
{
	return !strncmp(id, SBX_POOL_PREFIX, sizeof SBX_POOL_PREFIX - 1);
}

void sbx_pool_id_new(char *buf, size_t n)
{
	unsigned char r[6];
	arc4random_buf(r, sizeof r);
	snprintf(buf, n, SBX_POOL_PREFIX "%02x%02x%02x%02x%02x%02x", r[0], r[1], r[2], r[3], r[4], r[5]);
}

int sbx_pool_request_fits(const struct sbx_create_opts *o, const struct sbx_policy *p)
{
	return o->nvols == 0 && !o->workspace && p->network.egress == SBX_EGRESS_NONE &&
	       p->packages.mode == SBX_PKG_OFFLINE;
}

int sbx_pool_member_fits(const struct sbx_session *m, const struct sbx_session *s)
{
	return m->pool && !strcmp(m->tmpl_name, s->tmpl_name) && !strcmp(m->tmpl_version, s->tmpl_version) &&
	       m->vcpus == s->vcpus && m->memory_mib == s->memory_mib && m->limits.disk_bytes == s->limits.disk_bytes &&
	       !m->nvols && !s->nvols && !m->workspace[0] && !s->workspace[0] && !strcmp(m->accel, s->accel) &&
	       !strcmp(m->vmm, s->vmm) && !strcmp(m->boot_id, s->boot_id) && !strcmp(m->snapshot, s->snapshot) &&
	       /* the guest names this policy when it refuses installs (pkgcache.h) */
	       !strcmp(m->limits.packages.policy, s->limits.packages.policy);
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

enum { NOT_CLAIMED = 0, CLAIMED = 1, TRY_ANOTHER = 2 };

/* A claim that failed after its commit: the session under s->id is
 * destroyed (by its monitor, or here as sbx-kill would), then the global
 * lock is taken again for the cold boot, with the ID free once more. */
static int undo(struct sbx_state *st, int *g, const char *id, struct sbx_err *err)
{
	int gone;
	if (*g >= 0) {
		close(*g);
		*g = -1;
	}
	sbx_session_destroy(st, id, &gone, NULL);
	if ((*g = sbx_lock_global(st, err)) < 0)
		return -1;
	if (faccessat(st->sessions_fd, id, F_OK, AT_SYMLINK_NOFOLLOW) == 0 ||
	    faccessat(st->rsessions_fd, id, F_OK, AT_SYMLINK_NOFOLLOW) == 0)
		return sbx_err_set(err, SBX_EXIT_TEMPFAIL, 0, "session %s is being created or destroyed", id);
	return NOT_CLAIMED;
}

static int claim_one(struct sbx_state *st, int *g, const char *member, struct sbx_session *s, const char *pol,
		     const struct sbx_secrets *sec, struct sbx_err *err)
{
	struct sbx_err e = { 0 };
	struct sbx_trace tr;
	sbx_trace_begin(&tr, "claim.client");
	_cleanup_mon_ struct sbx_mon m = { .fd = -1 };
	if (sbx_mon_open(st, member, &m, &e) < 0)
		return TRY_ANOTHER;
	uint8_t buf[2048];
	struct sbx_frame f;
	if (sbx_mon_next(&m, 5000, &f, buf, sizeof buf, &e) < 0 || f.type != SBX_F_HELLO)
		return TRY_ANOTHER;
	sbx_trace_step(&tr, "connect_hello");
	_cleanup_free_ char *rec = sbx_record_text(s);
	size_t off = sbx_frame_begin(&m.out, SBX_F_CLAIM, 0);
	sbx_tlv_str(&m.out, SBX_T_SESSION, s->id);
	sbx_tlv_str(&m.out, SBX_T_RECORD, rec ? rec : "");
	sbx_tlv_u32(&m.out, SBX_T_CLAIM_FLAGS, sec->n ? SBX_CLAIM_SECRETS : 0);
	sbx_tlv_str(&m.out, SBX_T_POLICY, pol);
	sbx_frame_end(&m.out, off);
	if (!rec || sbx_mon_send(&m, -1) < 0)
		return TRY_ANOTHER; /* a frame cut short is never acted on */
	/* The commit: fast (two small files, the cgroups, four renames), but
	 * allow for a loaded host.  With secrets, the monitor asks
	 * for them first (CLAIM with CLAIM_FLAGS): nothing is committed until
	 * it holds everything, so the commit needs nothing more from us. */
	int r = sbx_mon_next(&m, 10000, &f, buf, sizeof buf, &e);
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
			return undo(st, g, s->id, err);
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
		return undo(st, g, s->id, err);
	}
	char id[SBX_ID_MAX + 1];
	snprintf(id, sizeof id, "%s", s->id);
	r = sbx_record_load(st, id, s, err);
	sbx_trace_step(&tr, "record_load");
	sbx_trace_end(&tr, r == 0);
	return r < 0 ? -1 : CLAIMED;
}

int sbx_pool_claim(struct sbx_state *st, int *g, struct sbx_session *s, const struct sbx_policy *p,
		   const struct sbx_secrets *sec, int *used, struct sbx_err *err)
{
	struct cand c[4];
	*used = 0;
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
			*used = 1;
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
	 * /dev/null, default signals), but spawned, not forked twice: a fork
	 * of this process is what a claim would wait for.  It is our child
	 * only until we exit, in a moment. */
	posix_spawn_file_actions_t fa;
	posix_spawnattr_t at;
	sigset_t none, all;
	sigemptyset(&none);
	sigfillset(&all);
	posix_spawn_file_actions_init(&fa);
	for (int fd = 0; fd < 3; fd++)
		posix_spawn_file_actions_addopen(&fa, fd, "/dev/null", O_RDWR, 0);
	posix_spawnattr_init(&at);
	posix_spawnattr_setsigmask(&at, &none);
	posix_spawnattr_setsigdefault(&at, &all);
	posix_spawnattr_setflags(&at, POSIX_SPAWN_SETSID | POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
	char *argv[] = { "sbx-gc", "--pool-only", NULL };
	pid_t pid;
	posix_spawn(&pid, path, &fa, &at, argv, env);
	posix_spawnattr_destroy(&at);
	posix_spawn_file_actions_destroy(&fa);
}

/* ---- sbx-gc's upkeep ------------------------------------------------ */

struct member {
	struct sbx_session s;
	int conf; /* index into the configuration; -1: none fits */
};

static int member_by_age(const void *a, const void *b)
{
	const struct member *x = a, *y = b;
	return x->s.created_ns < y->s.created_ns ? -1 : x->s.created_ns > y->s.created_ns;
}

/* A member whose monitor is gone, or whose VM ended: nothing of it is
 * anyone's, so it goes at once (no grace), under the global lock and its
 * own, as sbx-gc handles any session.  0: it was alive. */
static int reap_dead(struct sbx_state *st, const char *id, int dry_run, sbx_gc_cb cb, void *ctx)
{
	_cleanup_close_ int g = sbx_lock_global(st, NULL);
	if (g < 0)
		return 0;
	int lock = sbx_lock_session(st, id, 1, 0, NULL);
	if (lock == -2)
		return 0;
	struct sbx_session s;
	struct sbx_err e = { 0 };
	int rc = 0;
	if (sbx_record_load(st, id, &s, &e) == 0 && s.pool) {
		sbx_gc_report(cb, ctx, "reclaim", id, "pool member %s%s%s", !strcmp(s.state, "pooled") || !strcmp(s.state, "creating")
			      ? "without a monitor" : s.state, s.end_reason[0] ? ": " : "", s.end_reason);
		if (!dry_run)
			sbx_session_reclaim(st, id);
		rc = 1;
	}
	if (lock >= 0)
		close(lock);
	return rc;
}

/* Boot one member of pool entry pc (template t resolved). */
static int add_member(struct sbx_state *st, const struct sbx_pool_conf *pc, char *id, size_t idn,
		      struct sbx_err *err)
{
	_cleanup_free_ struct sbx_policy *p = malloc(sizeof *p);
	if (!p)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, ENOMEM, "cannot boot a pool member");
	sbx_policy_defaults(p);
	p->resources.vcpus = pc->vcpus;
	p->resources.memory = (uint64_t)pc->memory_mib << 20;
	p->resources.disk = pc->disk;
	struct sbx_create_opts o = { .tmpl = pc->tmpl, .vcpus = pc->vcpus, .memory_mib = pc->memory_mib,
				     .policy = p, .pool = 1 };
	struct sbx_session s;
	int existed;
	if (sbx_session_create(st, &o, &s, &existed, err) < 0)
		return -1;
	snprintf(id, idn, "%s", s.id);
	return 0;
}

static int conf_fits(const struct sbx_session *m, const struct sbx_template *t, const struct sbx_pool_conf *pc)
{
	return !strcmp(m->tmpl_name, t->name) && !strcmp(m->tmpl_version, t->version) && m->vcpus == pc->vcpus &&
	       m->memory_mib == pc->memory_mib && m->limits.disk_bytes == pc->disk;
}

int sbx_pool_maintain(struct sbx_state *st, int dry_run, sbx_gc_cb cb, void *ctx, struct sbx_err *err)
{
	/* One keeper at a time: a refill started by a claim waits for the
	 * one running, then finds the pool as that one left it. */
	_cleanup_close_ int pl = openat(st->run_fd, "pool.lock", O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (pl < 0 || flock(pl, LOCK_EX) < 0)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot take the pool lock");
	char **ids;
	size_t n;
	if (sbx_session_list(st, &ids, &n, err) < 0)
		return -1;
	_cleanup_free_ struct member *mem = calloc(n ? n : 1, sizeof *mem);
	size_t nm = 0;
	for (size_t i = 0; i < n; i++) {
		if (mem && sbx_pool_member_id(ids[i]) && !reap_dead(st, ids[i], dry_run, cb, ctx) &&
		    sbx_record_load(st, ids[i], &mem[nm].s, NULL) == 0 && mem[nm].s.pool) {
			const char *live = sbx_session_live_state(st, &mem[nm].s);
			if (!strcmp(live, "pooled") || !strcmp(live, "creating"))
				nm++;
		}
		free(ids[i]);
	}
	free(ids);
	if (!mem)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, ENOMEM, "cannot list the pool");
	/* Dead members are gone whatever the configuration says; the rest
	 * needs it. */
	static struct sbx_hostconf hc;
	if (sbx_hostconf_load(&hc, err) < 0)
		return -1;
	struct sbx_template t[SBX_POOL_TEMPLATES_MAX];
	int resolved[SBX_POOL_TEMPLATES_MAX] = { 0 };
	unsigned have[SBX_POOL_TEMPLATES_MAX] = { 0 };
	for (unsigned i = 0; i < hc.npool; i++) {
		struct sbx_err e = { 0 };
		resolved[i] = sbx_template_find(st, hc.pool[i].tmpl, &t[i], &e) == 0;
		if (!resolved[i] && hc.pool[i].size)
			sbx_gc_report(cb, ctx, "pool-error", hc.pool[i].tmpl, "%s", e.msg);
	}
	/* Keep the oldest members that fit the configuration, up to its size;
	 * the rest go (a template upgraded, a size lowered, a shape changed). */
	qsort(mem, nm, sizeof *mem, member_by_age);
	for (size_t k = 0; k < nm; k++) {
		struct sbx_session *m = &mem[k].s;
		mem[k].conf = -1;
		for (unsigned i = 0; i < hc.npool && mem[k].conf < 0; i++)
			if (resolved[i] && conf_fits(m, &t[i], &hc.pool[i]))
				mem[k].conf = (int)i;
		char why[200];
		if (mem[k].conf >= 0 && have[mem[k].conf] < hc.pool[mem[k].conf].size) {
			have[mem[k].conf]++;
			continue;
		}
		if (mem[k].conf >= 0)
			snprintf(why, sizeof why, "the pool of %s holds %u", hc.pool[mem[k].conf].tmpl,
				 hc.pool[mem[k].conf].size);
		else
			snprintf(why, sizeof why, "no pool is configured for %s@%s with %u vCPU, %u MiB, %llu MiB of disk",
				 m->tmpl_name, m->tmpl_version, m->vcpus, m->memory_mib,
				 (unsigned long long)(m->limits.disk_bytes >> 20));
		sbx_gc_report(cb, ctx, "pool-trim", m->id, "%s", why);
		int gone;
		if (!dry_run)
			sbx_session_destroy(st, m->id, &gone, NULL);
	}
	for (unsigned i = 0; i < hc.npool; i++) {
		for (; resolved[i] && have[i] < hc.pool[i].size; have[i]++) {
			char id[SBX_ID_MAX + 1] = "-";
			struct sbx_err e = { 0 };
			if (!dry_run && add_member(st, &hc.pool[i], id, sizeof id, &e) < 0) {
				sbx_gc_report(cb, ctx, "pool-error", hc.pool[i].tmpl, "cannot boot a member: %s", e.msg);
				if (e.code == SBX_EXIT_TEMPFAIL)
					return 0; /* the host is full: the next run tries again */
				break;
			}
			sbx_gc_report(cb, ctx, "pool-add", id, "%s@%s, %u vCPU, %u MiB", t[i].name, t[i].version, hc.pool[i].vcpus,
			       hc.pool[i].memory_mib);
		}
	}
	return 0;
}
