/* sbx-ps: list sessions.  Text and JSON come from one object per session,
 * so the two cannot drift. */
#include <fcntl.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <sys/stat.h>

#include <jansson.h>

#include "cli.h"
#include "capacity.h"
#include "cgroup.h"
#include "egress.h"
#include "execrec.h"
#include "portfwd.h"
#include "session.h"
#include "template.h"
#include "util.h"
#include "workspace.h"

static const char *const cols[] = { "id", "state", "accel", "vcpus", "memory_mib", "template", "execs", "age_s",
				    "cpu_s", "memory_peak_bytes", "disk_written_bytes", "ttl_left_s", "tenant",
				    "template_owner" };

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
	uint64_t end = s->ended_ns ? s->ended_ns : now;
	double life = end > s->created_ns ? (double)(end - s->created_ns) / 1e9 : 0;
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
	(void)life;
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

/* Prometheus text exposition, for node_exporter's textfile collector. */
static void print_prometheus(json_t *all)
{
	static const struct {
		const char *key, *name, *type, *help;
	} m[] = {
		{ "cpu_s", "sbx_session_cpu_seconds_total", "counter", "Host CPU time used by the session's VMM." },
		{ "memory_peak_bytes", "sbx_session_memory_peak_bytes", "gauge", "Peak memory of the session's VMM." },
		{ "disk_written_bytes", "sbx_session_disk_written_bytes", "gauge", "Bytes allocated by the session's disk overlay." },
		{ "vcpus", "sbx_session_vcpus", "gauge", "vCPUs allocated." },
		{ "memory_mib", "sbx_session_memory_mib", "gauge", "Guest memory allocated, MiB." },
		{ "execs", "sbx_session_execs", "gauge", "Execs run in the session." },
		{ "age_s", "sbx_session_age_seconds", "gauge", "Seconds since the session was created." },
		{ "vcpu_seconds", "sbx_session_vcpu_seconds_total", "counter", "vCPU-seconds allocated." },
		{ "gib_seconds", "sbx_session_memory_gib_seconds_total", "counter", "GiB-seconds of memory allocated." },
		{ "ttl_left_s", "sbx_session_ttl_left_seconds", "gauge", "Seconds until the session's TTL expires." },
		{ "running_s", "sbx_session_running_seconds_total", "counter", "Seconds the session's VM ran." },
		{ "paused_s", "sbx_session_paused_seconds_total", "counter", "Seconds the session's VM was paused (RAM kept)." },
		{ "suspended_s", "sbx_session_suspended_seconds_total", "counter", "Seconds the session was suspended to disk (no RAM, no CPU)." },
		{ "suspends", "sbx_session_suspends_total", "counter", "Times the session was suspended to disk." },
	};
	for (size_t i = 0; i < SBX_ARRAY_LEN(m); i++) {
		printf("# HELP %s %s\n# TYPE %s %s\n", m[i].name, m[i].help, m[i].name, m[i].type);
		size_t k;
		json_t *o;
		json_array_foreach(all, k, o) {
			json_t *v = json_object_get(o, m[i].key);
			if (!json_is_number(v))
				continue;
			/* IDs, states and template names are from a fixed character set:
			 * nothing to escape in a label value. */
			printf("%s{session=\"%s\",state=\"%s\",accel=\"%s\",template=\"%s\"} %.6g\n", m[i].name,
			       json_string_value(json_object_get(o, "id")), json_string_value(json_object_get(o, "state")),
			       json_string_value(json_object_get(o, "accel")) ? json_string_value(json_object_get(o, "accel")) : "",
			       json_string_value(json_object_get(o, "template")) ? json_string_value(json_object_get(o, "template")) : "",
			       json_number_value(v));
		}
	}
}

