/* sbx-ps: list sessions.  Text and JSON come from one object per session,
 * so the two cannot drift. */
#include <fcntl.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include "cli.h"
#include "capacity.h"
#include "netlog.h"
#include "execrec.h"
#include "session.h"
#include "util.h"
#include "view.h"
#include "workspace.h"

static const char usage[] =
	"usage: sbx-ps [-q] [--json|--prometheus] [--no-headers] [--all|--pool] [--state=STATE] [--tenant=TENANT] "
	"[SESSION...]\n"
	"       sbx-ps --execs SESSION [-q] [--json]\n"
	"       sbx-ps --net SESSION [--json] [--no-headers]\n"
	"       sbx-ps --packages SESSION [--json] [--no-headers]\n"
	"       sbx-ps --capacity [--json]\n"
	"       sbx-ps --workspaces [-q] [--json] [--no-headers] [--state=attached|idle] [--tenant=TENANT] [NAME...]\n";

/* The session's host processes, MONITOR/VMM/PROXY, "-" for one not
 * running (or never there). */
static void show_pids(const struct sbx_cli_table *t, json_t *row, FILE *f)
{
	static const char *const which[] = { "monitor", "vmm", "proxy" };
	json_t *p = json_object_get(row, "pids");
	for (size_t i = 0; i < 3; i++) {
		json_t *v = json_object_get(p, which[i]);
		if (json_is_integer(v))
			fprintf(f, "%s%lld", i ? "/" : "", (long long)json_integer_value(v));
		else
			fprintf(f, "%s-", i ? "/" : "");
	}
	(void)t;
}

static const struct sbx_cli_col cols[] = {
	{ "id", "ID", NULL },
	{ "state", "STATE", NULL },
	{ "accel", "ACCEL", NULL },
	{ "vcpus", "VCPUS", NULL },
	{ "memory_mib", "MEM_MIB", NULL },
	{ "template", "TEMPLATE", NULL },
	{ "execs", "EXECS", NULL },
	{ "age_s", "AGE_S", NULL },
	{ "cpu_s", "CPU_S", NULL },
	{ "memory_peak_bytes", "MEM_PEAK", NULL },
	{ "disk_written_bytes", "DISK_WRITTEN", NULL },
	{ "ttl_left_s", "TTL_LEFT_S", NULL },
	{ "tenant", "TENANT", NULL },
	{ "template_owner", "TEMPLATE_OWNER", NULL },
	{ "net", "NET", NULL },
	{ "pids", "PIDS", show_pids }, /* last: the columns before it keep their places */
};
static const struct sbx_cli_table sessions_table = { SBX_CLI_COLS(cols), .key = { "id", NULL, NULL } };

