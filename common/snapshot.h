/* Snapshots (sbx-snapshot(1)): a session's memory and disk, saved while
 * its VM is paused, from which new sessions are restored; and pause,
 * resume and a fresh identity for a running session.
 *
 * LIB/snapshots/TENANT/NAME@VERSION/ (TENANT "_" for sessions without
 * one), directories 0700, files 0600 (they hold guest memory):
 *   memory.zst     the VMM's saved state (QEMU: its migration stream), zstd
 *   scratch.zst    the session's writable disk, packed sparse (zstream.h)
 *   manifest.json  what it is and where it came from, written last
 * A save builds .tmp-* (flock'ed while it runs) and renames it into
 * place, so a save killed midway leaves nothing visible; a removal renames
 * to .rm-* first.  sbx-gc removes unlocked leftovers of both.
 *
 * A snapshot published as a template (save --template) is a template
 * directory (template.h): the base template's kernel, initramfs and root
 * disk (hard links where they can be), the same two files, and a template
 * manifest with the snapshot's under "snapshot", in the namespace of its
 * owner: the operator's (only the operator publishes there, and never a
 * tenant's session), or a tenant's own where sbx.yaml lets it publish
 * (template.h says who sees which).  Everything else is the tenant's
 * own: another tenant's snapshots do not exist for it (4). */
#ifndef SBX_SNAPSHOT_H
#define SBX_SNAPSHOT_H

#include <stdint.h>

#include <jansson.h>

#include "err.h"
#include "state.h"

#define SBX_SNAPSHOT_SCHEMA 1
#define SBX_SNAPSHOT_NO_TENANT "_" /* the directory of snapshots without one */

struct sbx_snapshot {
	char name[64], version[64];
	char tenant[SBX_ID_MAX + 1]; /* "" for none */
	char ref[200];               /* "TENANT/NAME@VERSION" or "template:NAME@VERSION" */
	char dir[700];               /* absolute */
	int is_template;
	uint64_t created_ns;
	char created[40];
	char source[SBX_ID_MAX + 1];                           /* the session it was saved from */
	char tmpl_name[64], tmpl_version[64], tmpl_sha256[65]; /* its template */
	char kernel[80];
	char vmm[24], accel[8];
	unsigned vcpus, memory_mib;
	uint64_t disk_bytes;            /* the writable disk's size: the session's quota */
	char mac[18];                   /* its NIC's MAC; "": saved without one */
	char workspace[SBX_ID_MAX + 1]; /* the workspace it had, by name; "": none */
	uint64_t size;                  /* bytes on disk */
	char content_sha256[65];
};

/* NAME[@VERSION]: each 1-63 of [A-Za-z0-9_.-], not starting with '.' or
 * '-'; 3 otherwise. */
int sbx_snapshot_spec(const char *spec, char name[64], char version[64], struct sbx_err *err);
/* The snapshot spec names (the newest version without @VERSION) among
 * tenant's (NULL or "": the snapshots without a tenant); 4 when there is
 * none. */
int sbx_snapshot_find(struct sbx_state *st, const char *tenant, const char *spec, struct sbx_snapshot *s,
		      struct sbx_err *err);
/* The snapshot a template directory holds (template.h: t->snapshot). */
struct sbx_template;
int sbx_snapshot_of_template(const struct sbx_template *t, struct sbx_snapshot *s, struct sbx_err *err);
/* The template a snapshot was taken from (for a published template, the
 * template itself); 4 when it is gone, 5 when its content changed. */
int sbx_snapshot_template(struct sbx_state *st, const struct sbx_snapshot *s, struct sbx_template *t,
			  struct sbx_err *err);

/* sbx-create: make s, the record being built from o and its policy, a
 * restore of snap: its vCPUs, memory, disk and devices.  What would need
 * another shape or other devices is refused (3, 69 for another VMM or
 * acceleration), saying why. */
struct sbx_session;
struct sbx_create_opts;
struct sbx_policy;
int sbx_snapshot_apply(const struct sbx_snapshot *snap, const struct sbx_create_opts *o, const struct sbx_policy *p,
		       struct sbx_session *s, struct sbx_err *err);
