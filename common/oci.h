/* sbx-oci: containers of the OCI runtime command line, each an sbx
 * session.  Under the runtime's --root, ROOT/ID/ holds state.json (the
 * container ID's session, bundle, holder pid and start time) and
 * exec.fifo, on which the holder waits for `start`.  IDs are the
 * engine's (Podman and CRI use 64 hex digits, longer than a session ID),
 * checked against an allowlist before any path is made of them.
 *
 * The holder is the process whose pid goes in --pid-file: forked by
 * create, it keeps the stdio the engine gave create, waits on the fifo,
 * runs process.args in the session through the exec client and exits
 * with the process's status (128+N when killed by signal N). */
#ifndef SBX_OCI_H
#define SBX_OCI_H

#include <stdint.h>

#include <jansson.h>

#include "err.h"
#include "oci_spec.h"
#include "policy.h"
#include "state.h"

#define SBX_OCI_ID_MAX 128
#define SBX_OCI_VERSION "1.0.2"

struct sbx_oci {
	char id[SBX_OCI_ID_MAX + 1];
	char session[SBX_ID_MAX + 1];
	char bundle[SBX_OCI_PATH_MAX + 1];
	char tmpl[140];
	char policy[64]; /* sbx.yaml's oci.policies entry; "": sbx's defaults */
	int pid;         /* the holder; 0 before create recorded it */
	uint64_t pid_start;
	int started;
	uint64_t created_ns, prepare_ms;
	int prepare_reused; /* the rootfs's template was there already */
	json_t *annotations;
	/* SBX_ROOT as create saw it: the engines call delete with an
	 * environment of their own making (Podman's holds XDG_RUNTIME_DIR
	 * alone), and it must find the session where create made it. */
	char sbx_root[512];
};

/* create's work, which the holder (its child) inherits. */
struct sbx_oci_ctx {
	struct sbx_state st;
	int st_open;
	char root[SBX_OCI_PATH_MAX + 1];
	int root_fd, dir_fd, fifo_fd;
	int tty_fd; /* process.terminal: the pty's other side, whose master went to the console socket */
	struct sbx_oci c;
	struct sbx_oci_spec spec;
	struct sbx_policy *pol; /* the session's: the named policy, linux.resources over it */
	int tmpl_chosen;        /* org.sbx.template: c.tmpl is the operator's, root.path not used */
};

/* 1..128 of [A-Za-z0-9_.+-], not starting with '.', '-' or '+'; 3 otherwise. */
int sbx_oci_id_check(const char *id, struct sbx_err *err);
/* Open (creating, 0700) the runtime root; a symlink there is refused. */
int sbx_oci_root_open(const char *path, struct sbx_err *err);

/* Claim ROOT/ID, read the bundle's config.json, choose its policy (the
 * org.sbx.policy annotation names an entry of sbx.yaml's oci.policies,
 * else oci.default_policy, else sbx's defaults) and template
 * (org.sbx.template names one of oci.templates, which replaces root.path;
 * unknown names and other org.sbx.* annotations are refused), make its
 * root.path a
 * template (oci_rootfs.c), boot the session, make the fifo; with
 * process.terminal, send a pty's master to the console socket (runc's
 * protocol: one SCM_RIGHTS message on a unix stream socket), which
 * process.terminal requires and which is refused without it.  On failure
 * nothing is left: no directory, no session. */
int sbx_oci_create(struct sbx_oci_ctx *x, const char *root, int root_fd, const char *id, const char *bundle,
		   const char *console, struct sbx_err *err);
/* In create: the holder is pid; record it and write pid_file (NULL:
 * none) atomically. */
int sbx_oci_created(struct sbx_oci_ctx *x, int pid, const char *pid_file, struct sbx_err *err);
/* The pid file as the engine reads it: whole or not at all. */
int sbx_oci_write_pid_file(const char *path, int pid, struct sbx_err *err);
/* Undo a create that failed after sbx_oci_create returned. */
void sbx_oci_abort(struct sbx_oci_ctx *x);
void sbx_oci_ctx_free(struct sbx_oci_ctx *x);
/* In the holder: wait for start, run the process; its exit status, or -1. */
int sbx_oci_hold(struct sbx_oci_ctx *x, struct sbx_err *err);

int sbx_oci_load(int root_fd, const char *id, struct sbx_oci *c, struct sbx_err *err);
void sbx_oci_free(struct sbx_oci *c);
/* "created", "running" or "stopped", from the holder's life and the
 * started flag; *alive: the holder is the recorded process and lives. */
const char *sbx_oci_status(const struct sbx_oci *c, int *alive);
/* runc's state JSON (ociVersion, id, status, pid, bundle, annotations). */
json_t *sbx_oci_state_json(const struct sbx_oci *c);
/* 5: started already, or stopped; 4: no such container. */
int sbx_oci_start(int root_fd, const char *id, struct sbx_err *err);
/* Signal the holder (through a pidfd, its start time checked). */
int sbx_oci_kill(int root_fd, const char *id, int sig, struct sbx_err *err);
/* Destroy the session and ROOT/ID; a live container only with force (5). */
int sbx_oci_delete(int root_fd, const char *id, int force, struct sbx_err *err);

/* exec: another process in a running container's session.  Prepare in
 * the caller (process_file: a process.json, NULL for argv alone), run in
 * the child whose pid the engine is given (its exit status, or -1). */
struct sbx_oci_exec {
	struct sbx_oci c;
	struct sbx_oci_spec spec;
	int tty_fd; /* as in sbx_oci_ctx; -1 without a terminal */
};
/* tty: --tty (a terminal for COMMAND; a process file says so itself);
 * console: --console-socket, which a terminal requires. */
int sbx_oci_exec_prepare(int root_fd, const char *id, const char *process_file, char **argv, int argc, int tty,
			 const char *console, struct sbx_oci_exec *e, struct sbx_err *err);
int sbx_oci_exec_run(struct sbx_oci_exec *e, struct sbx_err *err);
void sbx_oci_exec_free(struct sbx_oci_exec *e);

/* The terminal, runc's way: a new pty whose master goes to the unix
 * socket at sock (SCM_RIGHTS, the master's name as the data); returns
 * the other side, in raw mode (the guest's pty is the terminal; this one
 * only carries bytes), sized rows x cols when they are not 0. */
int sbx_oci_console(const char *sock, unsigned rows, unsigned cols, struct sbx_err *err);

/* oci_rootfs.c: the tree at rootfd as a template, named by a digest of
 * its content (tar of it, sorted, numeric owners), imported under
 * tmplbuild's rules once per content; tmpl gets its name, *reused 1
 * when it was there already, *ms the time taken. */
int sbx_oci_rootfs_prepare(struct sbx_state *st, int rootfd, const char *work, int work_fd, char tmpl[140], int *reused,
			   uint64_t *ms, struct sbx_err *err);
/* Open root.path: relative to the bundle (beneath it) or absolute, a
 * directory, with no symlink anywhere on the way. */
int sbx_oci_rootfs_open(int bundle_fd, const char *path, struct sbx_err *err);

#endif
