/* Unit tests for IDs, atomic records and safe removal (TAP). */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "state.h"
#include "util.h"

#include "tap.h"

int main(void)
{
	struct sbx_err e = { 0 };
	const char *good[] = { "a", "s-0123456789ab", "my_session.1", "A-b" };
	const char *bad[] = { "",   "../x", "a/b", ".hidden",
			      "-x", "a b",  "..",  "0123456789012345678901234567890123456789012345678901234567890123" };
	for (size_t i = 0; i < SBX_ARRAY_LEN(good); i++)
		ok(sbx_id_check(good[i], "session", &e) == 0, good[i]);
	for (size_t i = 0; i < SBX_ARRAY_LEN(bad); i++) {
		char what[100];
		snprintf(what, sizeof what, "bad id '%s' rejected with 3", bad[i]);
		ok(sbx_id_check(bad[i], "session", &e) < 0 && e.code == SBX_EXIT_INVALID, what);
	}
	const char *tenants_bad[] = { "", "_", "@", "operator", "OPERATOR", "../x", "a/b", ".x", "-x" };
	for (size_t i = 0; i < SBX_ARRAY_LEN(tenants_bad); i++) {
		char what[100];
		snprintf(what, sizeof what, "tenant '%s' refused with 3", tenants_bad[i]);
		ok(sbx_tenant_check(tenants_bad[i], &e) < 0 && e.code == SBX_EXIT_INVALID, what);
	}
	ok(sbx_tenant_check("acme", &e) == 0 && sbx_tenant_check("operators", &e) == 0, "tenants acme, operators");
	struct sbx_state sc = { 0 };
	setenv("SBX_TENANT", "envt", 1);
	ok(sbx_state_scope(&sc, NULL, &e) == 0 && !strcmp(sc.tenant, "envt"), "scope from SBX_TENANT");
	ok(sbx_state_scope(&sc, "opt", &e) == 0 && !strcmp(sc.tenant, "opt"), "--tenant wins over SBX_TENANT");
	setenv("SBX_TENANT", "", 1);
	ok(sbx_state_scope(&sc, NULL, &e) < 0 && e.code == SBX_EXIT_INVALID && !sc.tenant[0],
	   "an empty SBX_TENANT is refused, not the operator");
	unsetenv("SBX_TENANT");
	ok(sbx_state_scope(&sc, NULL, &e) == 0 && !sbx_state_tenant(&sc), "no tenant: the operator");
	char id1[16], id2[16];
	sbx_id_new(id1, sizeof id1);
	sbx_id_new(id2, sizeof id2);
	ok(sbx_id_check(id1, "session", NULL) == 0 && strcmp(id1, id2), "fresh IDs are valid and differ");

	char tmpl[] = "/tmp/sbx-unit.XXXXXX";
	char *dir = mkdtemp(tmpl);
	int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	ok(sbx_atomic_write_at(dfd, "r.json", "{}", 2, 0600, &e) == 0, "atomic write");
	ok(sbx_atomic_write_at(dfd, "r.json", "{\"a\":1}", 7, 0600, &e) == 0, "atomic overwrite");
	size_t len;
	char *s = sbx_read_small_at(dfd, "r.json", 100, &len);
	ok(s && len == 7 && !strcmp(s, "{\"a\":1}"), "read back the new content");
	free(s);
	struct stat st;
	ok(fstatat(dfd, "r.json", &st, 0) == 0 && (st.st_mode & 0777) == 0600, "record mode 0600");
	ok(sbx_read_small_at(dfd, "r.json", 3, NULL) == NULL, "oversized file refused");

	/* rm -rf must not follow a symlink out of the tree */
	mkdirat(dfd, "victim", 0700);
	close(openat(dfd, "victim/keep", O_CREAT | O_WRONLY, 0600));
	mkdirat(dfd, "tree", 0700);
	mkdirat(dfd, "tree/sub", 0700);
	char target[300];
	snprintf(target, sizeof target, "%s/victim", dir);
	symlinkat(target, dfd, "tree/sub/link");
	ok(sbx_rm_rf_at(dfd, "tree") == 0, "rm_rf removes the tree");
	ok(faccessat(dfd, "tree", F_OK, AT_SYMLINK_NOFOLLOW) < 0, "tree gone");
	ok(faccessat(dfd, "victim/keep", F_OK, 0) == 0, "symlink target untouched");
	ok(sbx_rm_rf_at(dfd, "missing") == 0, "rm_rf of a missing name succeeds");
	sbx_rm_rf_at(dfd, "victim");
	unlinkat(dfd, "r.json", 0);
	close(dfd);
	rmdir(dir);

	ok(sbx_proc_start_time(getpid()) > 0, "own start time readable");
	ok(sbx_proc_start_time(0x7ffffff0) == 0, "missing pid has no start time");
	printf("1..%d\n", n);
	return failed != 0;
}