static json_t *session_json(struct sbx_state *st, const char *id)
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
	unsigned execs = 0;
	int dfd = openat(st->sessions_fd, id, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
	int xfd = dfd >= 0 ? openat(dfd, "execs", O_RDONLY | O_DIRECTORY | O_CLOEXEC) : -1;
	DIR *d = xfd >= 0 ? fdopendir(xfd) : NULL;
	for (struct dirent *de; d && (de = readdir(d));)
		execs += de->d_name[0] == 'e';
	if (d)
		closedir(d);
	if (dfd >= 0)
		close(dfd);
	char tmpl[140], created[40];
	snprintf(tmpl, sizeof tmpl, "%s@%s", s.tmpl_name, s.tmpl_version);
	sbx_fmt_time(s.created_ns, created, sizeof created);
	uint64_t now = sbx_now_ns();
	const char *live = sbx_session_live_state(st, &s);
	/* Its monitor says the guest agent stopped answering (monitor.c). */
	if (!strcmp(live, "running") && s.agent_unresponsive_ns)
		live = "unresponsive";
	json_t *o = json_pack("{s:i, s:s, s:s, s:s, s:s, s:s, s:i, s:i, s:s, s:i, s:I, s:s, s:s, s:I}", "schema", 1,
			      "id", s.id, "session", s.id, "state", live, "accel", s.accel,
			      "vmm", s.vmm, "vcpus", (int)s.vcpus, "memory_mib", (int)s.memory_mib, "template", tmpl,
			      "execs", (int)execs, "age_s",
			      (json_int_t)(now > s.created_ns ? (now - s.created_ns) / 1000000000u : 0), "created",
			      created, "kernel", s.kernel, "boot_ms", (json_int_t)s.boot_ms);
	if (o && s.end_reason[0])
		json_object_set_new(o, "end_reason", json_string(s.end_reason));
	/* sbx-port's forwards live with the monitor: shown while it runs. */
	if (o && sbx_state_up(live))
		json_object_set_new(o, "ports", sbx_port_recorded(st, s.id));
	if (o && s.snapshot[0])
		json_object_set_new(o, "snapshot", json_string(s.snapshot));
	if (o) {
		json_object_set_new(o, "tenant", json_string(s.tenant));
		json_object_set_new(o, "template_owner", json_string(sbx_template_owner_name(s.tmpl_owner)));
	}
	if (o && s.pool)
		json_object_set_new(o, "pool", json_true()); /* a warm-pool member */
	if (o && s.from_pool) {
		json_object_set_new(o, "from_pool", json_true());
		json_object_set_new(o, "claim_ms", json_integer((json_int_t)s.claim_ms));
	}
	/* What its execs inherit (sbx-create -e, -w, the template's); a
	 * value that is a secret shows as "[secret:NAME]", never itself. */
	if (o && s.env.n)
		json_object_set_new(o, "env", sbx_env_show(&s.env));
	if (o && s.workdir[0])
		json_object_set_new(o, "workdir", json_string(s.workdir));
	if (o && s.user[0])
		json_object_set_new(o, "user", json_string(s.user));
	if (o)
		add_metrics(st, &s, o, now);
	return o;
}

/* One tab-separated line of o's values for keys (absent: "-"). */
static void print_row(json_t *o, const char *const *keys, size_t nkeys)
{
	for (size_t i = 0; i < nkeys; i++) {
		json_t *v = json_object_get(o, keys[i]);
		if (i)
			putchar('\t');
		if (json_is_integer(v))
			printf("%lld", (long long)json_integer_value(v));
		else if (json_is_real(v))
			printf("%.3f", json_real_value(v));
		else
			sbx_fputs_field(json_is_string(v) ? json_string_value(v) : "-", stdout);
	}
	putchar('\n');
}

static void print_text(json_t *o)
{
	print_row(o, cols, SBX_ARRAY_LEN(cols));
}

static const char *const xcols[] = { "exec", "state", "status", "reason", "wall_s", "started" };

/* --execs SESSION: the session's execs, oldest first. */
static int list_execs(struct sbx_state *st, const char *session, int json, int quiet, int headers)
{
	json_t *arr;
	struct sbx_err err = { 0 };
	if (sbx_exec_list(st, session, &arr, &err) < 0) {
		sbx_err_print("sbx-ps", &err, json);
		return err.code;
	}
	if (json) {
		json_dumpf(arr, stdout, JSON_INDENT(2));
		putchar('\n');
	} else {
		if (headers && !quiet)
			puts("EXEC\tSTATE\tSTATUS\tREASON\tWALL_S\tSTARTED\tCOMMAND\tKIND");
		size_t k;
		json_t *o;
		json_array_foreach(arr, k, o) {
			if (quiet) {
				puts(json_string_value(json_object_get(o, "exec")));
				continue;
			}
			for (size_t i = 0; i < SBX_ARRAY_LEN(xcols); i++) {
				json_t *v = json_object_get(o, xcols[i]);
				if (json_is_integer(v))
					printf("%lld\t", (long long)json_integer_value(v));
				else if (json_is_real(v))
					printf("%.3f\t", json_real_value(v));
				else {
					sbx_fputs_field(json_is_string(v) ? json_string_value(v) : "-", stdout);
					putchar('\t');
				}
			}
			json_t *req = json_object_get(o, "request");
			json_t *argv = json_object_get(req, "argv"), *a;
			size_t j;
			json_array_foreach(argv, j, a) {
				if (j)
					putchar(' ');
				sbx_fputs_field(json_string_value(a) ? json_string_value(a) : "", stdout);
			}
			if (!json_array_size(argv))
				putchar('-');
			/* Last, so the columns before it keep their places; "-"
			 * for records from before the kind was recorded. */
			const char *kind = json_string_value(json_object_get(req, "kind"));
			printf("\t%s\n", kind ? kind : "-");
		}
	}
	json_decref(arr);
	return 0;
}

