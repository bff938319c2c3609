/* sbx-monitor: the warm-up exec before a new guest is ready.
 *
 * A guest's first exec costs several times a later one (under TCG ~90 ms
 * against ~22 for `echo hi`: the guest kernel's fork, exec, cgroup and
 * exit paths and guest-init's own exec path all run, and are translated,
 * for the first time; on KVM what is left is the guest's page cache).
 * So when a guest first says HELLO the monitor runs one exec of its own
 * through the whole path, the way a session's exec goes (its cgroup with
 * the session's limits, the default user and working directory, the
 * search of PATH, pipes, a line of output, reap, accounting): `echo`,
 * found on PATH (the first lookups along it and in the working directory
 * are a first exec's cost too), whose newline takes the output path, and
 * only when its EXIT comes back is the session ready: the cost moves
 * before readiness, and a warm-pool member pays it before any claim.
 *
 * It is not the session's: no exec record, no audit, no output kept, no
 * EXECS count; every frame on its stream (SBX_WARM_STREAM) is dropped
 * here.  It is bounded: the guest kills it at WARM_TIMEOUT_MS, and the
 * monitor stops waiting at WARM_WAIT_MS (a late EXIT is dropped like the
 * rest), so a template whose echo never ends, or has none (127),
 * costs a boot at most that and changes nothing else.  A restored guest
 * says no HELLO and gets none (its first exec follows the restore). */
#include "mon.h"

#define WARM_TIMEOUT_MS 2000u
#define WARM_WAIT_MS 3000u

static struct sbx_trace warm_trace;

void warm_start(struct mon *m)
{
	char *argv[] = { "echo", NULL };
	struct sbx_exec_req r = { .argv = argv,
				  .argc = 1,
				  .timeout_ms = WARM_TIMEOUT_MS,
				  .pids_max = m->s.limits.pids_per_exec,
				  .session_pids = m->s.limits.pids_per_session,
				  .memory_max = m->s.limits.exec_memory };

	sbx_trace_begin(&warm_trace, "boot.warm");
	if (sbx_exec_req_encode(&m->aout, SBX_WARM_STREAM, &r) < 0) {
		sbx_trace_end(&warm_trace, 0);
		agent_secrets_then_ready(m);
		return;
	}
	m->warm.deadline = sbx_mono_ns() + (uint64_t)WARM_WAIT_MS * 1000000u;
	agent_flush(m);
}

static void warm_done(struct mon *m, int ok)
{
	m->warm.deadline = 0;
	sbx_trace_end(&warm_trace, ok);
	agent_secrets_then_ready(m);
}

int warm_frame(struct mon *m, const struct sbx_frame *f)
{
	if (f->stream != SBX_WARM_STREAM)
		return 0;
	if (m->warm.deadline && (f->type == SBX_F_EXIT || f->type == SBX_F_ERROR))
		warm_done(m, f->type == SBX_F_EXIT);
	return 1;
}

void warm_check(struct mon *m)
{
	if (m->warm.deadline && sbx_mono_ns() >= m->warm.deadline)
		warm_done(m, 0);
}
