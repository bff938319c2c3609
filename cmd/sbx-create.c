/* sbx-create: boot a session and print its ID once the guest agent answers. */
#include <fcntl.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "cli.h"
#include "pkgrules.h"
#include "policy.h"
#include "secrets.h"
#include "session.h"
#include "snapshot.h"
#include "template.h"
#include "util.h"

static const char usage[] =
	"usage: sbx-create [-q] [--json] [--dry-run] [-p POLICY] [--id ID]\n"
	"                  [-t TEMPLATE[@VERSION] | -s SNAPSHOT[@VERSION]]\n"
	"                  [--cpus N] [--memory MiB] [--disk SIZE] [--ttl DURATION] [--tenant TENANT]\n"
	"                  [--workspace NAME] [-v HOSTDIR:GUESTPATH:ro]...\n"
	"                  [--secret NAME=@FILE]... [-e NAME[=VALUE]]... [--env-file FILE]... [-w DIR]\n";

struct overrides {
	unsigned vcpus, memory_mib; /* 0: not given */
	const char *disk, *ttl;
	const char *secrets[SBX_POLICY_SECRETS_MAX]; /* NAME=@FILE */
	unsigned nsecrets;
};

static int apply(const struct overrides *ov, struct sbx_policy *p, struct sbx_err *err)
{
	if (ov->vcpus)
		p->resources.vcpus = ov->vcpus;
	if (ov->memory_mib)
		p->resources.memory = (uint64_t)ov->memory_mib << 20;
	if (ov->disk && sbx_policy_set(p, "resources.disk", ov->disk, err) < 0)
		return sbx_err_wrap(err, "--disk");
	if (ov->ttl && sbx_policy_set(p, "resources.ttl", ov->ttl, err) < 0)
		return sbx_err_wrap(err, "--ttl");
	/* Only names and sources: the values are read at create time. */
	return sbx_secrets_args(p, ov->secrets, ov->nsecrets, err);
}

/* Defaults, then the file, then the command line.  The overrides are tried
 * on the defaults first so a bad one is a usage error (2) whatever the file
 * holds. */
static int effective_policy(const char *file, const struct overrides *ov, struct sbx_policy *p, struct sbx_err *err)
{
	sbx_policy_defaults(p);
	if (apply(ov, p, err) < 0)
		return -1;
	if (file && (sbx_policy_load(file, p, err) < 0 || apply(ov, p, err) < 0))
		return -1;
	return 0;
}

/* Which of vCPUs, memory and disk the user chose (a restored VM keeps the
 * snapshot's and refuses others): the overrides and the policy file's keys. */
static unsigned shape_of(const struct sbx_policy *p, const struct overrides *ov)
{
	return (ov->vcpus || p->set & SBX_POLICY_SET_VCPUS ? SBX_SHAPE_VCPUS : 0) |
	       (ov->memory_mib || p->set & SBX_POLICY_SET_MEMORY ? SBX_SHAPE_MEMORY : 0) |
	       (ov->disk || p->set & SBX_POLICY_SET_DISK ? SBX_SHAPE_DISK : 0);
}

/* --dry-run: which template -t (or -s, or the default) resolves to for
 * this caller, and whose it is; an error in place of it when none does. */
static json_t *template_json(const struct sbx_create_opts *o)
{
	struct sbx_state st;
	struct sbx_template t;
	struct sbx_snapshot snap;
	struct sbx_err e = { 0 };
	const char *req = o->snapshot ? o->snapshot : o->tmpl ? o->tmpl : "default";
	int rc = sbx_state_peek(&st, &e);
	if (rc == 0 && o->snapshot && st.lib_fd < 0)
		rc = sbx_err_set(&e, SBX_EXIT_NOENT, 0, "no snapshot %s", o->snapshot);
	else if (rc == 0 && o->snapshot)
		rc = sbx_snapshot_find(&st, o->tenant, o->snapshot, &snap, &e) < 0 ||
				     sbx_snapshot_template(&st, &snap, &t, &e) < 0
			     ? -1
			     : 0;
	else if (rc == 0)
		rc = sbx_template_resolve(&st, o->tenant, req, &t, &e);
	sbx_state_close(&st);
	if (rc < 0)
		return json_pack("{s:s, s:s, s:i}", "requested", req, "error", e.msg, "code", e.code);
	return json_pack("{s:s, s:s, s:s, s:s, s:s, s:b}", "requested", req, "name", t.ref, "version", t.version,
			 "owner", sbx_template_owner_name(t.owner), "dir", t.dir, "snapshot", t.snapshot);
}