static const char *const ncols[] = { "time", "proto", "verdict", "domain", "address", "port", "bytes_in",
				     "bytes_out", "reason" };

/* --net SESSION: every connection attempt and DNS query, oldest first. */
static int list_net(struct sbx_state *st, const char *session, int json, int headers)
{
	json_t *arr, *o;
	struct sbx_err err = { 0 };
	size_t k;
	if (sbx_netlog_read(st, session, &arr, &err) < 0) {
		sbx_err_print("sbx-ps", &err, json);
		return err.code;
	}
	if (json) {
		json_dumpf(arr, stdout, JSON_INDENT(2));
		putchar('\n');
	} else {
		if (headers)
			puts("TIME\tPROTO\tVERDICT\tDOMAIN\tADDRESS\tPORT\tBYTES_IN\tBYTES_OUT\tREASON");
		json_array_foreach(arr, k, o) {
			/* A query's address column: its first answer. */
			json_t *ans = json_object_get(o, "answers");
			if (json_array_size(ans) && !json_object_get(o, "address"))
				json_object_set(o, "address", json_array_get(ans, 0));
			print_row(o, ncols, SBX_ARRAY_LEN(ncols));
		}
	}
	json_decref(arr);
	return 0;
}

/* --capacity: what this host takes and has in use, for a scheduler. */
static int print_capacity(struct sbx_state *st, int json)
{
	struct sbx_capacity c;
	struct sbx_err err = { 0 };
	if (sbx_capacity_get(st, &c, &err) < 0) {
		sbx_err_print("sbx-ps", &err, json);
		return err.code;
	}
	json_t *o = json_pack("{s:i, s:{s:i, s:i}, s:{s:I, s:I}, s:{s:i, s:i}, s:{s:i, s:i}}", "schema", 1, "sessions",
			      "used", (int)c.sessions, "max", (int)c.max_sessions, "memory_mib", "used",
			      (json_int_t)c.memory_mib, "max", (json_int_t)c.max_memory_mib, "vcpus", "used", (int)c.vcpus,
			      "max", (int)c.max_vcpus, "starting", "used", (int)c.starting, "max", (int)c.max_starting);
	/* Of the sessions, warm-pool members: capacity a claim reuses. */
	json_object_set_new(o, "pooled", json_integer((json_int_t)c.pooled));
	if (json) {
		json_dumpf(o, stdout, JSON_COMPACT);
		putchar('\n');
	} else {
		printf("sessions\t%u\t%u\nmemory_mib\t%llu\t%llu\nvcpus\t%u\t%u\nstarting\t%u\t%u\n", c.sessions,
		       c.max_sessions, (unsigned long long)c.memory_mib, (unsigned long long)c.max_memory_mib, c.vcpus,
		       c.max_vcpus, c.starting, c.max_starting);
		printf("pooled\t%u\t-\n", c.pooled);
	}
	json_decref(o);
	return 0;
}

static const char *const wcols[] = { "workspace", "tenant", "state", "session", "size_bytes", "used_bytes",
				     "last_used", "idle_s", "retention_s" };

/* --workspaces: every workspace (of one tenant), attached or idle, with
 * what sbx-gc goes by: when it was last used and its retention. */
