/* Confinement for the work sbx does over trees it did not make: the
 * unpack of an imported archive and every sbx-template helper step that
 * reads, writes or runs anything of a template's root (skel and files:
 * copies, apt, dpkg and the maintainer scripts, dpkg-query, mkfs).
 *
 * A confined step is root only in namespaces of its own: a user namespace
 * mapping uids and gids 0-65535 onto a host range nobody else uses (a
 * slot, below), its own PID namespace (the step is PID 1; when it ends,
 * everything it started ends) with its own /proc, its own network
 * namespace (loopback only, down), IPC and UTS namespaces, and a mount
 * namespace whose root is a fresh tmpfs holding read-only binds of the
 * host's programs (/usr and the merged-/usr links; a few named files of
 * /etc), a minimal /dev (null, zero, full, random, urandom, tty) and the
 * directories the caller names, bound at their own paths.  It keeps the
 * capabilities a package install needs inside its namespaces (chown,
 * DAC override, setuid, chroot...) and no others, with no_new_privs,
 * sbx's seccomp filter and rlimits.  To the host, every file it makes is
 * owned by the slot's range, and every file of the host's is "nobody":
 * it can write nothing of the host's, read only what every user may, and
 * keep no process past its end.
 *
 * The tree is kept in the slot's range for the whole build: the step that
 * unpacks it runs confined, and so does the mkfs that turns it into an
 * image (it sees the namespace's ids, which the image keeps). */
#ifndef SBX_CONFINE_H
#define SBX_CONFINE_H

#include <sys/types.h>

#include "err.h"

/* Slot s maps ids 0-65535 onto SBX_CONFINE_UID_BASE + s * 65536: far
 * above login and subuid ranges, below the VMM jail's (jail.h). */
#define SBX_CONFINE_UID_BASE 0x58000000u
#define SBX_CONFINE_IDS 65536u
#define SBX_CONFINE_SLOTS 256u

/* A slot, held (an flock on RUN/confine-N.lock) for a whole build, so two
 * concurrent builds (two tenants') never share a range. */
struct sbx_confine_slot {
	int lock_fd;
	uid_t base; /* the host uid (and gid) of the namespace's root */
};
int sbx_confine_slot_take(int run_fd, struct sbx_confine_slot *s, struct sbx_err *err);
void sbx_confine_slot_release(struct sbx_confine_slot *s);

#define SBX_CONFINE_RW 1u

struct sbx_confine_bind {
	const char *path; /* absolute, shown at the same path inside */
	unsigned flags;   /* SBX_CONFINE_RW, else read-only */
};

struct sbx_confine {
	uid_t base;                           /* the slot's */
	const struct sbx_confine_bind *binds; /* directories or files */
	unsigned nbinds;
	/* A tree the step chroots into (apt): its /proc becomes the step's
	 * own and its /dev a tmpfs holding the minimal /dev, both made
	 * beneath the tree without following any link of its.  NULL: none. */
	const char *chroot_tree;
	int fds[3]; /* the step's stdin, stdout and stderr */
	/* sbx_confine_spawn_host: its one directory, shown to it alone as
	 * /tmp/work (a tmpfs over /tmp in a mount namespace of its own: the
	 * directories above it need not be its to search), its working
	 * directory; or NULL. */
	const char *work;
	/* What a function (not a program) works through: every other fd of
	 * the caller's is closed before it runs. */
	const int *keep;
	unsigned nkeep;
};

/* What runs inside: the return value is the step's exit status. */
typedef int (*sbx_confine_fn)(void *arg);
/* exec argv (a char *const[]), as fn. */
int sbx_confine_execv(void *argv);

/* Start fn(arg) confined as c says; the caller waits for the pid, whose
 * exit status is fn's (or 128 + the signal that ended the step's PID 1),
 * and 125 when the confinement could not be made (the reason is written
 * to c->fds[2] first). */
pid_t sbx_confine_spawn(const struct sbx_confine *c, sbx_confine_fn fn, void *arg, struct sbx_err *err);

/* The one step that needs the host's network (apt's downloads), for
 * programs of the host's only: in the host's namespaces but a mount
 * namespace (c->work), as the slot's root uid and gid with no groups, no
 * capabilities, no_new_privs and the seccomp filter.  It can write only
 * what the slot owns. */
pid_t sbx_confine_spawn_host(const struct sbx_confine *c, char *const argv[], struct sbx_err *err);

#endif