static int print_policy(const struct sbx_policy *p, const struct sbx_create_opts *o, int json)
{
	/* The lock files too, read and parsed as a create would, so a bad
	 * one is found before anything is booted. */
	struct sbx_pkgrules r;
	struct sbx_limit_packages k = { 0 };
	struct sbx_err e = { 0 };
	_cleanup_free_ char *rules = NULL;
	if (sbx_pkgrules_compile(p, o->tenant, &r, &k, &rules, &e) < 0) {
		sbx_err_print("sbx-create", &e, json);
		return e.code;
	}
	sbx_pkgrules_free(&r);
	json_t *j = sbx_policy_json(p);
	if (!j)
		return sbx_cli_fail("sbx-create", SBX_EXIT_INTERNAL, json, "cannot format the policy: out of memory");
	json_object_set_new(j, "template", template_json(o));
	json_dumpf(j, stdout, (json ? JSON_COMPACT : JSON_INDENT(2)) | JSON_REAL_PRECISION(6));
	putchar('\n');
	json_decref(j);
	return fflush(stdout) == 0 ? 0 : SBX_EXIT_INTERNAL;
}

static void print_session(const struct sbx_session *s, int existed, int json)
{
	if (!json) {
		printf("%s\n", s->id);
		return;
	}
	/* "session" as in every other output; "id" kept for existing callers. */
	json_t *j = json_pack("{s:i, s:s, s:s, s:s, s:s, s:s, s:b, s:I}", "schema", 1, "id", s->id, "session", s->id,
			      "state", s->state, "accel", s->accel, "kernel", s->kernel, "existed", existed, "boot_ms",
			      (json_int_t)s->boot_ms);
	if (j && s->workspace[0])
		json_object_set_new(j, "workspace", json_string(s->workspace));
	if (j && s->from_pool) { /* served by a warm-pool member (sbx-gc(1)) */
		json_object_set_new(j, "from_pool", json_true());
		json_object_set_new(j, "claim_ms", json_integer((json_int_t)s->claim_ms));
	}
	json_dumpf(j, stdout, JSON_COMPACT);
	putchar('\n');
	json_decref(j);
}

