/* sbx-snapshot: pause, suspend to disk and resume sessions; save them as snapshots (or
 * templates), list and remove snapshots. */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "cli.h"
#include "policy.h"
#include "proto.h"
#include "snapshot.h"
#include "template.h"
#include "util.h"
#include "vmctl.h"

#define PROG "sbx-snapshot"

static const char usage[] =
	"usage: sbx-snapshot pause [--tenant TENANT] [--json] SESSION\n"
	"       sbx-snapshot resume [--tenant TENANT] [--json] SESSION\n"
	"       sbx-snapshot suspend [--tenant TENANT] [--json] SESSION\n"
	"       sbx-snapshot save [--tenant TENANT] [--template] [--json] SESSION NAME[@VERSION]\n"
	"       sbx-snapshot fork [--tenant TENANT] [-n N] [-p POLICY] [--json] SESSION\n"
	"       sbx-snapshot list [--tenant TENANT] [-q] [--json] [--no-headers] [NAME[@VERSION]]\n"
	"       sbx-snapshot rm [--tenant TENANT] [--force] [--json] NAME[@VERSION]...\n"
	"       sbx-snapshot template list [--tenant TENANT] [-q] [--json] [--no-headers] [[OWNER/]NAME[@VERSION]]\n"
	"       sbx-snapshot template rm [--tenant TENANT] [--json] [OWNER/]NAME[@VERSION]...\n";

struct opts {
	const char *tenant, *count, *policy;
	int json, quiet, headers, force, to_template;
};

static void print_json(json_t *o)
{
	json_dumpf(o, stdout, JSON_COMPACT);
	putchar('\n');
}

/* pause, resume, suspend: one VMCTL each (resume wakes a paused or a
 * suspended session). */
static int pause_resume(struct sbx_state *st, const struct opts *o, unsigned op, char **args, int n,
			struct sbx_err *err)
{
	if (n != 1)
		return sbx_cli_fail(PROG, SBX_EXIT_USAGE, o->json, "%s takes one SESSION",
				    op == SBX_VMCTL_PAUSE     ? "pause"
				    : op == SBX_VMCTL_SUSPEND ? "suspend"
							      : "resume");
	char state[16] = "";
	if (sbx_session_vmctl(st, args[0], o->tenant, op, NULL, state, sizeof state, err) < 0)
		return -1;
	if (o->json) {
		json_t *j = json_pack("{s:i, s:s, s:s}", "schema", 1, "session", args[0], "state", state);
		print_json(j);
		json_decref(j);
	}
	return 0;
}

static int save(struct sbx_state *st, const struct opts *o, char **args, int n, struct sbx_err *err)
{
	if (n != 2)
		return sbx_cli_fail(PROG, SBX_EXIT_USAGE, o->json, "save takes SESSION NAME[@VERSION]");
	struct sbx_snapshot_save_opts so = { .session = args[0],
					     .tenant = o->tenant,
					     .spec = args[1],
					     .to_template = o->to_template,
					     .progress_fd = 2 };
	struct sbx_snapshot s;
	if (sbx_snapshot_save(st, &so, &s, err) < 0)
		return -1;
	if (o->json) {
		json_t *j = json_pack("{s:i, s:s, s:s, s:s, s:s, s:b, s:I, s:s, s:s}", "schema", 1, "snapshot", s.ref,
				      "name", s.name, "version", s.version, "tenant", s.tenant, "template",
				      s.is_template, "size_bytes", (json_int_t)s.size, "content_sha256",
				      s.content_sha256, "session", s.source);
		print_json(j);
		json_decref(j);
	} else {
		printf("%s@%s\n", s.name, s.version); /* what -s and -t take */
	}
	return 0;
}

