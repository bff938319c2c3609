#include "view.h"

#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cgroup.h"
#include "env.h"
#include "portfwd.h"
#include "session.h"
#include "template.h"
#include "util.h"

/* Usage, host-measured where it can be: the VMM's cgroup while the VM
 * runs, the figures saved at its end afterwards; the overlay's allocated
 * blocks for disk written.  Allocation (vCPU-seconds, GiB-seconds) is what a
 * bill is made of; CPU-seconds is what was used. */
static void add_metrics(struct sbx_state *st, const struct sbx_session *s, json_t *o, uint64_t now)
{
	uint64_t cpu_ns = s->cpu_ns, peak = s->mem_peak;
	const char *state = json_string_value(json_object_get(o, "state"));
	if (state && (sbx_state_up(state) || !strcmp(state, "pooled")))
		sbx_cgroup_usage(sbx_session_cgroup(s), &cpu_ns, &peak);
	struct stat sb;
	char ov[SBX_ID_MAX + 32];
	snprintf(ov, sizeof ov, "%s/scratch.img", s->id);
	uint64_t disk = fstatat(st->sessions_fd, ov, &sb, AT_SYMLINK_NOFOLLOW) == 0 ? (uint64_t)sb.st_blocks * 512 : 0;
	json_object_set_new(o, "cpu_s", json_real((double)cpu_ns / 1e9));
	json_object_set_new(o, "memory_peak_bytes", json_integer((json_int_t)peak));
	json_object_set_new(o, "disk_written_bytes", json_integer((json_int_t)disk));
	/* Its life split by what the VM held: vCPUs only while running, its
	 * memory while running or paused, neither while suspended to disk. */
	double run, paused, susp;
	sbx_session_times(s, now, &run, &paused, &susp);
	json_object_set_new(o, "running_s", json_real(run));
	json_object_set_new(o, "paused_s", json_real(paused));
	json_object_set_new(o, "suspended_s", json_real(susp));
	json_object_set_new(o, "suspends", json_integer(s->suspends));
	json_object_set_new(o, "vcpu_seconds", json_real(run * s->vcpus));
	json_object_set_new(o, "gib_seconds", json_real((run + paused) * s->memory_mib / 1024.0));
	json_object_set_new(o, "cpu_seconds_used", json_real((double)cpu_ns / 1e9));
	/* The TTL runs on the wall clock, or (lifecycle.ttl_counts: running)
	 * only while the VM runs. */
	if (s->limits.ttl_ms && state && sbx_state_live(state)) {
		uint64_t ttl = s->limits.ttl_ms * 1000000u, left;
		if (s->limits.ttl_running) {
			uint64_t used = (uint64_t)(run * 1e9);
			left = used < ttl ? ttl - used : 0;
		} else {
			uint64_t exp = s->created_ns + ttl;
			left = exp > now ? exp - now : 0;
		}
		json_object_set_new(o, "ttl_left_s", json_integer((json_int_t)(left / 1000000000u)));
	}
}

