#include "gc.h"
#include "audit.h"
#include "hostconf.h"
#include "cgroup.h"
#include "policy.h"
#include "pool.h"
#include "session.h"
#include "snapshot.h"
#include "template.h"
#include "tmplbuild.h"
#include "util.h"
#include "workspace.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <fcntl.h>
#include <signal.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <dirent.h>

void sbx_gc_report(sbx_gc_cb cb, void *ctx, const char *action, const char *id, const char *fmt, ...)
{
	struct sbx_gc_action a = { .action = action, .session = id };
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(a.detail, sizeof a.detail, fmt, ap);
	va_end(ap);
	if (cb)
		cb(&a, ctx);
}

/* Whether an action removed something (for the count). */
int sbx_gc_action_reclaims(const char *action)
{
	return !strncmp(action, "reclaim", 7);
}

/* One session: called with the global lock and the session's lock held. */
static void gc_session(struct sbx_state *st, const char *id, const struct sbx_gc_opts *o, sbx_gc_cb cb, void *ctx)
{
	struct sbx_session s;
	struct sbx_err e = { 0 };
	uint64_t now = sbx_now_ns(), grace = o->grace_ms * 1000000u;
	/* The age of an unreadable record is its own mtime (or, with no
	 * record, the directory's), taken before the load: quarantining a
	 * corrupt record renames it, which moves the directory's mtime past
	 * now, and a fresh-looking directory would survive --grace 0. */
	struct stat sb;
	char path[80];
	snprintf(path, sizeof path, "%s/" SBX_RECORD_FILE, id);
	int aged = fstatat(st->sessions_fd, path, &sb, AT_SYMLINK_NOFOLLOW) == 0 ||
		   fstatat(st->sessions_fd, id, &sb, AT_SYMLINK_NOFOLLOW) == 0;
	if (sbx_record_load(st, id, &s, &e) < 0) {
		/* Unreadable (and now quarantined): old enough, it goes. */
		if (aged && (uint64_t)sb.st_mtim.tv_sec * 1000000000u + (uint64_t)sb.st_mtim.tv_nsec + grace > now)
			return;
		sbx_gc_report(cb, ctx, "reclaim", id, "record unreadable: %s", e.msg);
		if (!o->dry_run)
			sbx_session_reclaim(st, id);
		return;
	}
	if (s.pool)
		return; /* a warm-pool member: the pool's upkeep replaces it at once */
	char boot[40] = "";
	sbx_boot_id(boot, sizeof boot);
	int rebooted = s.boot_id[0] && boot[0] && strcmp(s.boot_id, boot);
	if (!strcmp(s.state, "running") || !strcmp(s.state, "creating") || !strcmp(s.state, "paused") ||
	    !strcmp(s.state, "suspended")) {
		/* Unlocked yet "running": the monitor died (killed), or the host
		 * rebooted under it (another boot ID: nothing of it can live). */
		sbx_gc_report(cb, ctx, rebooted ? "mark-stopped" : "mark-crashed", id, "state %s but %s", s.state,
			      rebooted ? "the host rebooted since" : "no monitor");
		if (o->dry_run)
			return;
		snprintf(s.state, sizeof s.state, rebooted ? "stopped" : "crashed");
		snprintf(s.end_reason, sizeof s.end_reason, "%s",
			 rebooted ? "host rebooted (found by sbx-gc)" : "monitor gone (found by sbx-gc)");
		s.ended_ns = now;
		sbx_cgroup_usage(sbx_session_cgroup(&s), &s.cpu_ns, &s.mem_peak);
		sbx_cgroup_kill(sbx_session_cgroup(&s));
		sbx_record_save(st, &s, NULL);
		sbx_rm_rf_at(st->rsessions_fd, id);
		sbx_cgroup_remove(sbx_session_cgroup(&s));
		/* A suspend's memory image, whole or half: only its monitor
		 * could have resumed it. */
		if (sbx_suspend_leftovers(st, id, 1))
			sbx_gc_report(cb, ctx, "reclaim-suspend", id, "the memory image of a suspend");
	}
	if (sbx_state_ended(s.state) && s.ended_ns + grace <= now) {
		sbx_gc_report(cb, ctx, "reclaim", id, "%s: %s", s.state, s.end_reason[0] ? s.end_reason : "-");
		if (!o->dry_run)
			sbx_session_reclaim(st, id);
	}
}