static int list_workspaces(struct sbx_state *st, const char *tenant, const char *want, int json, int quiet,
			   int headers, char **names, int nnames)
{
	/* Named ones: each must be among those the caller sees (for a
	 * tenant, its own), else it is not there (4); the rest are listed. */
	int missing = 0;
	for (int k = 0; k < nnames; k++) {
		struct sbx_err e = { 0 };
		if (sbx_workspace_check(names[k], &e) < 0) {
			sbx_err_print("sbx-ps", &e, json);
			return e.code;
		}
	}
	struct sbx_workspace_info *ws;
	size_t n;
	struct sbx_err err = { 0 };
	if (sbx_workspace_list(st, tenant, &ws, &n, &err) < 0) {
		sbx_err_print("sbx-ps", &err, json);
		return err.code;
	}
	json_t *all = json_array();
	uint64_t now = sbx_now_ns();
	for (size_t i = 0; i < n; i++) {
		const struct sbx_workspace_info *w = &ws[i];
		const char *state = w->in_use ? "attached" : "idle";
		if (want && strcmp(want, state))
			continue;
		int named = !nnames;
		for (int k = 0; k < nnames; k++)
			named |= !strcmp(names[k], w->name);
		if (!named)
			continue;
		char created[40], used[40];
		sbx_fmt_time(w->created_ns, created, sizeof created);
		sbx_fmt_time(w->last_used_ns, used, sizeof used);
		uint64_t idle = !w->in_use && now > w->last_used_ns ? (now - w->last_used_ns) / 1000000000u : 0;
		json_t *o = json_pack("{s:i, s:s, s:s, s:s, s:s?, s:I, s:I, s:s?, s:s, s:I, s:I}", "schema", 1, "workspace",
				      w->name, "tenant", w->tenant, "state", state, "session", w->session[0] ? w->session : NULL,
				      "size_bytes", (json_int_t)w->size, "used_bytes", (json_int_t)w->used, "created",
				      w->created_ns ? created : NULL, "last_used", used, "idle_s", (json_int_t)idle,
				      "retention_s", (json_int_t)(w->retention_ms / 1000));
		if (o && !w->in_use) {
			uint64_t left = w->retention_ms / 1000 > idle ? w->retention_ms / 1000 - idle : 0;
			json_object_set_new(o, "expires_in_s", json_integer((json_int_t)left));
		}
		json_array_append_new(all, o);
	}
	for (int k = 0; k < nnames; k++) {
		int seen = 0;
		for (size_t i = 0; i < n; i++)
			seen |= !strcmp(ws[i].name, names[k]);
		if (!seen) {
			struct sbx_err e = { .code = SBX_EXIT_NOENT };
			snprintf(e.msg, sizeof e.msg, "no such workspace: %s", names[k]);
			sbx_err_print("sbx-ps", &e, json);
			missing = 1;
		}
	}
	free(ws);
	if (json) {
		json_dumpf(all, stdout, JSON_INDENT(2));
		putchar('\n');
	} else {
		if (headers && !quiet)
			puts("WORKSPACE\tTENANT\tSTATE\tSESSION\tSIZE\tUSED\tLAST_USED\tIDLE_S\tRETENTION_S");
		size_t k;
		json_t *o;
		json_array_foreach(all, k, o) {
			if (quiet)
				puts(json_string_value(json_object_get(o, "workspace")));
			else
				print_row(o, wcols, SBX_ARRAY_LEN(wcols));
		}
	}
	int rc = missing ? SBX_EXIT_NOENT : (want || tenant) && json_array_size(all) == 0 ? SBX_EXIT_FALSE : 0;
	json_decref(all);
	return rc;
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "all", no_argument, NULL, 'a' },
		{ "capacity", no_argument, NULL, 'C' },
		{ "execs", required_argument, NULL, 'x' },
		{ "help", no_argument, NULL, 'h' },
		{ "json", no_argument, NULL, 'j' },
		{ "net", required_argument, NULL, 'N' },
		{ "no-headers", no_argument, NULL, 'H' },
		{ "pool", no_argument, NULL, 'o' },
		{ "prometheus", no_argument, NULL, 'P' },
		{ "quiet", no_argument, NULL, 'q' },
		{ "state", required_argument, NULL, 's' },
		{ "tenant", required_argument, NULL, 'T' },
		{ "workspaces", no_argument, NULL, 'w' },
		{ NULL, 0, NULL, 0 },
	};
	int json = 0, quiet = 0, headers = 1, prom = 0, capacity = 0, workspaces = 0, c;
	int with_pool = 0, pool = 0; /* warm-pool members: hidden, shown too, shown alone */
	const char *want = NULL, *execs_of = NULL, *tenant = NULL, *net_of = NULL;
	while ((c = getopt_long(argc, argv, "Hhq", opts, NULL)) != -1) {
		switch (c) {
		case 'a': with_pool = 1; break;
		case 'o': pool = 1; break;
		case 'H': headers = 0; break;
		case 'P': prom = 1; break;
		case 'C': capacity = 1; break;
		case 'h': puts("usage: sbx-ps [-q] [--json|--prometheus] [--no-headers] [--all|--pool] [--state=STATE] [--tenant=TENANT] [SESSION...]\n       sbx-ps --execs SESSION [-q] [--json]\n       sbx-ps --net SESSION [--json] [--no-headers]\n       sbx-ps --capacity [--json]\n       sbx-ps --workspaces [-q] [--json] [--no-headers] [--state=attached|idle] [--tenant=TENANT] [NAME...]"); return 0;
		case 'j': json = 1; break;
		case 'N': net_of = optarg; break;
		case 'q': quiet = 1; break;
		case 's': want = optarg; break;
		case 'T': tenant = optarg; break;
		case 'w': workspaces = 1; break;
		case 'x': execs_of = optarg; break;
		default: fputs("usage: sbx-ps [-q] [--json|--prometheus] [--no-headers] [--all|--pool] [--state=STATE] [--tenant=TENANT] [SESSION...]\n       sbx-ps --execs SESSION [-q] [--json]\n       sbx-ps --net SESSION [--json] [--no-headers]\n       sbx-ps --capacity [--json]\n       sbx-ps --workspaces [-q] [--json] [--no-headers] [--state=attached|idle] [--tenant=TENANT] [NAME...]\n", stderr); return 2;
		}
	}
	struct sbx_state st;
	struct sbx_err err = { 0 };
	/* --tenant (or SBX_TENANT) scopes every view: another tenant's
	 * sessions, execs, connections and workspaces are not there. */
	if (sbx_state_open(&st, &err) < 0 || sbx_state_scope(&st, tenant, &err) < 0) {
		sbx_err_print("sbx-ps", &err, json);
		return err.code;
	}
	tenant = sbx_state_tenant(&st);
	if (execs_of)
		return list_execs(&st, execs_of, json, quiet, headers);
	if (net_of)
		return list_net(&st, net_of, json, headers);
	if (capacity)
		return print_capacity(&st, json);
	if (workspaces)
		return list_workspaces(&st, tenant, want, json, quiet, headers, argv + optind, argc - optind);
	char **ids;
	size_t n;
	int named = optind < argc;
	if (named) {
		n = (size_t)(argc - optind);
		ids = calloc(n + 1, sizeof *ids);
		for (size_t i = 0; ids && i < n; i++) {
			if (sbx_id_check(argv[optind + (int)i], "session", &err) < 0) {
				sbx_err_print("sbx-ps", &err, json);
				return err.code;
			}
			ids[i] = strdup(argv[optind + (int)i]);
		}
	} else if (sbx_session_list(&st, &ids, &n, &err) < 0) {
		sbx_err_print("sbx-ps", &err, json);
		return err.code;
	}
	json_t *all = json_array();
	int rc = 0;
	for (size_t i = 0; i < n; i++) {
		if (named && (faccessat(st.sessions_fd, ids[i], F_OK, AT_SYMLINK_NOFOLLOW) < 0 ||
			      sbx_session_visible(&st, ids[i], NULL) < 0)) {
			struct sbx_err e = { .code = SBX_EXIT_NOENT };
			snprintf(e.msg, sizeof e.msg, "no such session: %s", ids[i]);
			snprintf(e.session, sizeof e.session, "%s", ids[i]);
			sbx_err_print("sbx-ps", &e, json);
			rc = SBX_EXIT_NOENT;
			continue;
		}
		json_t *o = session_json(&st, ids[i]);
		/* Pool members are the host's, not anyone's sessions: shown when
		 * named, or asked for. */
		int member = o && json_is_true(json_object_get(o, "pool"));
		if (o && (named || (pool ? member : with_pool || !member)) &&
		    (!want || !strcmp(want, json_string_value(json_object_get(o, "state")))) &&
		    (!tenant || !strcmp(tenant, json_string_value(json_object_get(o, "tenant")) ?: "")))
			json_array_append(all, o);
		json_decref(o);
	}
	if (prom) {
		print_prometheus(all);
	} else if (json) {
		json_dumpf(all, stdout, JSON_INDENT(2));
		putchar('\n');
	} else {
		if (headers && !quiet)
			puts("ID\tSTATE\tACCEL\tVCPUS\tMEM_MIB\tTEMPLATE\tEXECS\tAGE_S\tCPU_S\tMEM_PEAK\tDISK_WRITTEN\tTTL_LEFT_S\tTENANT"
			     "\tTEMPLATE_OWNER");
		size_t k;
		json_t *o;
		json_array_foreach(all, k, o) {
			if (quiet)
				puts(json_string_value(json_object_get(o, "id")));
			else
				print_text(o);
		}
	}
	if (!rc && (want || tenant) && json_array_size(all) == 0)
		rc = SBX_EXIT_FALSE; /* a filter that matched nothing */
	json_decref(all);
	for (size_t i = 0; i < n; i++)
		free(ids[i]);
	free(ids);
	return rc;
}
