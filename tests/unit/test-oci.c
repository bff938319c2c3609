/* sbx-oci's pure parts (common/oci_spec.c, the ID check of oci.c): what a
 * config.json and a process.json may hold, and which container IDs may
 * become a name under --root. */
#include <stdlib.h>
#include <string.h>

#include "oci.h"
#include "oci_spec.h"
#include "tap.h"

static int parse(const char *json, struct sbx_oci_spec *s, struct sbx_err *err)
{
	memset(err, 0, sizeof *err);
	return sbx_oci_spec_parse(json, strlen(json), s, err);
}

static void accepted(void)
{
	struct sbx_oci_spec s;
	struct sbx_err err;
	int rc = parse("{\"ociVersion\":\"1.0.2-dev\",\"process\":{\"args\":[\"sh\",\"-c\",\"x\"],"
		       "\"env\":[\"A=1\",\"B=\"],\"cwd\":\"/w\",\"user\":{\"uid\":1000,\"gid\":100},"
		       "\"terminal\":false,\"rlimits\":[]},\"root\":{\"path\":\"rootfs\",\"readonly\":true},"
		       "\"mounts\":[],\"linux\":{},\"annotations\":{\"a\":\"b\"}}",
		       &s, &err);
	ok(rc == 0, "a config.json as Podman writes it parses");
	ok(rc == 0 && s.argc == 3 && !strcmp(s.args[2], "x") && !s.args[3], "args, NULL-terminated");
	ok(rc == 0 && s.envc == 2 && !strcmp(s.env[1], "B="), "env, an empty value kept");
	ok(rc == 0 && !strcmp(s.cwd, "/w") && s.uid == 1000 && s.gid == 100, "cwd, uid, gid");
	ok(rc == 0 && !strcmp(s.root, "rootfs") && s.root_readonly, "root.path and readonly");
	ok(rc == 0 && !strcmp(json_string_value(json_object_get(s.annotations, "a")), "b"), "annotations");
	if (rc == 0)
		sbx_oci_spec_free(&s);
	rc = sbx_oci_process_parse("{\"args\":[\"true\"]}", 17, &s, &err);
	ok(rc == 0 && s.argc == 1 && !s.root[0], "a process object alone (exec --process)");
	if (rc == 0)
		sbx_oci_spec_free(&s);
}

