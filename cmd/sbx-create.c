/* sbx-create: boot a session and print its ID once the guest agent answers. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "cli.h"
#include "policy.h"
#include "secrets.h"
#include "session.h"

static void usage(FILE *f)
{
	fputs("usage: sbx-create [-q] [--json] [--dry-run] [-p POLICY] [--id ID] [-t TEMPLATE[@VERSION]]\n"
	      "                  [--cpus N] [--memory MiB] [--disk SIZE] [--ttl DURATION] [--tenant TENANT]\n"
	      "                  [-v HOSTDIR:GUESTPATH:ro]...\n"
	      "                  [--secret NAME=@FILE]...\n",
	      f);
}

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

static int print_policy(const struct sbx_policy *p, int json)
{
	json_t *j = sbx_policy_json(p);
	if (!j)
		return sbx_cli_fail("sbx-create", SBX_EXIT_INTERNAL, json, "cannot format the policy: out of memory");
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
	json_t *j = json_pack("{s:i, s:s, s:s, s:s, s:s, s:b, s:I}", "schema", 1, "id", s->id, "state", s->state,
			      "accel", s->accel, "kernel", s->kernel, "existed", existed, "boot_ms",
			      (json_int_t)s->boot_ms);
	json_dumpf(j, stdout, JSON_COMPACT);
	putchar('\n');
	json_decref(j);
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "cpus", required_argument, NULL, 'c' },
		{ "disk", required_argument, NULL, 'D' },
		{ "dry-run", no_argument, NULL, 'n' },
		{ "help", no_argument, NULL, 'h' },
		{ "id", required_argument, NULL, 'i' },
		{ "json", no_argument, NULL, 'j' },
		{ "memory", required_argument, NULL, 'm' },
		{ "policy", required_argument, NULL, 'p' },
		{ "quiet", no_argument, NULL, 'q' },
		{ "secret", required_argument, NULL, 'S' },
		{ "template", required_argument, NULL, 't' },
		{ "tenant", required_argument, NULL, 'U' },
		{ "ttl", required_argument, NULL, 'T' },
		{ "volume", required_argument, NULL, 'v' },
		{ NULL, 0, NULL, 0 },
	};
	static struct sbx_policy pol; /* ~100 KiB of fixed arrays */
	struct sbx_create_opts o = { 0 };
	struct overrides ov = { 0 };
	struct sbx_err err = { 0 };
	const char *policy = NULL;
	int json = 0, quiet = 0, dry_run = 0, c;
	while ((c = getopt_long(argc, argv, "hp:qt:v:", opts, NULL)) != -1) {
		switch (c) {
		case 'c':
			if (sbx_cli_uint(optarg, 1, 64, &ov.vcpus) < 0)
				return sbx_cli_fail("sbx-create", SBX_EXIT_USAGE, json, "--cpus must be 1..64");
			break;
		case 'D': ov.disk = optarg; break;
		case 'h': usage(stdout); return 0;
		case 'i': o.id = optarg; break;
		case 'j': json = 1; break;
		case 'm':
			if (sbx_cli_uint(optarg, 64, 65536, &ov.memory_mib) < 0)
				return sbx_cli_fail("sbx-create", SBX_EXIT_USAGE, json, "--memory must be 64..65536 MiB");
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
		case 't': o.tmpl = optarg; break;
		case 'T': ov.ttl = optarg; break;
		case 'U': o.tenant = optarg; break;
		case 'v':
			if (o.nvols >= 8)
				return sbx_cli_fail("sbx-create", SBX_EXIT_USAGE, json, "at most 8 -v volumes");
			o.vols[o.nvols++] = optarg;
			break;
		default: usage(stderr); return SBX_EXIT_USAGE;
		}
	}
	if (optind != argc) {
		usage(stderr);
		return SBX_EXIT_USAGE;
	}
	if (effective_policy(policy, &ov, &pol, &err) < 0) {
		sbx_err_print("sbx-create", &err, json);
		return err.code;
	}
	if (dry_run)
		return print_policy(&pol, json);
	o.vcpus = pol.resources.vcpus;
	o.memory_mib = (unsigned)(pol.resources.memory >> 20);
	o.policy = &pol;
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
