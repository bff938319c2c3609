/* The audit trail: LIB/audit.log, one JSON record per line, each carrying
 * the SHA-256 of the line before it, so an edit, a deletion or a reordering
 * anywhere but at the very end breaks the chain.  The end is anchored by
 * LIB/audit.head (last seq and hash), which catches removal of the last
 * records; a copy shipped off the host (sbx-audit --jsonl) is the anchor an
 * attacker with root on this host cannot rewrite.
 *
 * Event types (see sbx-audit(1) for their fields): session.create,
 * session.destroy, session.expire, session.crash, session.stop, exec.start, exec.end,
 * files.upload, files.download, gc.reclaim, policy.refused, package.fetch,
 * workspace.create, workspace.attach, workspace.remove, session.pause,
 * session.resume, snapshot.save, snapshot.rm, template.rm, net.connect,
 * net.close, dns.query, net.lost, net.suppressed, net.totals (the session
 * proxy's, egress.h; the last two its budget, sbx.yaml audit.session_max),
 * audit.segment (the first record after a rotation), audit.retention
 * (sbx-gc dropped old segments), and
 * audit.repair (written by the library itself when it discards a record
 * torn by a crash). */
#ifndef SBX_AUDIT_H
#define SBX_AUDIT_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "err.h"
#include "state.h"

/* A record longer than this is refused by append and reported as
 * malformed by verify; it bounds the tail read an append does. */
#define SBX_AUDIT_RECORD_MAX 65536

/* Append one event.  fields is borrowed (the caller keeps it) and must be
 * an object or NULL; it must not hold secrets, nor the keys the library
 * writes itself (seq, time, type, prev).  type is [a-z0-9_.], 1..63 bytes.
 * Serialised against every other appender by flock on LIB/audit.lock; the
 * record is durable (an fdatasync of the log, possibly another appender's,
 * began after its write) when this returns 0. */
int sbx_audit_append(struct sbx_state *st, const char *type, json_t *fields, struct sbx_err *err);

/* Retention (sbx.yaml audit: max_size, keep; sbx-gc): drop the oldest
 * segments beyond keep (0: none), recording it first as audit.retention
 * (dropped, dropped_through_seq, kept_from_seq), which is what lets verify
 * accept a trail that no longer starts at seq 1.  cb (may be NULL) hears
 * each segment's name; dry_run only tells.  Returns how many go, or -1. */
int sbx_audit_retain(struct sbx_state *st, unsigned keep, int dry_run, void (*cb)(const char *segment, void *ctx),
		     void *ctx, struct sbx_err *err);

enum sbx_audit_problem {
	SBX_AUDIT_INTACT = 0,
	SBX_AUDIT_EDITED,    /* a record's bytes differ from what the next record hashed */
	SBX_AUDIT_DELETED,   /* seq skips: records are missing at this line */
	SBX_AUDIT_REORDERED, /* a record is out of its place (seq goes backwards) */
	SBX_AUDIT_TRUNCATED, /* the last line is torn (no newline) */
	SBX_AUDIT_MALFORMED, /* a line that is not a well-formed record */
};

struct sbx_audit_report {
	int ok;
	uint64_t records; /* records checked before the first problem (all when ok) */
	uint64_t line;    /* 1-based line of the first problem; 0 when ok */
	enum sbx_audit_problem problem;
	char detail[256];
	uint64_t last_seq; /* the last good record, an anchor to keep elsewhere */
	char last_hash[65];
	char file[40];     /* the file of line: audit.log or a segment, audit.log.<seq> */
	uint64_t segments; /* segments read before audit.log */
};

const char *sbx_audit_problem_name(enum sbx_audit_problem p);

/* Walk the whole log and report the first problem.  Returns 0 with r->ok
 * set (intact) or clear (r says where and what); -1 only when the log
 * cannot be read at all. */
int sbx_audit_verify(struct sbx_state *st, struct sbx_audit_report *r, struct sbx_err *err);
/* The same check over bytes in memory (fuzzing, tests).  head is the
 * content of audit.head, or NULL. */
void sbx_audit_verify_buf(const char *log, size_t n, const char *head, size_t head_n, struct sbx_audit_report *r);

struct sbx_audit_filter {
	const char *session; /* exact, or NULL */
	const char *tenant;  /* exact, or NULL */
	const char *type;    /* exact; a prefix when it ends in '.' or ".*" */
	uint64_t since_ns;   /* records with since <= time < until; 0: unbounded */
	uint64_t until_ns;
};

/* Call cb for each record that passes f (NULL: all), oldest first.  Lines
 * that do not parse are skipped here (verify is what reports them).  A
 * non-zero return from cb stops the walk and is returned.  rec is borrowed
 * for the call; serialising it with JSON_COMPACT gives back the stored
 * bytes of any record the library wrote. */
int sbx_audit_read(struct sbx_state *st, const struct sbx_audit_filter *f, int (*cb)(json_t *rec, void *ctx), void *ctx,
		   struct sbx_err *err);

/* The chain, oldest first: every record's seq, the SHA-256 of its line
 * and its prev, and the line itself (its stored bytes) only when the
 * record is tenant's (NULL: everyone's).  So a tenant can check its own records against the chain
 * (each line hashes to the next one's prev) while the others' show
 * nothing but their place in it. */
int sbx_audit_chain(struct sbx_state *st, const char *tenant,
		    int (*cb)(const char *line, size_t n, uint64_t seq, const char *sha256, const char *prev,
			      void *ctx),
		    void *ctx, struct sbx_err *err);

/* A time for --since/--until: RFC 3339 ("2024-05-01T12:00:00Z", fraction
 * and numeric offset allowed; a bare date means its midnight UTC) or an age
 * before now ("90s", "15m", "1h", "2d", "1w").  Errors are SBX_EXIT_INVALID. */
int sbx_audit_parse_time(const char *s, uint64_t now_ns, uint64_t *out_ns, struct sbx_err *err);

#endif
