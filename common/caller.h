/* The user a command acts for, when it is not root itself (caller.c). */
#ifndef SBX_CALLER_H
#define SBX_CALLER_H

#include <errno.h>
#include <sys/types.h>

/* The user a command acts for.  A user other than root runs sbx's commands
 * through sbx-serve's CLI socket (sbx-serve(8)); the service runs them as
 * root with SBX_CALLER=UID:GID[:GID,...] (the user's identity, read from
 * the socket) in the environment.  Then every host path is resolved and
 * opened, and every file written on the host, with that user's rights:
 * the calling thread's file-system uid, gid and groups are the user's
 * between sbx_caller_enter and sbx_caller_leave (per thread: a thread
 * that touches host paths enters itself).  Without SBX_CALLER (root using
 * the commands directly) both do nothing.  A malformed SBX_CALLER acts as
 * nobody (65534): fail closed. */
struct sbx_caller {
	uid_t uid;
	gid_t gid;
	unsigned ngroups;
	gid_t groups[64];
};
/* NULL when the command acts for root itself. */
const struct sbx_caller *sbx_caller(void);
/* 1 when this thread now has the caller's rights (or, if the switch
 * failed, nobody's), 0 when there is no caller. */
int sbx_caller_enter(void);
void sbx_caller_leave(int entered);
/* expr evaluated with the caller's rights (errno kept). */
#define SBX_AS_CALLER(expr)                                                                                            \
	({                                                                                                             \
		int entered_ = sbx_caller_enter();                                                                     \
		__typeof__(expr) r_ = (expr);                                                                          \
		int errno_ = errno;                                                                                    \
		sbx_caller_leave(entered_);                                                                            \
		errno = errno_;                                                                                        \
		r_;                                                                                                    \
	})

#endif