static void refused(void)
{
	static const struct {
		const char *json, *why;
	} bad[] = {
		{ "[]", "not an object" },
		{ "{\"process\":{\"args\":[\"x\"]},\"root\":{\"path\":\"r\"}}", "ociVersion" },
		{ "{\"ociVersion\":\"2.0\",\"process\":{\"args\":[\"x\"]},\"root\":{\"path\":\"r\"}}", "ociVersion" },
		{ "{\"ociVersion\":\"1.0\",\"ociVersion\":\"1.0\"}", "duplicate" },
		{ "{\"ociVersion\":\"1.0\",\"root\":{\"path\":\"r\"}}", "process must be an object" },
		{ "{\"ociVersion\":\"1.0\",\"process\":{\"args\":[]},\"root\":{\"path\":\"r\"}}", "empty" },
		{ "{\"ociVersion\":\"1.0\",\"process\":{\"args\":[1]},\"root\":{\"path\":\"r\"}}", "args[0]" },
		{ "{\"ociVersion\":\"1.0\",\"process\":{\"args\":[\"a\\u0000b\"]},\"root\":{\"path\":\"r\"}}",
		  "invalid config.json" },
		{ "{\"ociVersion\":\"1.0\",\"process\":{\"args\":[\"x\"],\"env\":[\"=v\"]},\"root\":{\"path\":\"r\"}}",
		  "NAME=VALUE" },
		{ "{\"ociVersion\":\"1.0\",\"process\":{\"args\":[\"x\"],\"cwd\":\"rel\"},\"root\":{\"path\":\"r\"}}",
		  "absolute" },
		{ "{\"ociVersion\":\"1.0\",\"process\":{\"args\":[\"x\"],\"user\":{\"uid\":-1}},\"root\":{\"path\":"
		  "\"r\"}}",
		  "uid must be" },
		{ "{\"ociVersion\":\"1.0\",\"process\":{\"args\":[\"x\"],\"user\":{\"username\":\"u\"}},"
		  "\"root\":{\"path\":\"r\"}}",
		  "Windows" },
		{ "{\"ociVersion\":\"1.0\",\"process\":{\"args\":[\"x\"],\"terminal\":1},\"root\":{\"path\":\"r\"}}",
		  "boolean" },
		{ "{\"ociVersion\":\"1.0\",\"process\":{\"args\":[\"x\"]},\"root\":{\"path\":\"\"}}", "root.path" },
		{ "{\"ociVersion\":\"1.0\",\"process\":{\"args\":[\"x\"]},\"root\":{\"path\":\"a\\nb\"}}",
		  "root.path" },
		{ "{\"ociVersion\":\"1.0\",\"process\":{\"args\":[\"x\"]},\"root\":{\"path\":\"r\"},\"annotations\":{"
		  "\"a\":1}}",
		  "annotation" },
	};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		struct sbx_oci_spec s;
		struct sbx_err err;
		char what[160];
		snprintf(what, sizeof what, "refused, saying '%s'", bad[i].why);
		ok(parse(bad[i].json, &s, &err) < 0 && err.code == SBX_EXIT_INVALID && strstr(err.msg, bad[i].why),
		   what);
	}
	/* Bounds: the entry count and the bytes of args and env together. */
	size_t cap = 5 * SBX_OCI_ARGS_MAX + 200;
	char *j = malloc(cap), *p = j;
	p += sprintf(p, "{\"ociVersion\":\"1.0\",\"root\":{\"path\":\"r\"},\"process\":{\"args\":[");
	for (unsigned i = 0; i <= SBX_OCI_ARGS_MAX; i++)
		p += sprintf(p, "%s\"x\"", i ? "," : "");
	p += sprintf(p, "]}}");
	struct sbx_oci_spec s;
	struct sbx_err err;
	ok(parse(j, &s, &err) < 0 && strstr(err.msg, "entries"), "one arg over the count is refused");
	free(j);
	j = malloc(9 * 60010 + 200);
	p = j + sprintf(j, "{\"ociVersion\":\"1.0\",\"root\":{\"path\":\"r\"},\"process\":{\"args\":[");
	for (int i = 0; i < 9; i++) { /* 9 x 60000 bytes: over 512 KiB */
		p += sprintf(p, "%s\"", i ? "," : "");
		memset(p, 'a', 60000);
		p += 60000;
		*p++ = '"';
	}
	strcpy(p, "]}}");
	ok(parse(j, &s, &err) < 0 && strstr(err.msg, "over"), "args over 512 KiB in all are refused");
	free(j);
}

static void ids(void)
{
	struct sbx_err err = { 0 };
	ok(sbx_oci_id_check("0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef", &err) == 0,
	   "a 64-hex ID (Podman's, CRI's)");
	ok(sbx_oci_id_check("slurm.42_0+a-b", &err) == 0, "letters, digits and ._+-");
	const char *bad[] = { "", ".", "..", "../x", "a/b", "-x", "+x", ".x", "a b", "a\tb", "é" };
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		char what[64];
		snprintf(what, sizeof what, "ID '%s' refused", bad[i]);
		ok(sbx_oci_id_check(bad[i], &err) < 0 && err.code == SBX_EXIT_INVALID, what);
	}
	char longid[SBX_OCI_ID_MAX + 2];
	memset(longid, 'a', sizeof longid - 1);
	longid[sizeof longid - 1] = 0;
	ok(sbx_oci_id_check(longid, &err) < 0, "129 characters refused");
	longid[SBX_OCI_ID_MAX] = 0;
	ok(sbx_oci_id_check(longid, &err) == 0, "128 taken");
}

int main(void)
{
	accepted();
	refused();
	ids();
	return tap_done();
}