/* Is a host cgroup of this name a session's?  Its ID, or the name a
 * claimed pool member kept (its record's "cgroup"). */
static int cgroup_owned(struct sbx_state *st, const char *name, char **ids, size_t n)
{
	if (faccessat(st->sessions_fd, name, F_OK, AT_SYMLINK_NOFOLLOW) == 0 ||
	    faccessat(st->rsessions_fd, name, F_OK, AT_SYMLINK_NOFOLLOW) == 0)
		return 1;
	for (size_t i = 0; i < n; i++) {
		struct sbx_session s;
		if (sbx_record_load(st, ids[i], &s, NULL) == 0 && !strcmp(s.cgroup, name))
			return 1;
	}
	return 0;
}

/* Runtime directories and cgroups whose session record is gone. */
static void gc_orphans(struct sbx_state *st, const struct sbx_gc_opts *o, sbx_gc_cb cb, void *ctx)
{
	DIR *d = fdopendir(dup(st->rsessions_fd));
	if (d) {
		rewinddir(d);
		for (struct dirent *de; (de = readdir(d));) {
			const char *id = de->d_name;
			if (sbx_id_check(id, "session", NULL) < 0 ||
			    faccessat(st->sessions_fd, id, F_OK, AT_SYMLINK_NOFOLLOW) == 0)
				continue;
			int lock = sbx_lock_session(st, id, 1, 0, NULL);
			if (lock == -2)
				continue; /* someone holds it: not ours to judge */
			sbx_gc_report(cb, ctx, "reclaim-orphan-run", id, "runtime directory without a record");
			if (!o->dry_run) {
				sbx_cgroup_kill(id);
				sbx_rm_rf_at(st->rsessions_fd, id);
			}
			if (lock >= 0)
				close(lock);
		}
		closedir(d);
	}
	char **ids, **sids = NULL;
	size_t n, ns = 0;
	if (sbx_session_list(st, &sids, &ns, NULL) < 0)
		sids = NULL, ns = 0;
	if (sbx_cgroup_list(&ids, &n) == 0) {
		for (size_t i = 0; i < n; i++) {
			if (sbx_id_check(ids[i], "session", NULL) == 0 && !cgroup_owned(st, ids[i], sids, ns)) {
				sbx_gc_report(cb, ctx, "reclaim-orphan-cgroup", ids[i],
					      "host cgroup without a session");
				if (!o->dry_run) {
					sbx_cgroup_kill(ids[i]);
					for (int k = 0; k < 50 && sbx_cgroup_remove(ids[i]) < 0; k++)
						usleep(20000);
				}
			}
			free(ids[i]);
		}
		free(ids);
	}
	for (size_t i = 0; i < ns; i++)
		free(sids[i]);
	free(sids);
}

/* Workspaces idle past their retention (the policy's, as of their last
 * attach); never one a live session holds. */