int main(int argc, char **argv)
{
	int via_serve;
	if (sbx_cli_remote(argc, argv, &via_serve)) /* a user other than root: through sbx-serve */
		return via_serve;
	static const struct option opts[] = {
		{ "cpus", required_argument, NULL, 'c' },      { "disk", required_argument, NULL, 'D' },
		{ "dry-run", no_argument, NULL, 'n' },         { "env", required_argument, NULL, 'e' },
		{ "env-file", required_argument, NULL, 'E' },  { "help", no_argument, NULL, 'h' },
		{ "id", required_argument, NULL, 'i' },        { "json", no_argument, NULL, 'j' },
		{ "memory", required_argument, NULL, 'm' },    { "policy", required_argument, NULL, 'p' },
		{ "quiet", no_argument, NULL, 'q' },           { "secret", required_argument, NULL, 'S' },
		{ "snapshot", required_argument, NULL, 's' },  { "template", required_argument, NULL, 't' },
		{ "tenant", required_argument, NULL, 'U' },    { "ttl", required_argument, NULL, 'T' },
		{ "volume", required_argument, NULL, 'v' },    { "workdir", required_argument, NULL, 'w' },
		{ "workspace", required_argument, NULL, 'W' }, { NULL, 0, NULL, 0 },
	};
	static struct sbx_policy pol; /* ~100 KiB of fixed arrays */
	struct sbx_create_opts o = { 0 };
	struct overrides ov = { 0 };
	struct sbx_err err = { 0 };
	const char *policy = NULL;
	int json = 0, quiet = 0, dry_run = 0, c;
	const char *env[SBX_ENV_MAX], *env_files[8];
	while ((c = getopt_long(argc, argv, "e:hp:qs:t:v:w:", opts, NULL)) != -1) {
		switch (c) {
		case 'c':
			if (sbx_cli_uint(optarg, 1, 64, &ov.vcpus) < 0)
				return sbx_cli_fail("sbx-create", SBX_EXIT_USAGE, json, "--cpus must be 1..64");
			break;
		case 'D': ov.disk = optarg; break;
		case 'e':
			if (o.nenv >= SBX_ENV_MAX)
				return sbx_cli_fail("sbx-create", SBX_EXIT_INVALID, json, "at most %d -e", SBX_ENV_MAX);
			env[o.nenv++] = optarg;
			break;
		case 'E':
			if (o.nenv_files >= 8)
				return sbx_cli_fail("sbx-create", SBX_EXIT_USAGE, json, "at most 8 --env-file");
			env_files[o.nenv_files++] = optarg;
			break;
		case 'w': o.workdir = optarg; break;
		case 'h': return sbx_cli_usage(usage, 1);
		case 'i': o.id = optarg; break;
		case 'j': json = 1; break;
		case 'm':
			if (sbx_cli_uint(optarg, 64, 65536, &ov.memory_mib) < 0)
				return sbx_cli_fail("sbx-create", SBX_EXIT_USAGE, json,
						    "--memory must be 64..65536 MiB");
			break;
		case 'n': dry_run = 1; break;
		case 'p': policy = optarg; break;
		case 'q': quiet = 1; break;
		case 'S':
			if (ov.nsecrets >= SBX_POLICY_SECRETS_MAX)
				return sbx_cli_fail("sbx-create", SBX_EXIT_USAGE, json, "at most %d --secret",
						    SBX_POLICY_SECRETS_MAX);
			ov.secrets[ov.nsecrets++] = optarg;
			break;
		case 's': o.snapshot = optarg; break;
		case 't': o.tmpl = optarg; break;
		case 'T': ov.ttl = optarg; break;
		case 'U': o.tenant = optarg; break;
		case 'W': o.workspace = optarg; break;
		case 'v':
			if (o.nvols >= 8)
				return sbx_cli_fail("sbx-create", SBX_EXIT_USAGE, json, "at most 8 -v volumes");
			o.vols[o.nvols++] = optarg;
			break;
		default: return sbx_cli_usage(usage, 0);
		}
	}
	if (optind != argc)
		return sbx_cli_usage(usage, 0);
	o.env = env;
	o.env_files = env_files;
	if (effective_policy(policy, &ov, &pol, &err) < 0) {
		sbx_err_print("sbx-create", &err, json);
		return err.code;
	}
	/* The caller's tenant: --tenant, else $SBX_TENANT (sbx.7, TENANCY);
	 * the policy's host paths are resolved for it. */
	if (!o.tenant)
		o.tenant = getenv("SBX_TENANT");
	if (sbx_tenant_pin(&o.tenant, &err) < 0 || (o.tenant && sbx_tenant_check(o.tenant, &err) < 0)) {
		sbx_err_print("sbx-create", &err, json);
		return err.code;
	}
	if (dry_run) {
		if (sbx_policy_ceilings(o.tenant, &pol, &err) < 0) {
			sbx_err_print("sbx-create", &err, json);
			return err.code;
		}
		return print_policy(&pol, &o, json);
	}
	if (o.snapshot && o.tmpl)
		return sbx_cli_fail("sbx-create", SBX_EXIT_USAGE, json, "-s and -t cannot be used together");
	o.vcpus = pol.resources.vcpus;
	o.memory_mib = (unsigned)(pol.resources.memory >> 20);
	o.policy = &pol;
	o.shape_set = shape_of(&pol, &ov);
	o.progress_fd = quiet ? -1 : 2; /* a restore's, on a terminal */
	struct sbx_state st;
	struct sbx_session s;
	int existed;
	if (sbx_state_open(&st, &err) < 0 || sbx_session_create(&st, &o, &s, &existed, &err) < 0) {
		sbx_err_print("sbx-create", &err, json);
		return err.code;
	}
	if (!strcmp(s.accel, "tcg") && !quiet && !existed)
		fprintf(stderr, "sbx-create: notice: running under TCG emulation, not KVM (slower, and not a "
				"hardware isolation boundary)\n");
	print_session(&s, existed, json);
	return 0;
}