/* Prometheus text exposition, for node_exporter's textfile collector. */
static void print_prometheus(json_t *all)
{
	static const struct {
		const char *key, *name, *type, *help;
	} m[] = {
		{ "cpu_s", "sbx_session_cpu_seconds_total", "counter", "Host CPU time used by the session's VMM." },
		{ "memory_peak_bytes", "sbx_session_memory_peak_bytes", "gauge", "Peak memory of the session's VMM." },
		{ "disk_written_bytes", "sbx_session_disk_written_bytes", "gauge",
		  "Bytes allocated by the session's disk overlay." },
		{ "vcpus", "sbx_session_vcpus", "gauge", "vCPUs allocated." },
		{ "memory_mib", "sbx_session_memory_mib", "gauge", "Guest memory allocated, MiB." },
		{ "execs", "sbx_session_execs", "gauge", "Execs run in the session." },
		{ "age_s", "sbx_session_age_seconds", "gauge", "Seconds since the session was created." },
		{ "vcpu_seconds", "sbx_session_vcpu_seconds_total", "counter", "vCPU-seconds allocated." },
		{ "gib_seconds", "sbx_session_memory_gib_seconds_total", "counter",
		  "GiB-seconds of memory allocated." },
		{ "ttl_left_s", "sbx_session_ttl_left_seconds", "gauge", "Seconds until the session's TTL expires." },
		{ "running_s", "sbx_session_running_seconds_total", "counter", "Seconds the session's VM ran." },
		{ "paused_s", "sbx_session_paused_seconds_total", "counter",
		  "Seconds the session's VM was paused (RAM kept)." },
		{ "suspended_s", "sbx_session_suspended_seconds_total", "counter",
		  "Seconds the session was suspended to disk (no RAM, no CPU)." },
		{ "suspends", "sbx_session_suspends_total", "counter", "Times the session was suspended to disk." },
	};
	for (size_t i = 0; i < SBX_ARRAY_LEN(m); i++) {
		printf("# HELP %s %s\n# TYPE %s %s\n", m[i].name, m[i].help, m[i].name, m[i].type);
		size_t k;
		json_t *o;
		json_array_foreach (all, k, o) {
			json_t *v = json_object_get(o, m[i].key);
			if (!json_is_number(v))
				continue;
			/* IDs, states and template names are from a fixed character set:
			 * nothing to escape in a label value. */
			printf("%s{session=\"%s\",state=\"%s\",accel=\"%s\",template=\"%s\"} %.6g\n", m[i].name,
			       json_string_value(json_object_get(o, "id")),
			       json_string_value(json_object_get(o, "state")),
			       json_string_value(json_object_get(o, "accel"))
				       ? json_string_value(json_object_get(o, "accel"))
				       : "",
			       json_string_value(json_object_get(o, "template"))
				       ? json_string_value(json_object_get(o, "template"))
				       : "",
			       json_number_value(v));
		}
	}
}

/* The command line, its words joined by spaces ("-" for none). */
static void show_argv(const struct sbx_cli_table *t, json_t *row, FILE *f)
{
	json_t *argv = json_object_get(json_object_get(row, "request"), "argv"), *a;
	size_t j;
	json_array_foreach (argv, j, a) {
		if (j)
			putc(' ', f);
		sbx_cli_put_string(t, json_string_value(a) ? json_string_value(a) : "", f);
	}
	if (!json_array_size(argv))
		putc('-', f);
}

static void show_kind(const struct sbx_cli_table *t, json_t *row, FILE *f)
{
	sbx_cli_put_value(t, json_object_get(json_object_get(row, "request"), "kind"), f);
}

static const struct sbx_cli_col xcols[] = {
	{ "exec", "EXEC", NULL },
	{ "state", "STATE", NULL },
	{ "status", "STATUS", NULL },
	{ "reason", "REASON", NULL },
	{ "wall_s", "WALL_S", NULL },
	{ "started", "STARTED", NULL },
	{ "request", "COMMAND", show_argv },
	/* Last, so the columns before it keep their places; "-" for records
	 * from before the kind was recorded. */
	{ "request", "KIND", show_kind },
};
static const struct sbx_cli_table execs_table = { SBX_CLI_COLS(xcols), .key = { "exec", NULL, NULL } };

/* --execs SESSION: the session's execs, oldest first. */
static int list_execs(struct sbx_state *st, const char *session, int json, int quiet, int headers)
{
	json_t *arr;
	struct sbx_err err = { 0 };
	if (sbx_exec_list(st, session, &arr, &err) < 0) {
		sbx_err_print("sbx-ps", &err, json);
		return err.code;
	}
	sbx_cli_print_table(&execs_table, arr, sbx_cli_mode_of(json, quiet), headers);
	json_decref(arr);
	return 0;
}

/* A query's address column: its first answer. */
static void show_address(const struct sbx_cli_table *t, json_t *row, FILE *f)
{
	json_t *v = json_object_get(row, "address");
	sbx_cli_put_value(t, v ? v : json_array_get(json_object_get(row, "answers"), 0), f);
}

