/* sbx-template: build templates from specs, import root trees, list,
 * inspect, remove and prune them. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include "cli.h"
#include "template.h"
#include "tmplbuild.h"
#include "util.h"

#define PROG "sbx-template"

static const char usage_text[] =
	"usage: sbx-template build [--tenant TENANT] [--json] NAME -f SPEC\n"
	"       sbx-template import [--tenant TENANT] [--json] NAME FILE\n"
	"       sbx-template list [--tenant TENANT] [-q] [--json] [--no-headers] [[OWNER/]NAME[@VERSION]]\n"
	"       sbx-template inspect [--tenant TENANT] [--json] [OWNER/]NAME[@VERSION]\n"
	"       sbx-template rm [--tenant TENANT] [--json] [OWNER/]NAME[@VERSION]...\n"
	"       sbx-template prune [--tenant TENANT] [--json] [--keep N]\n";

struct opts {
	const char *tenant, *spec;
	int json, quiet, headers;
	unsigned keep;
};

static void print_json(json_t *o)
{
	json_dumpf(o, stdout, JSON_COMPACT);
	putchar('\n');
}

static void print_built(const struct opts *o, const struct sbx_tmplbuild_result *r)
{
	if (!o->json) {
		printf("%s@%s\n", r->name, r->version); /* what -t takes */
		return;
	}
	json_t *j = json_pack("{s:i, s:s, s:s, s:s, s:I, s:b}", "schema", 1, "template", r->ref, "name", r->name,
			      "version", r->version, "size_bytes", (json_int_t)r->size, "existed", r->existed);
	print_json(j);
	json_decref(j);
}

static int build(struct sbx_state *st, const struct opts *o, char **args, int n, struct sbx_err *err)
{
	if (n != 1 || !o->spec)
		return sbx_cli_fail(PROG, SBX_EXIT_USAGE, o->json, "build takes NAME and -f SPEC");
	struct sbx_tmplbuild_opts bo = { .name = args[0], .spec = o->spec, .tenant = o->tenant, .progress_fd = 2 };
	struct sbx_tmplbuild_result r;
	if (sbx_template_build(st, &bo, &r, err) < 0)
		return -1;
	print_built(o, &r);
	return 0;
}

static int import(struct sbx_state *st, const struct opts *o, char **args, int n, struct sbx_err *err)
{
	if (n != 2)
		return sbx_cli_fail(PROG, SBX_EXIT_USAGE, o->json, "import takes NAME FILE");
	struct sbx_tmplbuild_opts bo = { .name = args[0], .import = args[1], .tenant = o->tenant, .progress_fd = 2 };
	struct sbx_tmplbuild_result r;
	if (sbx_template_build(st, &bo, &r, err) < 0)
		return -1;
	print_built(o, &r);
	return 0;
}

static int list(struct sbx_state *st, const struct opts *o, char **args, int n, struct sbx_err *err)
{
	if (n > 1)
		return sbx_cli_fail(PROG, SBX_EXIT_USAGE, o->json, "list takes at most one NAME");
	json_t *all;
	if (sbx_template_list(st, o->tenant, n ? args[0] : NULL, &all, err) < 0)
		return -1;
	sbx_cli_print_table(&sbx_cli_template_table, all, sbx_cli_mode_of(o->json, o->quiet), o->headers);
	json_decref(all);
	return 0;
}

static int inspect(struct sbx_state *st, const struct opts *o, char **args, int n, struct sbx_err *err)
{
	if (n != 1)
		return sbx_cli_fail(PROG, SBX_EXIT_USAGE, o->json, "inspect takes one NAME[@VERSION]");
	json_t *m;
	if (sbx_template_inspect(st, o->tenant, args[0], &m, err) < 0)
		return -1;
	if (o->json) {
		print_json(m);
	} else {
		/* KEY<TAB>VALUE, the scalars first, then lists one per line */
		static const char *const keys[] = { "template",       "name",   "version", "owner",
						    "created",        "kernel", "base",    "size_bytes",
						    "content_sha256", "user",   "workdir", "in_use" };
		for (size_t i = 0; i < SBX_ARRAY_LEN(keys); i++) {
			json_t *v = json_object_get(m, keys[i]);
			if (json_is_integer(v))
				printf("%s\t%lld\n", keys[i], (long long)json_integer_value(v));
			else
				printf("%s\t%s\n", keys[i],
				       json_string_value(v) && *json_string_value(v) ? json_string_value(v) : "-");
		}
		json_t *src = json_object_get(m, "source"), *v;
		printf("source\t%s\t%s\n", json_string_value(json_object_get(src, "kind")),
		       *json_string_value(json_object_get(src, "path"))
			       ? json_string_value(json_object_get(src, "path"))
			       : "-");
		size_t i;
		json_array_foreach (json_object_get(m, "env"), i, v)
			printf("env\t%s=%s\n", json_string_value(json_object_get(v, "name")),
			       json_string_value(json_object_get(v, "value")));
		json_array_foreach (json_object_get(m, "packages"), i, v)
			printf("package\t%s\t%s\n", json_string_value(json_object_get(v, "name")),
			       json_string_value(json_object_get(v, "version")));
		json_array_foreach (json_object_get(m, "files"), i, v)
			printf("file\t%s\t%lld\t%s\n", json_string_value(json_object_get(v, "name")),
			       (long long)json_integer_value(json_object_get(v, "size")),
			       json_string_value(json_object_get(v, "sha256")));
		json_array_foreach (json_object_get(m, "used_by"), i, v)
			printf("used_by\t%s\n", json_string_value(v));
	}
	json_decref(m);
	return 0;
}

