/* The user a command acts for (caller.h): its file-system identity,
 * taken by one thread at a time around what touches host paths. */
#include "caller.h"

#include <stdlib.h>
#include <sys/syscall.h>
#include <unistd.h>

static struct sbx_caller caller;
static gid_t own_groups[64];
static int own_ngroups, own_gid;

static void caller_parse(const char *v)
{
	char *end;
	unsigned long u = strtoul(v, &end, 10), g = 0;
	int ok = end != v && *end == ':' && u < 0xffffffffu;
	if (ok) {
		v = end + 1;
		g = strtoul(v, &end, 10);
		ok = end != v && (*end == 0 || *end == ':') && g < 0xffffffffu;
	}
	if (ok && *end == ':') {
		for (v = end + 1; ok && *v;) {
			unsigned long x = strtoul(v, &end, 10);
			ok = end != v && (*end == 0 || *end == ',') && x < 0xffffffffu && caller.ngroups < 64;
			if (ok)
				caller.groups[caller.ngroups++] = (gid_t)x;
			v = *end ? end + 1 : end;
		}
	}
	/* Root is never a caller: that is the command run directly. */
	if (!ok || u == 0 || g == 0) {
		u = g = 65534;
		caller.ngroups = 0;
	}
	caller.uid = (uid_t)u;
	caller.gid = (gid_t)g;
}

const struct sbx_caller *sbx_caller(void)
{
	static int loaded, have;
	if (!__atomic_load_n(&loaded, __ATOMIC_ACQUIRE)) {
		const char *v = getenv("SBX_CALLER");
		if (v && geteuid() == 0) {
			caller_parse(v);
			own_gid = (int)getegid();
			own_ngroups = getgroups(64, own_groups);
			if (own_ngroups < 0)
				own_ngroups = 0;
			have = 1;
		}
		__atomic_store_n(&loaded, 1, __ATOMIC_RELEASE);
	}
	return have ? &caller : NULL;
}

/* Raw system calls: glibc's setgroups changes every thread's, and only
 * the calling thread's identity is to change here.  A switch that does
 * not take leaves the thread as nobody, never as root. */
int sbx_caller_enter(void)
{
	const struct sbx_caller *c = sbx_caller();
	if (!c)
		return 0;
	if (syscall(SYS_setgroups, (size_t)c->ngroups, c->groups) < 0)
		syscall(SYS_setgroups, (size_t)0, NULL);
	syscall(SYS_setfsgid, c->gid);
	syscall(SYS_setfsuid, c->uid);
	/* setfs*id answers with the old value whatever happens: check. */
	if ((uid_t)syscall(SYS_setfsuid, -1) != c->uid || (gid_t)syscall(SYS_setfsgid, -1) != c->gid) {
		syscall(SYS_setgroups, (size_t)0, NULL);
		syscall(SYS_setfsgid, 65534);
		syscall(SYS_setfsuid, 65534);
	}
	return 1;
}

void sbx_caller_leave(int entered)
{
	if (entered <= 0)
		return;
	syscall(SYS_setfsuid, 0);
	syscall(SYS_setfsgid, own_gid);
	syscall(SYS_setgroups, (size_t)own_ngroups, own_groups);
}