static const struct sbx_cli_col ncols[] = {
	{ "time", "TIME", NULL },
	{ "proto", "PROTO", NULL },
	{ "verdict", "VERDICT", NULL },
	{ "domain", "DOMAIN", NULL },
	{ "address", "ADDRESS", show_address },
	{ "port", "PORT", NULL },
	{ "bytes_in", "BYTES_IN", NULL },
	{ "bytes_out", "BYTES_OUT", NULL },
	{ "reason", "REASON", NULL },
};
static const struct sbx_cli_table net_table = { SBX_CLI_COLS(ncols) };

/* --net SESSION: every connection attempt and DNS query, oldest first
 * (no -q: a connection has no ID). */
static int list_net(struct sbx_state *st, const char *session, int json, int headers)
{
	json_t *arr;
	struct sbx_err err = { 0 };
	if (sbx_netlog_read(st, session, &arr, &err) < 0) {
		sbx_err_print("sbx-ps", &err, json);
		return err.code;
	}
	sbx_cli_print_table(&net_table, arr, sbx_cli_mode_of(json, 0), headers);
	json_decref(arr);
	return 0;
}

/* The execs that were running when a package was asked for, by comma
 * ("-" for none). */
static void show_execs(const struct sbx_cli_table *t, json_t *row, FILE *f)
{
	json_t *a = json_object_get(row, "execs"), *v;
	size_t i;
	json_array_foreach (a, i, v)
		fprintf(f, "%s%s", i ? "," : "", json_string_value(v));
	if (!json_array_size(a))
		putc('-', f);
	(void)t;
}

static const struct sbx_cli_col pcols[] = {
	{ "time", "TIME", NULL },       { "execs", "EXECS", show_execs }, { "registry", "REGISTRY", NULL },
	{ "package", "PACKAGE", NULL }, { "version", "VERSION", NULL },   { "verdict", "VERDICT", NULL },
	{ "cache", "CACHE", NULL },     { "size", "SIZE", NULL },         { "reason", "REASON", NULL },
};
static const struct sbx_cli_table packages_table = { SBX_CLI_COLS(pcols) };

/* --packages SESSION: what the session's package cache served (the files
 * installed) and refused, oldest first. */
static int list_packages(struct sbx_state *st, const char *session, int json, int headers)
{
	json_t *arr;
	struct sbx_err err = { 0 };
	if (sbx_pkglog_read(st, session, &arr, &err) < 0) {
		sbx_err_print("sbx-ps", &err, json);
		return err.code;
	}
	sbx_cli_print_table(&packages_table, arr, sbx_cli_mode_of(json, 0), headers);
	json_decref(arr);
	return 0;
}

/* --capacity's text: a line per resource, NAME USED MAX, no header. */
static const struct sbx_cli_col capcols[] = { { "name", NULL, NULL }, { "used", NULL, NULL }, { "max", NULL, NULL } };
static const struct sbx_cli_table capacity_table = { SBX_CLI_COLS(capcols) };

/* --capacity: what this host takes and has in use, for a scheduler. */
static int print_capacity(struct sbx_state *st, int json)
{
	struct sbx_capacity c;
	struct sbx_err err = { 0 };
	if (sbx_capacity_get(st, &c, &err) < 0) {
		sbx_err_print("sbx-ps", &err, json);
		return err.code;
	}
	json_t *o = sbx_capacity_view(&c);
	if (json) {
		json_dumpf(o, stdout, JSON_COMPACT);
		putchar('\n');
		json_decref(o);
		return 0;
	}
	json_t *rows = json_array();
	for (size_t i = 0; i < SBX_ARRAY_LEN(sbx_capacity_view_keys); i++) {
		json_t *r = json_deep_copy(json_object_get(o, sbx_capacity_view_keys[i]));
		json_object_set_new(r, "name", json_string(sbx_capacity_view_keys[i]));
		json_array_append_new(rows, r);
	}
	json_array_append_new(rows, json_pack("{s:s, s:O}", "name", "pooled", "used", json_object_get(o, "pooled")));
	sbx_cli_print_table(&capacity_table, rows, SBX_CLI_TEXT, 0);
	json_decref(rows);
	json_decref(o);
	return 0;
}

