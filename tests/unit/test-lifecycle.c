/* Unit tests for a session's lifecycle accounting (TAP): the running,
 * paused and suspended split sbx-ps shows and ttl_counts: running uses,
 * and the record fields that carry it, through a save and a load. */
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <unistd.h>
#include <string.h>

#include "session.h"
#include "util.h"

#include "tap.h"

#define S 1000000000ull

static int near(double a, double b)
{
	return a - b < 1e-6 && b - a < 1e-6;
}

/* A record written by the code before the limits' field table (c04433e,
 * a session with a policy that sets every scalar limit): it loads as it
 * was, the limits added since take what they mean for an old record
 * (none), and written again it keeps every value. */
static void old_record(void)
{
	char exe[PATH_MAX], path[PATH_MAX + 64];
	ssize_t l = readlink("/proc/self/exe", exe, sizeof exe - 1);
	if (l <= 0) {
		ok(0, "cannot find the fixture");
		return;
	}
	exe[l] = 0;
	*strrchr(exe, '/') = 0; /* B/tests */
	snprintf(path, sizeof path, "%s/../../tests/fixtures/records/c04433e-session.json", exe);
	char *txt = sbx_read_small_at(AT_FDCWD, path, 1 << 20, NULL);
	struct sbx_session s, back;
	ok(txt && sbx_record_parse(txt, "old-record", &s) == 0, "a record written before the field table loads");
	const struct sbx_limits *k = &s.limits;
	ok(k->ttl_ms == 7200000 && k->exec_timeout_default_ms == 30000 && k->exec_timeout_max_ms == 600000 &&
		   k->output_cap == 2097152 && k->output_session_cap == 8388608 && k->exec_memory == 134217728 &&
		   k->disk_bytes == 1073741824 && k->pids_per_exec == 50 && k->pids_per_session == 200 &&
		   k->cpu_milli == 500 && k->workspace_size == 268435456 && k->workspace_retention_ms == 259200000 &&
		   k->idle_pause_ms == 300000 && k->idle_suspend_ms == 3600000 && k->ttl_running == 1,
	   "every scalar limit as the old code wrote it");
	ok(k->disk_bps == 0 && k->disk_iops == 0 && k->net_rate == 0, "limits it did not know: none");
	ok(k->writable.n == 2 && k->max_session_transfer == 1073741824 && !strcmp(k->packages.policy, "p.yaml"),
	   "files and packages as before");
	char *again = sbx_record_text(&s);
	ok(again && sbx_record_parse(again, "old-record", &back) == 0 &&
		   !memcmp(&back.limits, &s.limits, sizeof s.limits),
	   "written and read again, the limits are the same");
	free(again);
	free(txt);
	ok(sbx_limit_nfields >= 18, "the table describes the scalar limits");
}

int main(void)
{
	struct sbx_session s = { 0 };
	double run, paused, susp;
	snprintf(s.id, sizeof s.id, "s-life");
	snprintf(s.state, sizeof s.state, "running");
	s.created_ns = 100 * S;
	s.ready_ns = s.state_since_ns = 102 * S;
	sbx_session_times(&s, 110 * S, &run, &paused, &susp);
	ok(near(run, 10) && near(paused, 0) && near(susp, 0), "a running session: all of its life is running time");

	/* paused 5 s ago, after 2 s paused and 30 s suspended before */
	snprintf(s.state, sizeof s.state, "paused");
	s.paused_ns = 2 * S;
	s.suspended_ns = 30 * S;
	s.state_since_ns = 195 * S;
	sbx_session_times(&s, 200 * S, &run, &paused, &susp);
	ok(near(paused, 7) && near(susp, 30) && near(run, 100 - 37), "paused: the current stretch counts as paused");
	snprintf(s.state, sizeof s.state, "suspended");
	sbx_session_times(&s, 200 * S, &run, &paused, &susp);
	ok(near(paused, 2) && near(susp, 35) && near(run, 100 - 37), "suspended: as suspended");

	/* ended: the stretch stops counting at the end */
	s.ended_ns = 150 * S;
	snprintf(s.state, sizeof s.state, "expired");
	sbx_session_times(&s, 500 * S, &run, &paused, &susp);
	ok(near(run, 50 - 32) && near(susp, 30), "an ended session counts up to its end");

	/* a clock that went back, or totals past the life: never negative */
	struct sbx_session t = s;
	t.ended_ns = 0;
	snprintf(t.state, sizeof t.state, "running");
	t.suspended_ns = 1000 * S;
	sbx_session_times(&t, 200 * S, &run, &paused, &susp);
	ok(run >= 0 && near(run, 0), "running time is never negative");
	t.state_since_ns = 300 * S;
	snprintf(t.state, sizeof t.state, "paused");
	sbx_session_times(&t, 200 * S, &run, &paused, &susp);
	ok(near(paused, 2), "a state since the future adds nothing");

	/* the record keeps it all */
	struct sbx_session r = { 0 }, back;
	snprintf(r.id, sizeof r.id, "s-life");
	snprintf(r.state, sizeof r.state, "suspended");
	r.created_ns = 5;
	r.suspends = 3;
	r.paused_ns = 11;
	r.suspended_ns = 22;
	r.state_since_ns = 33;
	r.resume_ms = 44;
	r.limits.idle_pause_ms = 1000;
	r.limits.idle_suspend_ms = 60000;
	r.limits.ttl_running = 1;
	char *txt = sbx_record_text(&r);
	ok(txt && sbx_record_parse(txt, "s-life", &back) == 0, "a record with lifecycle fields round-trips");
	ok(!strcmp(back.state, "suspended") && back.suspends == 3 && back.paused_ns == 11 && back.suspended_ns == 22 &&
		   back.state_since_ns == 33 && back.resume_ms == 44,
	   "state, suspends, paused_ns, suspended_ns, state_since_ns, resume_ms");
	ok(back.limits.idle_pause_ms == 1000 && back.limits.idle_suspend_ms == 60000 && back.limits.ttl_running == 1,
	   "the lifecycle limits");
	free(txt);
	ok(sbx_record_parse("{\"schema\":1,\"id\":\"s-life\",\"state\":\"running\"}", "s-life", &back) == 0 &&
		   back.suspends == 0 && back.limits.idle_suspend_ms == 0 && !back.limits.ttl_running,
	   "a record written before them: never suspended, no idle policy, TTL on the wall clock");
	ok(sbx_state_live("suspended") && !sbx_state_up("suspended") && sbx_state_live("running") &&
		   !sbx_state_live("crashed"),
	   "suspended is live but not up");
	old_record();
	return tap_done();
}
