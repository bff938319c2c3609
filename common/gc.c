#include "gc.h"
#include "audit.h"
#include "cgroup.h"
#include "session.h"
#include "util.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <fcntl.h>
#include <signal.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/syscall.h>

static void report(sbx_gc_cb cb, void *ctx, const char *action, const char *id, const char *fmt, ...)
	__attribute__((format(printf, 5, 6)));
static void report(sbx_gc_cb cb, void *ctx, const char *action, const char *id, const char *fmt, ...)
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

static int ended(const char *state)
{
	return !strcmp(state, "crashed") || !strcmp(state, "stopped") || !strcmp(state, "expired");
}

/* One session: called with the global lock and the session's lock held. */
static void gc_session(struct sbx_state *st, const char *id, const struct sbx_gc_opts *o, sbx_gc_cb cb, void *ctx)
{
	struct sbx_session s;
	struct sbx_err e = { 0 };
	uint64_t now = sbx_now_ns(), grace = o->grace_ms * 1000000u;
	if (sbx_record_load(st, id, &s, &e) < 0) {
		/* Unreadable (and now quarantined): old enough, it goes. */
		struct stat sb;
		if (fstatat(st->sessions_fd, id, &sb, AT_SYMLINK_NOFOLLOW) == 0 &&
		    (uint64_t)sb.st_mtim.tv_sec * 1000000000u + (uint64_t)sb.st_mtim.tv_nsec + grace > now)
			return;
		report(cb, ctx, "reclaim", id, "record unreadable: %s", e.msg);
		if (!o->dry_run)
			sbx_session_reclaim(st, id);
		return;
	}
	char boot[40] = "";
	sbx_boot_id(boot, sizeof boot);
	int rebooted = s.boot_id[0] && boot[0] && strcmp(s.boot_id, boot);
	if (!strcmp(s.state, "running") || !strcmp(s.state, "creating")) {
		/* Unlocked yet "running": the monitor died (killed), or the host
		 * rebooted under it (another boot ID: nothing of it can live). */
		report(cb, ctx, rebooted ? "mark-stopped" : "mark-crashed", id, "state %s but %s", s.state,
		       rebooted ? "the host rebooted since" : "no monitor");
		if (o->dry_run)
			return;
		snprintf(s.state, sizeof s.state, rebooted ? "stopped" : "crashed");
		snprintf(s.end_reason, sizeof s.end_reason, "%s",
			 rebooted ? "host rebooted (found by sbx-gc)" : "monitor gone (found by sbx-gc)");
		s.ended_ns = now;
		sbx_cgroup_usage(s.id, &s.cpu_ns, &s.mem_peak);
		sbx_cgroup_kill(id);
		sbx_record_save(st, &s, NULL);
		sbx_rm_rf_at(st->rsessions_fd, id);
		sbx_cgroup_remove(id);
	}
	if (ended(s.state) && s.ended_ns + grace <= now) {
		report(cb, ctx, "reclaim", id, "%s: %s", s.state, s.end_reason[0] ? s.end_reason : "-");
		if (!o->dry_run)
			sbx_session_reclaim(st, id);
	}
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
			report(cb, ctx, "reclaim-orphan-run", id, "runtime directory without a record");
			if (!o->dry_run) {
				sbx_cgroup_kill(id);
				sbx_rm_rf_at(st->rsessions_fd, id);
			}
			if (lock >= 0)
				close(lock);
		}
		closedir(d);
	}
	char **ids;
	size_t n;
	if (sbx_cgroup_list(&ids, &n) == 0) {
		for (size_t i = 0; i < n; i++) {
			if (sbx_id_check(ids[i], "session", NULL) == 0 &&
			    faccessat(st->sessions_fd, ids[i], F_OK, AT_SYMLINK_NOFOLLOW) < 0 &&
			    faccessat(st->rsessions_fd, ids[i], F_OK, AT_SYMLINK_NOFOLLOW) < 0) {
				report(cb, ctx, "reclaim-orphan-cgroup", ids[i], "host cgroup without a session");
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
	if (!x->o->dry_run) {
		json_t *f = json_pack("{s:s, s:s, s:s}", "session", a->session, "what", a->action, "detail", a->detail);
		sbx_audit_append(x->st, "gc.reclaim", f, NULL);
		json_decref(f);
	}
	if (x->cb)
		x->cb(a, x->ctx);
}

int sbx_gc_run(struct sbx_state *st, const struct sbx_gc_opts *o, sbx_gc_cb cb_user, void *ctx_user,
	       struct sbx_err *err)
{
	struct audited x = { st, o, cb_user, ctx_user };
	sbx_gc_cb cb = audit_cb;
	void *ctx = &x;
	/* One collector at a time; a second one waits its turn. */
	_cleanup_close_ int gl = openat(st->run_fd, "gc.lock", O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (gl < 0 || flock(gl, LOCK_EX) < 0)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot take the gc lock");
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
	return 0;
}