/* fork: the new sessions' IDs, one a line, as sbx-create prints one. */
static int fork_session(struct sbx_state *st, const struct opts *o, char **args, int n, struct sbx_err *err)
{
	if (n != 1)
		return sbx_cli_fail(PROG, SBX_EXIT_USAGE, o->json, "fork takes one SESSION");
	struct sbx_snapshot_fork_opts fo = { .session = args[0], .tenant = o->tenant, .n = 1 };
	if (o->count) {
		char *end;
		errno = 0;
		unsigned long v = strtoul(o->count, &end, 10);
		if (!*o->count || *end || o->count[0] == '-' || errno)
			return sbx_cli_fail(PROG, SBX_EXIT_USAGE, o->json, "-n takes a number of copies, not '%s'",
					    o->count);
		fo.n = v > SBX_FORK_MAX ? SBX_FORK_MAX + 1 : (unsigned)v;
	}
	static struct sbx_policy pol; /* large */
	if (o->policy) {
		if (sbx_policy_load(o->policy, &pol, err) < 0)
			return -1;
		fo.policy = &pol;
	}
	char(*ids)[SBX_ID_MAX + 1] = calloc(SBX_FORK_MAX, sizeof *ids);
	uint64_t ms = 0;
	if (!ids)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, ENOMEM, "out of memory");
	int rc = sbx_snapshot_fork(st, &fo, ids, &ms, err);
	if (rc == 0 && o->json) {
		json_t *a = json_array();
		for (unsigned i = 0; i < fo.n; i++)
			json_array_append_new(a, json_string(ids[i]));
		json_t *j = json_pack("{s:i, s:s, s:o, s:I}", "schema", 1, "session", args[0], "sessions", a, "fork_ms",
				      (json_int_t)ms);
		print_json(j);
		json_decref(j);
	} else if (rc == 0) {
		for (unsigned i = 0; i < fo.n; i++)
			printf("%s\n", ids[i]);
	}
	free(ids);
	return rc;
}

/* What -s takes: NAME@VERSION. */
static void show_name_version(const struct sbx_cli_table *t, json_t *row, FILE *f)
{
	fprintf(f, "%s@%s", json_string_value(json_object_get(row, "name")),
		json_string_value(json_object_get(row, "version")));
}

static const struct sbx_cli_col cols[] = {
	{ "name", "NAME", NULL },       { "version", "VERSION", NULL },    { "created", "CREATED", NULL },
	{ "size_bytes", "SIZE", NULL }, { "template", "TEMPLATE", NULL },  { "session", "SESSION", NULL },
	{ "vcpus", "VCPUS", NULL },     { "memory_mib", "MEM_MIB", NULL }, { "in_use", "IN_USE", NULL },
	{ "tenant", "TENANT", NULL },
};
static const struct sbx_cli_table snapshots_table = { SBX_CLI_COLS(cols), .key = { NULL, NULL, show_name_version },
						      .flags = SBX_CLI_DASH_EMPTY };

static int list(struct sbx_state *st, const struct opts *o, char **args, int n, struct sbx_err *err)
{
	json_t *all;
	if (n > 1)
		return sbx_cli_fail(PROG, SBX_EXIT_USAGE, o->json, "list takes at most one NAME");
	if (sbx_snapshot_list(st, o->tenant, n ? args[0] : NULL, &all, err) < 0)
		return -1;
	sbx_cli_print_table(&snapshots_table, all, sbx_cli_mode_of(o->json, o->quiet), o->headers);
	json_decref(all);
	return 0;
}

static int rm(struct sbx_state *st, const struct opts *o, char **args, int n, struct sbx_err *err)
{
	if (n < 1)
		return sbx_cli_fail(PROG, SBX_EXIT_USAGE, o->json, "rm takes NAME[@VERSION]...");
	json_t *all = json_array();
	int rc = 0;
	for (int i = 0; i < n; i++) {
		json_t *removed = NULL;
		if (sbx_snapshot_rm(st, o->tenant, args[i], o->force, &removed, err) < 0) {
			rc = -1;
			break;
		}
		json_array_extend(all, removed);
		json_decref(removed);
	}
	if (o->json && rc == 0)
		sbx_cli_print_removed(all);
	json_decref(all);
	return rc;
}

/* sbx-snapshot template list|rm: the templates the caller sees. */
static int templates(struct sbx_state *st, const struct opts *o, char **args, int n, struct sbx_err *err)
{
	if (n < 1 || (strcmp(args[0], "list") && strcmp(args[0], "ls") && strcmp(args[0], "rm")))
		return sbx_cli_fail(PROG, SBX_EXIT_USAGE, o->json, "template takes list or rm");
	if (!strcmp(args[0], "rm")) {
		if (n < 2)
			return sbx_cli_fail(PROG, SBX_EXIT_USAGE, o->json,
					    "template rm takes [OWNER/]NAME[@VERSION]...");
		json_t *all;
		int rc = sbx_template_rm_list(st, o->tenant, args + 1, n - 1, &all, err);
		if (o->json && rc == 0)
			sbx_cli_print_removed(all);
		json_decref(all);
		return rc;
	}
	if (n > 2)
		return sbx_cli_fail(PROG, SBX_EXIT_USAGE, o->json, "template list takes at most one NAME");
	json_t *all;
	if (sbx_template_list(st, o->tenant, n > 1 ? args[1] : NULL, &all, err) < 0)
		return -1;
	sbx_cli_print_table(&sbx_cli_template_table, all, sbx_cli_mode_of(o->json, o->quiet), o->headers);
	json_decref(all);
	return 0;
}