/* The execs it ran: the e* entries of its execs directory. */
static unsigned count_execs(struct sbx_state *st, const char *id)
{
	unsigned execs = 0;
	int dfd = openat(st->sessions_fd, id, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
	int xfd = dfd >= 0 ? openat(dfd, "execs", O_RDONLY | O_DIRECTORY | O_CLOEXEC) : -1;
	DIR *d = xfd >= 0 ? fdopendir(xfd) : NULL;
	for (struct dirent *de; d && (de = readdir(d));)
		execs += de->d_name[0] == 'e';
	if (d)
		closedir(d);
	else if (xfd >= 0)
		close(xfd);
	if (dfd >= 0)
		close(dfd);
	return execs;
}

/* Its snapshot, owners, place in the pool and what its execs inherit. */
static void add_record(const struct sbx_session *s, json_t *o)
{
	if (s->snapshot[0])
		json_object_set_new(o, "snapshot", json_string(s->snapshot));
	json_object_set_new(o, "tenant", json_string(s->tenant));
	json_object_set_new(o, "template_owner", json_string(sbx_template_owner_name(s->tmpl_owner)));
	if (s->pool)
		json_object_set_new(o, "pool", json_true()); /* a warm-pool member */
	if (s->from_pool) {
		json_object_set_new(o, "from_pool", json_true());
		json_object_set_new(o, "claim_ms", json_integer((json_int_t)s->claim_ms));
	}
	/* sbx-create -e, -w, the template's; a value that is a secret shows
	 * as "[secret:NAME]", never itself. */
	if (s->env.n)
		json_object_set_new(o, "env", sbx_env_show(&s->env));
	if (s->workdir[0])
		json_object_set_new(o, "workdir", json_string(s->workdir));
	if (s->user[0])
		json_object_set_new(o, "user", json_string(s->user));
}

/* The session's network: null without a NIC; "lost", with net_lost saying
 * why, once its proxy is gone (as its monitor recorded, or, in the moment
 * before that, as its recorded pid says); else "ok". */
static void add_net(const struct sbx_session *s, const char *live, json_t *o)
{
	const char *lost = s->net_lost[0] ? s->net_lost : NULL;
	if (!s->mac[0]) {
		json_object_set_new(o, "net", json_null());
		return;
	}
	if (!lost && sbx_state_up(live) && s->proxy_pid > 0 && sbx_proc_start_time(s->proxy_pid) != s->proxy_start)
		lost = "proxy gone";
	json_object_set_new(o, "net", json_string(lost ? "lost" : "ok"));
	if (lost)
		json_object_set_new(o, "net_lost", json_string(lost));
}

/* A host process of the session's, while it is the one recorded (its start
 * time matches): its pid, else null. */
static json_t *live_pid(int pid, uint64_t start)
{
	return pid > 0 && start && sbx_proc_start_time(pid) == start ? json_integer(pid) : json_null();
}

/* Its host processes by pid, for ps and pgrep: a claimed session's VMM
 * was booted as a pool member, and its arguments name that member. */
static void add_pids(const struct sbx_session *s, json_t *o)
{
	json_object_set_new(o, "pids",
			    json_pack("{s:o, s:o, s:o}", "monitor", live_pid(s->monitor_pid, s->monitor_start), "vmm",
				      live_pid(s->vmm_pid, s->vmm_start), "proxy",
				      live_pid(s->proxy_pid, s->proxy_start)));
}

json_t *sbx_session_view(struct sbx_state *st, const char *id)
{
	struct sbx_session s;
	struct sbx_err e = { 0 };
	/* "schema" versions the object (docs/json.md); "session" is the name
	 * every other output uses for a session ID, "id" the older one here. */
	if (sbx_session_lookup(st, id, &s, &e) < 0 && st->tenant[0])
		return NULL; /* not the tenant's: not there */
	if (!s.id[0])
		return json_pack("{s:i, s:s, s:s, s:s, s:s}", "schema", 1, "id", id, "session", id, "state", "corrupt",
				 "error", e.msg);
	unsigned execs = count_execs(st, id);
	char tmpl[140], created[40];
	snprintf(tmpl, sizeof tmpl, "%s@%s", s.tmpl_name, s.tmpl_version);
	sbx_fmt_time(s.created_ns, created, sizeof created);
	uint64_t now = sbx_now_ns();
	const char *live = sbx_session_live_state(st, &s);
	/* Its monitor says the guest agent stopped answering (monitor.c). */
	if (!strcmp(live, "running") && s.agent_unresponsive_ns)
		live = "unresponsive";
	json_t *o = json_pack("{s:i, s:s, s:s, s:s, s:s, s:s, s:i, s:i, s:s, s:i, s:I, s:s, s:s, s:I}", "schema", 1,
			      "id", s.id, "session", s.id, "state", live, "accel", s.accel, "vmm", s.vmm, "vcpus",
			      (int)s.vcpus, "memory_mib", (int)s.memory_mib, "template", tmpl, "execs", (int)execs,
			      "age_s", (json_int_t)(now > s.created_ns ? (now - s.created_ns) / 1000000000u : 0),
			      "created", created, "kernel", s.kernel, "boot_ms", (json_int_t)s.boot_ms);
	if (!o)
		return NULL;
	if (s.end_reason[0])
		json_object_set_new(o, "end_reason", json_string(s.end_reason));
	/* sbx-port's forwards live with the monitor: shown while it runs. */
	if (sbx_state_up(live))
		json_object_set_new(o, "ports", sbx_port_recorded(st, s.id));
	add_net(&s, live, o);
	add_pids(&s, o);
	add_record(&s, o);
	add_metrics(st, &s, o, now);
	return o;
}

json_t *sbx_workspace_view(const struct sbx_workspace_info *w, uint64_t now)
{
	char created[40], used[40];
	sbx_fmt_time(w->created_ns, created, sizeof created);
	sbx_fmt_time(w->last_used_ns, used, sizeof used);
	uint64_t idle = !w->in_use && now > w->last_used_ns ? (now - w->last_used_ns) / 1000000000u : 0;
	json_t *o = json_pack("{s:i, s:s, s:s, s:s, s:s?, s:I, s:I, s:s?, s:s, s:I, s:I}", "schema", 1, "workspace",
			      w->name, "tenant", w->tenant, "state", w->in_use ? "attached" : "idle", "session",
			      w->session[0] ? w->session : NULL, "size_bytes", (json_int_t)w->size, "used_bytes",
			      (json_int_t)w->used, "created", w->created_ns ? created : NULL, "last_used", used,
			      "idle_s", (json_int_t)idle, "retention_s", (json_int_t)(w->retention_ms / 1000));
	if (o && !w->in_use) {
		uint64_t left = w->retention_ms / 1000 > idle ? w->retention_ms / 1000 - idle : 0;
		json_object_set_new(o, "expires_in_s", json_integer((json_int_t)left));
	}
	return o;
}

const char *const sbx_capacity_view_keys[4] = { "sessions", "memory_mib", "vcpus", "starting" };

json_t *sbx_capacity_view(const struct sbx_capacity *c)
{
	json_t *o = json_pack("{s:i, s:{s:i, s:i}, s:{s:I, s:I}, s:{s:i, s:i}, s:{s:i, s:i}}", "schema", 1, "sessions",
			      "used", (int)c->sessions, "max", (int)c->max_sessions, "memory_mib", "used",
			      (json_int_t)c->memory_mib, "max", (json_int_t)c->max_memory_mib, "vcpus", "used",
			      (int)c->vcpus, "max", (int)c->max_vcpus, "starting", "used", (int)c->starting, "max",
			      (int)c->max_starting);
	/* Of the sessions, warm-pool members: capacity a claim reuses. */
	if (o)
		json_object_set_new(o, "pooled", json_integer((json_int_t)c->pooled));
	return o;
}
