/* Unit tests for secret loading and output scrubbing (TAP). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "policy.h"
#include "secrets.h"

#include "tap.h"

/* Feed text to the scrubber in chunks of step bytes. */
static char *feed(const struct sbx_secrets *s, const char *text, size_t step)
{
	struct sbx_scrub st = { 0 };
	struct sbx_buf out = { 0 };
	size_t len = strlen(text);
	for (size_t i = 0; i < len; i += step)
		sbx_scrub(s, &st, (const uint8_t *)text + i, len - i < step ? len - i : step, &out);
	sbx_scrub_end(&st, &out);
	sbx_buf_put(&out, "", 1);
	return (char *)out.data;
}

int main(void)
{
	static struct sbx_policy p;
	struct sbx_secrets s;
	struct sbx_err err = { 0 };
	char path[] = "/tmp/sbx-test-secret.XXXXXX";
	int fd = mkstemp(path);
	ok(fd >= 0 && write(fd, "hunter2\n", 8) == 8, "secret file written");
	close(fd);
	setenv("SBX_TEST_TOKEN", "tok-abc", 1);
	sbx_policy_defaults(&p);
	char spec[64];
	snprintf(spec, sizeof spec, "PW=@%s", path);
	const char *specs[] = { spec };
	ok(sbx_secrets_args(&p, specs, 1, &err) == 0 && p.nsecrets == 1, "--secret parsed");
	snprintf(p.secrets[1].name, sizeof p.secrets[1].name, "TOKEN");
	snprintf(p.secrets[1].from_env, sizeof p.secrets[1].from_env, "SBX_TEST_TOKEN");
	p.nsecrets = 2;
	ok(sbx_secrets_load(&p, NULL, &s, &err) == 0 && s.n == 2, "secrets loaded");
	ok(s.frame_len > SBX_FRAME_HDR && s.frame[4] == SBX_F_SECRETS, "one SECRETS frame");

	const char *text = "say hunter2 and tok-abc; hunter hunter2hunter2 tok-ab";
	const char *want = "say [secret:PW] and [secret:TOKEN]; hunter [secret:PW][secret:PW] tok-ab";
	int all = 1;
	for (size_t step = 1; step <= strlen(text); step++) {
		char *got = feed(&s, text, step);
		if (strcmp(got, want)) {
			printf("# step %zu: %s\n", step, got);
			all = 0;
		}
		free(got);
	}
	ok(all, "values scrubbed whatever the chunk boundaries");
	char *a = sbx_scrub_str(&s, "--password=hunter2");
	ok(a && !strcmp(a, "--password=[secret:PW]"), "strings scrubbed");
	free(a);

	const char *bad[] = { "pw=@/x", "PW=/x", "PW=@", "1X=@/x" };
	for (size_t i = 0; i < 4; i++) {
		const char *one[] = { bad[i] };
		err.code = 0;
		ok(sbx_secrets_args(&p, one, 1, &err) < 0 && err.code == SBX_EXIT_USAGE, bad[i]);
	}
	const char *twice[] = { "A=@/x", "A=@/y" };
	ok(sbx_secrets_args(&p, twice, 2, &err) < 0, "a name given twice");
	sbx_secrets_free(&s);

	unlink(path);
	sbx_policy_defaults(&p);
	ok(sbx_secrets_args(&p, specs, 1, &err) == 0, "--secret on a missing file parses");
	ok(sbx_secrets_load(&p, NULL, &s, &err) < 0 && err.code == SBX_EXIT_INVALID && strstr(err.msg, "PW"),
	   "a missing file fails with 3, naming the secret");
	sbx_secrets_free(&s);
	unsetenv("SBX_TEST_TOKEN");
	sbx_policy_defaults(&p);
	snprintf(p.secrets[0].name, sizeof p.secrets[0].name, "TOKEN");
	snprintf(p.secrets[0].from_env, sizeof p.secrets[0].from_env, "SBX_TEST_TOKEN");
	p.nsecrets = 1;
	ok(sbx_secrets_load(&p, NULL, &s, &err) < 0 && err.code == SBX_EXIT_INVALID, "an unset variable fails with 3");
	sbx_secrets_free(&s);
	printf("1..%d\n", n);
	return failed != 0;
}