static const struct sbx_cli_col wcols[] = {
	{ "workspace", "WORKSPACE", NULL }, { "tenant", "TENANT", NULL },   { "state", "STATE", NULL },
	{ "session", "SESSION", NULL },     { "size_bytes", "SIZE", NULL }, { "used_bytes", "USED", NULL },
	{ "last_used", "LAST_USED", NULL }, { "idle_s", "IDLE_S", NULL },   { "retention_s", "RETENTION_S", NULL },
};
static const struct sbx_cli_table workspaces_table = { SBX_CLI_COLS(wcols), .key = { "workspace", NULL, NULL } };

/* --workspaces: every workspace (of one tenant), attached or idle, with
 * what sbx-gc goes by: when it was last used and its retention. */
static int list_workspaces(struct sbx_state *st, const char *tenant, const char *want, int json, int quiet, int headers,
			   char **names, int nnames)
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
		json_array_append_new(all, sbx_workspace_view(w, now));
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
	sbx_cli_print_table(&workspaces_table, all, sbx_cli_mode_of(json, quiet), headers);
	int rc = missing ? SBX_EXIT_NOENT : (want || tenant) && json_array_size(all) == 0 ? SBX_EXIT_FALSE : 0;
	json_decref(all);
	return rc;
}

int main(int argc, char **argv)
{
	int via_serve;
	if (sbx_cli_remote(argc, argv, &via_serve)) /* a user other than root: through sbx-serve */
		return via_serve;
	static const struct option opts[] = {
		{ "all", no_argument, NULL, 'a' },
		{ "capacity", no_argument, NULL, 'C' },
		{ "execs", required_argument, NULL, 'x' },
		{ "help", no_argument, NULL, 'h' },
		{ "json", no_argument, NULL, 'j' },
		{ "net", required_argument, NULL, 'N' },
		{ "no-headers", no_argument, NULL, 'H' },
		{ "packages", required_argument, NULL, 'K' },
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
	const char *want = NULL, *execs_of = NULL, *tenant = NULL, *net_of = NULL, *packages_of = NULL;
	while ((c = getopt_long(argc, argv, "Hhq", opts, NULL)) != -1) {
		switch (c) {
		case 'a': with_pool = 1; break;
		case 'o': pool = 1; break;
		case 'H': headers = 0; break;
		case 'P': prom = 1; break;
		case 'C': capacity = 1; break;
		case 'h': return sbx_cli_usage(usage, 1);
		case 'j': json = 1; break;
		case 'N': net_of = optarg; break;
		case 'K': packages_of = optarg; break;
		case 'q': quiet = 1; break;
		case 's': want = optarg; break;
		case 'T': tenant = optarg; break;
		case 'w': workspaces = 1; break;
		case 'x': execs_of = optarg; break;
		default: return sbx_cli_usage(usage, 0);
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
	if (packages_of)
		return list_packages(&st, packages_of, json, headers);
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
		json_t *o = sbx_session_view(&st, ids[i]);
		/* Pool members are the host's, not anyone's sessions: shown when
		 * named, or asked for. */
		int member = o && json_is_true(json_object_get(o, "pool"));
		if (o && (named || (pool ? member : with_pool || !member)) &&
		    (!want || !strcmp(want, json_string_value(json_object_get(o, "state")))) &&
		    (!tenant || !strcmp(tenant, json_string_value(json_object_get(o, "tenant")) ?: "")))
			json_array_append(all, o);
		json_decref(o);
	}
	if (prom)
		print_prometheus(all);
	else
		sbx_cli_print_table(&sessions_table, all, sbx_cli_mode_of(json, quiet), headers);
	if (!rc && (want || tenant) && json_array_size(all) == 0)
		rc = SBX_EXIT_FALSE; /* a filter that matched nothing */
	json_decref(all);
	for (size_t i = 0; i < n; i++)
		free(ids[i]);
	free(ids);
	return rc;
}