static void gc_workspaces(struct sbx_state *st, const struct sbx_gc_opts *o, sbx_gc_cb cb, void *ctx)
{
	struct sbx_workspace_info *ws;
	size_t n;
	if (sbx_workspace_list(st, NULL, &ws, &n, NULL) < 0)
		return;
	for (size_t i = 0; i < n; i++) {
		struct sbx_workspace_info w;
		uint64_t now = sbx_now_ns();
		if (sbx_workspace_reap(st, ws[i].tenant, ws[i].name, now, o->dry_run, &w) != 1)
			continue;
		struct sbx_gc_action a = {
			.action = "reclaim-workspace", .session = w.session, .workspace = w.name, .tenant = w.tenant
		};
		snprintf(a.detail, sizeof a.detail, "idle %llu s, retention %llu s%s%s",
			 (unsigned long long)((now - w.last_used_ns) / 1000000000u),
			 (unsigned long long)(w.retention_ms / 1000), w.unreadable ? " (record unreadable)" : "",
			 w.session[0] ? ", last used by " : "");
		if (w.session[0])
			snprintf(a.detail + strlen(a.detail), sizeof a.detail - strlen(a.detail), "%s", w.session);
		if (cb)
			cb(&a, ctx);
	}
	free(ws);
}

struct audited {
	struct sbx_state *st;
	const struct sbx_gc_opts *o;
	sbx_gc_cb cb;
	void *ctx;
};