static int rm(struct sbx_state *st, const struct opts *o, char **args, int n, struct sbx_err *err)
{
	if (n < 1)
		return sbx_cli_fail(PROG, SBX_EXIT_USAGE, o->json, "rm takes [OWNER/]NAME[@VERSION]...");
	json_t *all;
	int rc = sbx_template_rm_list(st, o->tenant, args, n, &all, err);
	if (o->json && rc == 0)
		sbx_cli_print_removed(all);
	json_decref(all);
	return rc;
}

static int prune(struct sbx_state *st, const struct opts *o, char **args, int n, struct sbx_err *err)
{
	if (n)
		return sbx_cli_fail(PROG, SBX_EXIT_USAGE, o->json, "prune takes no operands");
	json_t *removed;
	if (sbx_template_prune(st, o->tenant, o->keep, &removed, err) < 0)
		return -1;
	if (o->json) {
		sbx_cli_print_removed(removed);
	} else {
		size_t k;
		json_t *v;
		json_array_foreach (removed, k, v)
			puts(json_string_value(v));
	}
	json_decref(removed);
	return 0;
}

int main(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "file", required_argument, NULL, 'f' },   { "help", no_argument, NULL, 'h' },
		{ "json", no_argument, NULL, 'j' },         { "keep", required_argument, NULL, 'k' },
		{ "no-headers", no_argument, NULL, 'H' },   { "quiet", no_argument, NULL, 'q' },
		{ "tenant", required_argument, NULL, 't' }, { NULL, 0, NULL, 0 },
	};
	struct opts o = { .headers = 1, .keep = 1 };
	if (argc < 2 || argv[1][0] == '-') {
		int help = argc >= 2 && (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help"));
		return sbx_cli_usage(usage_text, help);
	}
	const char *verb = argv[1];
	optind = 2;
	for (int c; (c = getopt_long(argc, argv, "f:hq", longopts, NULL)) != -1;) {
		char *end;
		switch (c) {
		case 'f': o.spec = optarg; break;
		case 'h': return sbx_cli_usage(usage_text, 1);
		case 'H': o.headers = 0; break;
		case 'j': o.json = 1; break;
		case 'k':
			o.keep = (unsigned)strtoul(optarg, &end, 10);
			if (*end || !*optarg || optarg[0] == '-' || strlen(optarg) > 6)
				return sbx_cli_fail(PROG, SBX_EXIT_USAGE, o.json, "bad --keep '%.20s'", optarg);
			break;
		case 'q': o.quiet = 1; break;
		case 't': o.tenant = optarg; break;
		default: return sbx_cli_usage(usage_text, 0);
		}
	}
	typedef int (*verb_fn)(struct sbx_state *, const struct opts *, char **, int, struct sbx_err *);
	static const verb_fn fns[] = { build, import, list, inspect, rm, prune };
	static const struct sbx_cli_verb verbs[] = { { "build", 0 },   { "import", 1 }, { "list", 2 }, { "ls", 2 },
						     { "inspect", 3 }, { "rm", 4 },     { "prune", 5 } };
	const struct sbx_cli_verb *v = sbx_cli_verb_find(PROG, verbs, SBX_ARRAY_LEN(verbs), verb, o.json);
	if (!v)
		return SBX_EXIT_USAGE;
	struct sbx_state st;
	struct sbx_err err = { 0 };
	if (sbx_state_open(&st, &err) < 0 || sbx_state_scope(&st, o.tenant, &err) < 0) {
		sbx_err_print(PROG, &err, o.json);
		return err.code;
	}
	o.tenant = sbx_state_tenant(&st);
	int rc = fns[v->op](&st, &o, argv + optind, argc - optind, &err);
	return sbx_cli_verb_done(PROG, rc, &err, o.json);
}