int main(int argc, char **argv)
{
	int via_serve;
	if (sbx_cli_remote(argc, argv, &via_serve)) /* a user other than root: through sbx-serve */
		return via_serve;
	static const struct option longopts[] = {
		{ "force", no_argument, NULL, 'f' },        { "help", no_argument, NULL, 'h' },
		{ "json", no_argument, NULL, 'j' },         { "number", required_argument, NULL, 'n' },
		{ "no-headers", no_argument, NULL, 'H' },   { "policy", required_argument, NULL, 'p' },
		{ "quiet", no_argument, NULL, 'q' },        { "template", no_argument, NULL, 'T' },
		{ "tenant", required_argument, NULL, 't' }, { NULL, 0, NULL, 0 },
	};
	struct opts o = { .headers = 1 };
	int c;
	if (argc < 2 || argv[1][0] == '-') {
		int help = argc >= 2 && (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help"));
		return sbx_cli_usage(usage, help);
	}
	const char *verb = argv[1];
	optind = 2;
	while ((c = getopt_long(argc, argv, "fhn:p:q", longopts, NULL)) != -1) {
		switch (c) {
		case 'f': o.force = 1; break;
		case 'h': return sbx_cli_usage(usage, 1);
		case 'H': o.headers = 0; break;
		case 'j': o.json = 1; break;
		case 'n': o.count = optarg; break;
		case 'p': o.policy = optarg; break;
		case 'q': o.quiet = 1; break;
		case 'T': o.to_template = 1; break;
		case 't': o.tenant = optarg; break;
		default: return sbx_cli_usage(usage, 0);
		}
	}
	enum { V_PAUSE, V_RESUME, V_SUSPEND, V_SAVE, V_FORK, V_LIST, V_RM, V_TEMPLATE };
	static const struct sbx_cli_verb verbs[] = {
		{ "pause", V_PAUSE },       { "resume", V_RESUME },      { "suspend", V_SUSPEND }, { "save", V_SAVE },
		{ "fork", V_FORK },         { "list", V_LIST },          { "ls", V_LIST },         { "rm", V_RM },
		{ "template", V_TEMPLATE }, { "templates", V_TEMPLATE },
	};
	const struct sbx_cli_verb *v = sbx_cli_verb_find(PROG, verbs, SBX_ARRAY_LEN(verbs), verb, o.json);
	if (!v)
		return SBX_EXIT_USAGE;
	if ((o.count || o.policy) && v->op != V_FORK)
		return sbx_cli_fail(PROG, SBX_EXIT_USAGE, o.json, "-n and -p are fork's");
	char **args = argv + optind;
	int n = argc - optind, rc;
	struct sbx_state st;
	struct sbx_err err = { 0 };
	/* --tenant (or SBX_TENANT): another tenant's sessions, snapshots and
	 * templates are not there for any subcommand. */
	if (sbx_state_open(&st, &err) < 0 || sbx_state_scope(&st, o.tenant, &err) < 0) {
		sbx_err_print(PROG, &err, o.json);
		return err.code;
	}
	o.tenant = sbx_state_tenant(&st);
	switch (v->op) {
	case V_PAUSE: rc = pause_resume(&st, &o, SBX_VMCTL_PAUSE, args, n, &err); break;
	case V_RESUME: rc = pause_resume(&st, &o, SBX_VMCTL_RESUME, args, n, &err); break;
	case V_SUSPEND: rc = pause_resume(&st, &o, SBX_VMCTL_SUSPEND, args, n, &err); break;
	case V_SAVE: rc = save(&st, &o, args, n, &err); break;
	case V_FORK: rc = fork_session(&st, &o, args, n, &err); break;
	case V_LIST: rc = list(&st, &o, args, n, &err); break;
	case V_RM: rc = rm(&st, &o, args, n, &err); break;
	default: rc = templates(&st, &o, args, n, &err); break;
	}
	return sbx_cli_verb_done(PROG, rc, &err, o.json);
}
