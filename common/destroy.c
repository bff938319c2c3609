/* Ending a session (session.h): sbx-kill's destroy through the monitor, and the reclaim of what a dead one left. */
#include "session.h"
#include "audit.h"
#include "cgroup.h"
#include "proto.h"
#include "monclient.h"
#include "util.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>

#include <jansson.h>
#include <sha2.h>

#define RECORD SBX_RECORD_FILE

int sbx_session_reclaim(struct sbx_state *st, const char *id)
{
	struct sbx_session s;
	if (sbx_record_load(st, id, &s, NULL) == 0) {
		/* Only a process whose start time matches is ours: pids are
		 * reused.  The VMM, and the egress proxy (not in its cgroups). */
		int pids[] = { s.vmm_pid, s.proxy_pid };
		uint64_t starts[] = { s.vmm_start, s.proxy_start };
		for (int i = 0; i < 2; i++) {
			int pfd = pids[i] > 0 ? (int)syscall(SYS_pidfd_open, pids[i], 0) : -1;
			if (pfd >= 0) {
				if (starts[i] && sbx_proc_start_time(pids[i]) == starts[i])
					syscall(SYS_pidfd_send_signal, pfd, SIGKILL, NULL, 0);
				close(pfd);
			}
		}
	}
	/* Whatever is still in the session's cgroups (a VMM whose record is
	 * gone or corrupt) is ours too; a claimed pool member's may keep its
	 * old name (s.cgroup, "" when the record is unreadable). */
	sbx_cgroup_kill(id);
	if (s.cgroup[0])
		sbx_cgroup_kill(s.cgroup);
	int rc = sbx_rm_rf_at(st->sessions_fd, id);
	if (sbx_rm_rf_at(st->rsessions_fd, id) < 0)
		rc = -1;
	/* The VMM may take a moment to leave its cgroup after SIGKILL. */
	for (int i = 0; i < 50 && (sbx_cgroup_remove(id) < 0 || (s.cgroup[0] && sbx_cgroup_remove(s.cgroup) < 0)); i++)
		usleep(20000);
	return rc;
}
/* Kill a monitor that holds its session's lock but does not answer: pid
 * checked against its recorded start time, signalled through a pidfd. */
static void kill_monitor(struct sbx_state *st, const char *id, int sig)
{
	struct sbx_session s;
	if (sbx_record_load(st, id, &s, NULL) < 0 || s.monitor_pid <= 0 ||
	    sbx_proc_start_time(s.monitor_pid) != s.monitor_start)
		return;
	int pfd = (int)syscall(SYS_pidfd_open, s.monitor_pid, 0);
	if (pfd >= 0) {
		syscall(SYS_pidfd_send_signal, pfd, sig, NULL, 0);
		close(pfd);
	}
}

static int skip_frame(void *ctx, struct sbx_mon *m, const struct sbx_frame *f, struct sbx_err *err)
{
	return 0;
}

/* Wait (bounded) until nobody holds the session's lock. */
static int wait_unlocked(struct sbx_state *st, const char *id, int seconds)
{
	int lock = -2;
	for (int i = 0; i < seconds * 20 && (lock = sbx_lock_session(st, id, 1, 0, NULL)) == -2; i++)
		usleep(50000);
	if (lock >= 0)
		close(lock);
	return lock == -2 ? -1 : 0;
}

int sbx_session_destroy(struct sbx_state *st, const char *id, int *gone, struct sbx_err *err)
{
	*gone = 0;
	/* For a tenant, another's session, like a missing one, is 4: a kill
	 * that says "gone" would tell them apart no better, and a tenant
	 * learns nothing either way. */
	if (sbx_session_visible(st, id, err) < 0)
		return -1;
	if (faccessat(st->sessions_fd, id, F_OK, AT_SYMLINK_NOFOLLOW) < 0 &&
	    faccessat(st->rsessions_fd, id, F_OK, AT_SYMLINK_NOFOLLOW) < 0) {
		*gone = 1;
		return 0;
	}
	int asked = 0;
	_cleanup_mon_ struct sbx_mon m = { .fd = sbx_monitor_socket(st, id) };
	if (m.fd >= 0) {
		/* Ask the monitor: it kills the VM, ends the execs and removes
		 * the session, then goes; whatever it says before is skipped. */
		sbx_frame_raw(&m.out, SBX_F_SHUTDOWN, 0, NULL, 0);
		asked = sbx_mon_send(&m, -1) == 0;
		if (asked)
			sbx_mon_loop(&m, 30000, skip_frame, NULL, NULL, NULL);
		sbx_mon_close(&m);
	}
	/* A monitor not listening yet (still setting up) is asked with
	 * SIGTERM, which it handles like a kill request; one that holds the
	 * lock and ignores even that is killed: sbx-kill must always finish. */
	if (!asked && wait_unlocked(st, id, 1) < 0) {
		kill_monitor(st, id, SIGTERM);
		asked = 1;
	}
	if (wait_unlocked(st, id, 30) < 0) {
		kill_monitor(st, id, SIGKILL);
		wait_unlocked(st, id, 5);
	}
	/* The last look, and whatever is left (a monitor killed -9, a crashed
	 * VM, a create that died midway), under the global lock then the
	 * session's, as sbx-create takes them: a create of the same ID that
	 * started meanwhile is never mistaken for a leftover. */
	_cleanup_close_ int g = sbx_lock_global(st, err);
	if (g < 0)
		return -1;
	int lock = sbx_lock_session(st, id, 1, 0, NULL);
	if (lock == -2) {
		/* Held again: a new session under this ID was created after the
		 * one we asked to go.  Ours is gone; that one is not ours. */
		if (asked)
			return 0;
		return sbx_err_set(err, SBX_EXIT_TEMPFAIL, 0, "session %s is busy", id);
	}
	if (lock < 0 && faccessat(st->rsessions_fd, id, F_OK, AT_SYMLINK_NOFOLLOW) == 0)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, 0, "cannot lock session %s", id);
	struct sbx_session old;
	int had = faccessat(st->sessions_fd, id, F_OK, AT_SYMLINK_NOFOLLOW) == 0 &&
		  sbx_record_load(st, id, &old, NULL) == 0;
	int rc = sbx_session_reclaim(st, id);
	if (had && !asked) {
		/* The monitor records its own destroys; this is one it could not
		 * do (it was gone). */
		json_t *f = json_pack("{s:s, s:s, s:s, s:s}", "session", id, "reason", "sbx-kill", "state", old.state,
				      "cleanup", rc < 0 ? "incomplete" : "complete");
		if (f && old.tenant[0])
			json_object_set_new(f, "tenant", json_string(old.tenant));
		sbx_audit_append(st, "session.destroy", f, NULL);
		json_decref(f);
	}
	if (lock >= 0)
		close(lock);
	if (rc < 0)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot remove all of session %s", id);
	return 0;
}