/* Every action a real run takes is in the audit trail. */
static void audit_cb(const struct sbx_gc_action *a, void *ctx)
{
	struct audited *x = ctx;
	if (!x->o->dry_run && a->workspace) {
		json_t *f = json_pack("{s:s, s:s, s:s}", "workspace", a->workspace, "reason",
				      "retention passed (sbx-gc)", "detail", a->detail);
		if (f && a->tenant && a->tenant[0])
			json_object_set_new(f, "tenant", json_string(a->tenant));
		sbx_audit_append(x->st, "workspace.remove", f, NULL);
		json_decref(f);
	} else if (!x->o->dry_run) {
		json_t *f = json_pack("{s:s, s:s, s:s}", "session", a->session, "what", a->action, "detail", a->detail);
		/* Reported before it goes: the record, when readable, says whose
		 * it was, so the tenant's audit view has it too. */
		struct sbx_session s;
		_cleanup_free_ char *txt = NULL;
		if (f && sbx_id_check(a->session, "session", NULL) == 0) {
			int dfd =
				openat(x->st->sessions_fd, a->session, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
			txt = dfd >= 0 ? sbx_read_small_at(dfd, "session.json", 1 << 20, NULL) : NULL;
			if (dfd >= 0)
				close(dfd);
		}
		if (txt && sbx_record_parse(txt, a->session, &s) == 0 && s.tenant[0])
			json_object_set_new(f, "tenant", json_string(s.tenant));
		sbx_audit_append(x->st, "gc.reclaim", f, NULL);
		json_decref(f);
	}
	if (x->cb)
		x->cb(a, x->ctx);
}

struct seg_report {
	sbx_gc_cb cb;
	void *ctx;
	unsigned keep;
};

static void seg_dropped(const char *segment, void *ctx)
{
	struct seg_report *r = ctx;
	struct sbx_gc_action a = { .action = "drop-audit-segment", .session = "-" };
	snprintf(a.detail, sizeof a.detail, "%s: beyond audit.keep %u", segment, r->keep);
	if (r->cb)
		r->cb(&a, r->ctx);
}

/* Audit retention (sbx.yaml audit.keep, default SBX_AUDIT_KEEP_DEFAULT;
 * 0 keeps all): the oldest segments beyond it go; sbx_audit_retain records
 * that in the trail itself (audit.retention), so these actions are not
 * recorded again as gc.reclaim. */
static void gc_audit(struct sbx_state *st, const struct sbx_gc_opts *o, sbx_gc_cb cb, void *ctx)
{
	static struct sbx_hostconf hc; /* large */
	if (sbx_hostconf_load(&hc, NULL) < 0)
		return;
	unsigned keep = hc.audit.keep_set ? hc.audit.keep : SBX_AUDIT_KEEP_DEFAULT;
	if (!keep)
		return;
	struct seg_report r = { cb, ctx, keep };
	struct sbx_err e = { 0 };
	if (sbx_audit_retain(st, keep, o->dry_run, seg_dropped, &r, &e) < 0) {
		struct sbx_gc_action a = { .action = "audit-error", .session = "-" };
		snprintf(a.detail, sizeof a.detail, "audit retention: %s", e.msg);
		if (cb)
			cb(&a, ctx);
	}
}

/* RUN/NAME.lock, taken (blocking): one collector, or one pool keeper, at a
 * time. */
static int keeper_lock(struct sbx_state *st, const char *name, struct sbx_err *err)
{
	char file[32];
	snprintf(file, sizeof file, "%s.lock", name);
	int fd = openat(st->run_fd, file, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (fd < 0 || flock(fd, LOCK_EX) < 0) {
		sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot take the %s lock", name);
		if (fd >= 0)
			close(fd);
		return -1;
	}
	return fd;
}

/* ---- leftovers of snapshot saves and removals (snapshot.h) ---------- */

/* A leftover in dfd (.tmp-*, .rm-*) that nobody holds locked and that is
 * older than the grace period. */
static void gc_snapshot_dir(int dfd, const char *where, const char *const *prefixes, uint64_t grace_ms, int dry_run,
			    sbx_gc_cb cb, void *ctx)
{
	DIR *d = fdopendir(dup(dfd));
	if (!d)
		return;
	rewinddir(d);
	uint64_t now = sbx_now_ns();
	for (struct dirent *de; (de = readdir(d));) {
		const char *nm = de->d_name;
		int ours = 0;
		for (const char *const *p = prefixes; *p; p++)
			ours |= !strncmp(nm, *p, strlen(*p));
		if (!ours)
			continue;
		int fd = openat(dfd, nm, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
		struct stat sb;
		if (fd < 0 || fstat(fd, &sb) < 0) {
			if (fd >= 0)
				close(fd);
			continue;
		}
		uint64_t mt = (uint64_t)sb.st_mtim.tv_sec * 1000000000u + (uint64_t)sb.st_mtim.tv_nsec;
		/* A save at work holds its directory locked. */
		int busy = flock(fd, LOCK_EX | LOCK_NB) < 0;
		close(fd);
		if (busy || mt + grace_ms * 1000000u > now)
			continue;
		struct sbx_gc_action a = { .action = "reclaim-snapshot-tmp", .session = "-" };
		snprintf(a.detail, sizeof a.detail, "%s/%s: left by an interrupted save or removal", where, nm);
		if (cb)
			cb(&a, ctx);
		if (!dry_run)
			sbx_rm_rf_at(dfd, nm);
	}
	closedir(d);
}

static void gc_snapshots(struct sbx_state *st, uint64_t grace_ms, int dry_run, sbx_gc_cb cb, void *ctx)
{
	_cleanup_close_ int top = openat(st->lib_fd, "snapshots", O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
	if (top >= 0) {
		DIR *d = fdopendir(dup(top));
		if (d) {
			rewinddir(d);
			for (struct dirent *de; (de = readdir(d));) {
				if (de->d_name[0] == '.')
					continue;
				int t = openat(top, de->d_name, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
				if (t < 0)
					continue;
				char where[100];
				snprintf(where, sizeof where, "snapshots/%s", de->d_name);
				static const char *const ours[] = { ".tmp-", ".rm-", NULL };
				gc_snapshot_dir(t, where, ours, grace_ms, dry_run, cb, ctx);
				close(t);
			}
			closedir(d);
		}
	}
	char base[600];
	sbx_templates_dir(st, base, sizeof base);
	_cleanup_close_ int tdir = open(base, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	/* Only our own leftovers there: other tools build templates too. */
	static const char *const ours[] = { ".tmp-snap-", ".tmp-build-", NULL }; /* tmplbuild.h */
	if (tdir >= 0)
		gc_snapshot_dir(tdir, "templates", ours, grace_ms, dry_run, cb, ctx);
	/* and in each tenant's own (template.h) */
	int tt = tdir >= 0 ? openat(tdir, SBX_TEMPLATE_TENANTS, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW) : -1;
	DIR *d = tt >= 0 ? fdopendir(tt) : NULL;
	char **ids;
	size_t n;
	if (!d) {
		if (tt >= 0)
			close(tt);
	} else if (sbx_dir_ids(d, 1, &ids, &n) == 0) {
		_cleanup_close_ int again =
			openat(tdir, SBX_TEMPLATE_TENANTS, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
		for (size_t i = 0; i < n; i++) {
			int t = again >= 0 ? openat(again, ids[i], O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW)
					   : -1;
			if (t >= 0) {
				char where[100];
				snprintf(where, sizeof where, "templates/" SBX_TEMPLATE_TENANTS "/%s", ids[i]);
				gc_snapshot_dir(t, where, ours, grace_ms, dry_run, cb, ctx);
				close(t);
			}
			free(ids[i]);
		}
		free(ids);
	}
}

/* ---- the warm pool's upkeep (pool.h) --------------------------------- */

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
		sbx_gc_report(cb, ctx, "reclaim", id, "pool member %s%s%s",
			      !strcmp(s.state, "pooled") || !strcmp(s.state, "creating") ? "without a monitor"
											 : s.state,
			      s.end_reason[0] ? ": " : "", s.end_reason);
		if (!dry_run)
			sbx_session_reclaim(st, id);
		rc = 1;
	}
	if (lock >= 0)
		close(lock);
	return rc;
}

/* Boot one member of pool entry pc (template t resolved), with a NIC
 * when nic. */
static int add_member(struct sbx_state *st, const struct sbx_pool_conf *pc, int nic, char *id, size_t idn,
		      struct sbx_err *err)
{
	_cleanup_free_ struct sbx_policy *p = malloc(sizeof *p);
	if (!p)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, ENOMEM, "cannot boot a pool member");
	sbx_policy_defaults(p);
	p->resources.vcpus = pc->vcpus;
	p->resources.memory = (uint64_t)pc->memory_mib << 20;
	p->resources.disk = pc->disk;
	struct sbx_create_opts o = { .tmpl = pc->tmpl,
				     .vcpus = pc->vcpus,
				     .memory_mib = pc->memory_mib,
				     .policy = p,
				     .pool = 1,
				     .pool_nic = nic };
	struct sbx_session s;
	int existed;
	if (sbx_session_create(st, &o, &s, &existed, err) < 0)
		return -1;
	snprintf(id, idn, "%s", s.id);
	return 0;
}

/* How many members of entry pc the pool keeps with (nic) or without a NIC. */
static unsigned pool_want(const struct sbx_pool_conf *pc, int nic)
{
	return nic ? pc->network : pc->size - pc->network;
}

static int conf_fits(const struct sbx_session *m, const struct sbx_template *t, const struct sbx_pool_conf *pc)
{
	return !strcmp(m->tmpl_name, t->name) && !strcmp(m->tmpl_version, t->version) && m->vcpus == pc->vcpus &&
	       m->memory_mib == pc->memory_mib && m->limits.disk_bytes == pc->disk;
}

int sbx_gc_pool(struct sbx_state *st, int dry_run, sbx_gc_cb cb, void *ctx, struct sbx_err *err)
{
	/* One keeper at a time: a refill started by a claim waits for the
	 * one running, then finds the pool as that one left it. */
	_cleanup_close_ int pl = keeper_lock(st, "pool", err);
	if (pl < 0)
		return -1;
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
	unsigned have[SBX_POOL_TEMPLATES_MAX][2] = { { 0 } }; /* without, with a NIC */
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
		int nic = m->mac[0] != 0, c = mem[k].conf;
		if (c >= 0 && have[c][nic] < pool_want(&hc.pool[c], nic)) {
			have[c][nic]++;
			continue;
		}
		if (c >= 0)
			snprintf(why, sizeof why, "the pool of %s holds %u %s a network", hc.pool[c].tmpl,
				 pool_want(&hc.pool[c], nic), nic ? "with" : "without");
		else
			snprintf(why, sizeof why,
				 "no pool is configured for %s@%s with %u vCPU, %u MiB, %llu MiB of disk", m->tmpl_name,
				 m->tmpl_version, m->vcpus, m->memory_mib,
				 (unsigned long long)(m->limits.disk_bytes >> 20));
		sbx_gc_report(cb, ctx, "pool-trim", m->id, "%s", why);
		int gone;
		if (!dry_run)
			sbx_session_destroy(st, m->id, &gone, NULL);
	}
	for (unsigned i = 0; i < hc.npool; i++) {
		for (int nic = 0; nic < 2; nic++) {
			for (; resolved[i] && have[i][nic] < pool_want(&hc.pool[i], nic); have[i][nic]++) {
				char id[SBX_ID_MAX + 1] = "-";
				struct sbx_err e = { 0 };
				if (!dry_run && add_member(st, &hc.pool[i], nic, id, sizeof id, &e) < 0) {
					sbx_gc_report(cb, ctx, "pool-error", hc.pool[i].tmpl,
						      "cannot boot a member: %s", e.msg);
					if (e.code == SBX_EXIT_TEMPFAIL)
						return 0; /* the host is full: the next run tries again */
					break;
				}
				sbx_gc_report(cb, ctx, "pool-add", id, "%s@%s, %u vCPU, %u MiB%s", t[i].name,
					      t[i].version, hc.pool[i].vcpus, hc.pool[i].memory_mib,
					      nic ? ", network" : "");
			}
		}
	}
	return 0;
}

int sbx_gc_run(struct sbx_state *st, const struct sbx_gc_opts *o, sbx_gc_cb cb_user, void *ctx_user,
	       struct sbx_err *err)
{
	struct audited x = { st, o, cb_user, ctx_user };
	sbx_gc_cb cb = audit_cb;
	void *ctx = &x;
	if (o->pool_only)
		return sbx_gc_pool(st, o->dry_run, cb, ctx, err);
	/* One collector at a time; a second one waits its turn. */
	_cleanup_close_ int gl = keeper_lock(st, "gc", err);
	if (gl < 0)
		return -1;
	char **ids;
	size_t n;
	if (sbx_session_list(st, &ids, &n, err) < 0)
		return -1;
	for (size_t i = 0; i < n; i++) {
		/* Global, then session: the order sbx-create takes them in. */
		int g = sbx_lock_global(st, NULL);
		int lock = g >= 0 ? sbx_lock_session(st, ids[i], 1, 0, NULL) : -1;
		if (lock >= 0) {
			gc_session(st, ids[i], o, cb, ctx);
			close(lock);
		} else if (lock != -2 && faccessat(st->sessions_fd, ids[i], F_OK, AT_SYMLINK_NOFOLLOW) == 0 &&
			   faccessat(st->rsessions_fd, ids[i], F_OK, AT_SYMLINK_NOFOLLOW) < 0) {
			/* No runtime directory at all, so no lock can exist: an
			 * ended session (its monitor removed it) or a leftover. */
			gc_session(st, ids[i], o, cb, ctx);
		}
		if (g >= 0)
			close(g);
		free(ids[i]);
	}
	free(ids);
	gc_orphans(st, o, cb, ctx);
	gc_workspaces(st, o, cb, ctx);
	/* Build VMs of template builds that were killed (tmplbuild.h), then
	 * leftovers of snapshot saves, removals and builds that were. */
	sbx_tmplbuild_gc(st, o->dry_run, cb, ctx);
	gc_snapshots(st, o->grace_ms, o->dry_run, cb, ctx);
	gc_audit(st, o, cb_user, ctx_user);
	/* Last, and under its own lock, since it may boot VMs for a while. */
	close(gl);
	gl = -1;
	return sbx_gc_pool(st, o->dry_run, cb, ctx, err);
}