/* Still there?  Called under the global lock, which rm takes too. */
int sbx_snapshot_present(const struct sbx_snapshot *snap, struct sbx_err *err);

struct sbx_snapshot_save_opts {
	const char *session;
	const char *tenant; /* NULL: the session's own, whatever it is */
	const char *spec;   /* NAME[@VERSION]; without one, a timestamp */
	int to_template;    /* publish into the templates directory */
	int progress_fd;    /* draw progress there when it is a terminal; -1: never */
};
/* Save a session (running or paused; no exec may be running: 5) as a
 * snapshot of its tenant, or as a template.  An existing NAME@VERSION is
 * 5.  The source goes on as it was.  Audited (snapshot.save). */
int sbx_snapshot_save(struct sbx_state *st, const struct sbx_snapshot_save_opts *o, struct sbx_snapshot *out,
		      struct sbx_err *err);

/* Fork (sbx-snapshot fork): n running copies of a session, each restored
 * as sbx-create -s restores (its own ID, hostname, clock, RNG; execs
 * running at the save run on in each), from a snapshot that is the save's
 * work directory and gone once they run; the source goes on.  The tenant's
 * quotas must allow all n before anything is done (75).  All or nothing:
 * a failed copy destroys those made.  ids: n of them on success.  Audited
 * (snapshot.fork). */
#define SBX_FORK_MAX 16u
struct sbx_policy;
struct sbx_snapshot_fork_opts {
	const char *session;
	const char *tenant;              /* NULL: the session's own */
	unsigned n;                      /* 1..SBX_FORK_MAX; 3 otherwise */
	const struct sbx_policy *policy; /* the copies' (as sbx-create -p); NULL: the defaults */
};
int sbx_snapshot_fork(struct sbx_state *st, const struct sbx_snapshot_fork_opts *o, char (*ids)[SBX_ID_MAX + 1],
		      uint64_t *fork_ms, struct sbx_err *err);

/* References of the snapshots (of tenant, NULL: everyone's) saved from a
 * session of template tmpl_ref@version (template.h). */
json_t *sbx_snapshot_of_base(struct sbx_state *st, const char *tmpl_ref, const char *version, const char *tenant);

/* The tenant's snapshots (name: only those; NULL: all), oldest first by
 * name then creation, as JSON objects; 4 when name matches none. */
int sbx_snapshot_list(struct sbx_state *st, const char *tenant, const char *name, json_t **out, struct sbx_err *err);
/* Remove NAME@VERSION, or every version of NAME.  A snapshot a live
 * session (or warm-pool member) was restored from is kept (5) unless
 * force; then nothing is removed.  *removed: a JSON array of references
 * (the caller decrefs).  Audited (snapshot.rm). */
int sbx_snapshot_rm(struct sbx_state *st, const char *tenant, const char *spec, int force, json_t **removed,
		    struct sbx_err *err);

/* Suspend to disk (sbx-snapshot suspend, the idle policy): the session's
 * memory image is LIB/sessions/ID/suspend/memory.zst, built in
 * .suspend-tmp and renamed; the monitor that wrote it stays and resumes
 * from it (monitor/suspend.c).  The session's state is "suspended". */
#define SBX_SUSPEND_DIR "suspend"
#define SBX_SUSPEND_TMP ".suspend-tmp"
/* sbx_session_vmctl (vmctl.h) with SBX_VMCTL_SUSPEND suspends a session (running
 * or paused; execs may run: they carry on after the resume), and
 * SBX_VMCTL_RESUME resumes a suspended one as it does a paused one; so
 * does any guest operation (sbx-exec, sbx-cp).  A session with a NIC is
 * refused (5); a full disk leaves it running (75, saying so).  Audited by
 * the monitor (session.suspend, session.resume). */
/* Remove a suspend's image (whole or half) of a session whose monitor is
 * gone; 1 when there was one (sbx-gc, when remove). */
int sbx_suspend_leftovers(struct sbx_state *st, const char *id, int remove);

#endif
