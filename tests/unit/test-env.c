/* A session's environment (common/env.c): names, bounds, later-wins,
 * secret references across a removal, the record round trip, binding
 * values to secrets; and the exec request's NAME=SECRET entries. */
#include <string.h>

#include <jansson.h>

#include "env.h"
#include "proto.h"
#include "secrets.h"
#include "tap.h"

static const char *val(const struct sbx_env *e, const char *name)
{
	for (unsigned i = 0; i < e->n; i++) {
		size_t nl;
		const char *v;
		const char *p = sbx_env_entry(e, i, &nl, &v);
		if (nl == strlen(name) && !memcmp(p, name, nl))
			return v;
	}
	return NULL;
}

static void names_and_bounds(void)
{
	struct sbx_env e = { 0 };
	struct sbx_err err = { 0 };
	ok(sbx_env_name_ok("A_b9", 4) && sbx_env_name_ok("_", 1), "names: letters, digits, underscore");
	ok(!sbx_env_name_ok("9A", 2) && !sbx_env_name_ok("A-B", 3) && !sbx_env_name_ok("", 0),
	   "not a digit first, no dash, not empty");
	char big[200];
	memset(big, 'N', sizeof big);
	ok(sbx_env_name_ok(big, 128) && !sbx_env_name_ok(big, 129), "names up to 128 bytes");
	ok(sbx_env_set(&e, "NOEQ", 0, "t", &err) < 0 && err.code == SBX_EXIT_INVALID, "NAME without = is 3");
	ok(sbx_env_set(&e, "A=a\nb", 0, "t", &err) < 0 && strstr(err.msg, "control"),
	   "a newline in a value is refused");
	ok(sbx_env_set(&e, "A=\xff", 0, "t", &err) < 0 && strstr(err.msg, "UTF-8"),
	   "a value that is not UTF-8 is refused");
	ok(sbx_env_set(&e, "A=tab\there", 0, "t", &err) == 0, "a tab is fine");
	static char v[SBX_ENV_VALUE_MAX + 8];
	memset(v, 'x', sizeof v - 1);
	memcpy(v, "V=", 2);
	v[2 + SBX_ENV_VALUE_MAX + 1] = 0;
	ok(sbx_env_set(&e, v, 0, "t", &err) < 0 && strstr(err.msg, "over 4096"), "a value over 4096 bytes is refused");
	v[2 + SBX_ENV_VALUE_MAX] = 0;
	ok(sbx_env_set(&e, v, 0, "t", &err) == 0, "4096 bytes is fine");
	struct sbx_env f = { 0 };
	char kv[32];
	int rc = 0;
	for (int i = 0; i < SBX_ENV_MAX && rc == 0; i++) {
		snprintf(kv, sizeof kv, "V%d=%d", i, i);
		rc = sbx_env_set(&f, kv, 0, "t", &err);
	}
	ok(rc == 0 && f.n == SBX_ENV_MAX, "64 variables");
	ok(sbx_env_set(&f, "ONE_MORE=1", 0, "t", &err) < 0 && strstr(err.msg, "at most 64"), "not 65");
	ok(sbx_env_set(&f, "V3=again", 0, "t", &err) == 0 && f.n == SBX_ENV_MAX && !strcmp(val(&f, "V3"), "again"),
	   "replacing one at the limit is fine");
	ok(sbx_workdir_check("/a/b", "t", NULL) == 0 && sbx_workdir_check("a", "t", NULL) < 0 &&
		   sbx_workdir_check("/a\n", "t", NULL) < 0,
	   "workdir: absolute, no control bytes");
	uint32_t uid = 7;
	ok(sbx_user_parse("root", &uid) == 0 && uid == 0 && sbx_user_parse("user", &uid) == 0 && uid == 1000 &&
		   sbx_user_parse("65534", &uid) == 0 && uid == 65534,
	   "users: root, user, a uid");
	ok(sbx_user_parse("65535", &uid) < 0 && sbx_user_parse("-1", &uid) < 0 && sbx_user_parse("", &uid) < 0 &&
		   sbx_user_parse("0x1", &uid) < 0 && sbx_user_parse("000001", &uid) < 0,
	   "not past 65534, no sign, hex, padding");
}

static void secret_bits_and_json(void)
{
	struct sbx_env e = { 0 };
	struct sbx_err err = { 0 };
	sbx_env_set(&e, "A=1", 0, "t", &err);
	sbx_env_set(&e, "S1=TOKEN", 1, "t", &err);
	sbx_env_set(&e, "B=2", 0, "t", &err);
	sbx_env_set(&e, "S2=OTHER", 1, "t", &err);
	ok(e.n == 4 && e.secret == 0xa, "secret bits follow their entries");
	sbx_env_set(&e, "A=3", 0, "t", &err); /* A leaves slot 0, goes last */
	ok(e.n == 4 && e.secret == 0x5 && !strcmp(val(&e, "A"), "3"),
	   "... and move down when an earlier one is replaced");
	json_t *rec = json_object();
	sbx_env_to_json(&e, rec);
	ok(!strcmp(json_string_value(json_object_get(json_object_get(rec, "env_secrets"), "S1")), "TOKEN") &&
		   !json_object_get(json_object_get(rec, "env"), "S1"),
	   "the record keeps a secret's name apart");
	struct sbx_env back;
	ok(sbx_env_from_json(&back, rec) == 0 && back.n == 4 && !strcmp(val(&back, "S2"), "OTHER") &&
		   !strcmp(val(&back, "B"), "2"),
	   "... and reads it back");
	json_t *shown = sbx_env_show(&back);
	ok(!strcmp(json_string_value(json_object_get(shown, "S1")), "[secret:TOKEN]") &&
		   !strcmp(json_string_value(json_object_get(shown, "A")), "3"),
	   "shown as [secret:NAME]");
	json_decref(shown);
	json_object_set_new(json_object_get(rec, "env_secrets"), "S3", json_string("not a name"));
	ok(sbx_env_from_json(&back, rec) < 0 && back.n == 0, "a record whose secret name is bad is refused");
	json_object_del(json_object_get(rec, "env_secrets"), "S3");
	json_object_set_new(json_object_get(rec, "env"), "BAD NAME", json_string("x"));
	ok(sbx_env_from_json(&back, rec) < 0, "... and one with a bad variable name");
	json_decref(rec);
}

static void bind(void)
{
	static const uint8_t val1[] = "hunter2\n";
	struct sbx_secrets sec = { .n = 1 };
	snprintf(sec.s[0].name, sizeof sec.s[0].name, "PW");
	sec.s[0].value = val1;
	sec.s[0].len = 8;
	sec.pat[0] = 7;
	struct sbx_env e = { 0 };
	struct sbx_err err = { 0 };
	sbx_env_set(&e, "X=hunter2", 0, "t", &err);
	sbx_env_set(&e, "Y=plain", 0, "t", &err);
	ok(sbx_env_bind_secrets(&e, &sec, &err) == 0 && e.secret == 1 && !strcmp(val(&e, "X"), "PW"),
	   "a value equal to a secret (less its newline) becomes its name");
	ok(!strcmp(val(&e, "Y"), "plain"), "others stay");
	ok(sbx_env_bind_secrets(&e, &sec, &err) == 0 && e.secret == 1 && !strcmp(val(&e, "X"), "PW"),
	   "binding twice changes nothing");
	struct sbx_env f = { 0 };
	sbx_env_set(&f, "URL=https://u:hunter2@h", 0, "t", &err);
	ok(sbx_env_bind_secrets(&f, &sec, &err) < 0 && err.code == SBX_EXIT_INVALID && !strstr(err.msg, "hunter2"),
	   "a value holding a secret is 3, and the message does not hold it");
}

static void request(void)
{
	char *argv[] = { (char *)"true", NULL }, *sec[] = { (char *)"API=TOKEN", NULL };
	struct sbx_exec_req r = { .argv = argv, .argc = 1, .env_secret = sec, .env_secretc = 1 }, d;
	struct sbx_buf b = { 0 };
	const char *why = "";
	sbx_exec_req_encode(&b, 1, &r);
	ok(sbx_exec_req_decode(b.data + SBX_FRAME_HDR, b.len - SBX_FRAME_HDR, &d, &why) == 0 && d.env_secretc == 1 &&
		   !strcmp(d.env_secret[0], "API=TOKEN"),
	   "NAME=SECRET travels in the exec request");
	sbx_exec_req_free(&d);
	const char *bad[] = { "API", "=TOKEN", "API=", "API=bad name", "API=lower", "A B=TOKEN", "9A=TOKEN" };
	for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
		sbx_buf_reset(&b);
		sec[0] = (char *)bad[i];
		sbx_exec_req_encode(&b, 1, &r);
		char what[80];
		snprintf(what, sizeof what, "'%s' is refused", bad[i]);
		int rc = sbx_exec_req_decode(b.data + SBX_FRAME_HDR, b.len - SBX_FRAME_HDR, &d, &why);
		ok(rc < 0 && strstr(why, "NAME=SECRET"), what);
	}
	sbx_buf_free(&b);
}

int main(void)
{
	names_and_bounds();
	secret_bits_and_json();
	bind();
	request();
	return tap_done();
}
