/* The strict YAML reader of every sbx configuration file: policies
 * (policy.c), sbx.yaml (hostconf.c) and template specs (tmplspec.c).  A
 * caller walks libyaml's events against its own schema with these; each
 * error is set in err as "NAME:LINE:COL: what" (exit status 3). */
#ifndef SBX_YAMLSTRICT_H
#define SBX_YAMLSTRICT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <yaml.h>

#include "err.h"

struct sbx_yaml {
	yaml_parser_t y;
	yaml_event_t ev; /* the current event (valid while have_ev) */
	bool have_ev;
	const char *name; /* for messages, already shown (sbx_yaml_show) */
	const uint8_t *buf;
	size_t n;
	unsigned depth, depth_max;
	size_t scalar_max; /* longest value accepted */
	bool value_tabs;   /* a value may hold a tab (set after sbx_yaml_open) */
	bool redact;       /* messages quote no value (a tenant's file read as root) */
	struct sbx_err *err;
};

/* Check buf as text (valid UTF-8, no controls but tab and line ends: an
 * error has a position) and start a parser over it.  The caller's buf
 * and name must outlive c; sbx_yaml_close ends it, after -1 from any
 * call too. */
int sbx_yaml_open(struct sbx_yaml *c, const char *name, const uint8_t *buf, size_t n, unsigned depth_max,
		  size_t scalar_max, struct sbx_err *err);
void sbx_yaml_close(struct sbx_yaml *c);
/* The next event into c->ev. */
int sbx_yaml_next(struct sbx_yaml *c);
/* A plain "", "~" or "null". */
bool sbx_yaml_is_null(const yaml_event_t *e);
/* "a mapping", "a list", "null", "a scalar", "nothing": for messages. */
const char *sbx_yaml_kind(const yaml_event_t *e);
/* The current event must start a node of type t (null is never taken for
 * an empty collection).  path names it in the message. */
int sbx_yaml_expect(struct sbx_yaml *c, yaml_event_type_t t, const char *path);
/* The current event's value, which must be a non-null scalar; NULL with
 * err set. */
const char *sbx_yaml_scalar(struct sbx_yaml *c, const char *path);
/* A sequence at the current event, at most max items: fn is called at
 * each item's first event with its index and path ("PATH[i]"); more
 * than max is "PATH: more than MAX WHAT" ("entries", "steps").  *count
 * (unless NULL) gets the number of items. */
typedef int (*sbx_yaml_item_fn)(struct sbx_yaml *c, void *obj, unsigned i, const char *path);
int sbx_yaml_seq(struct sbx_yaml *c, const char *path, unsigned max, const char *what, sbx_yaml_item_fn fn, void *obj,
		 unsigned *count);
/* A mapping at the current event, the one walker of every strict file
 * (policies, sbx.yaml, template specs).  keys: the names allowed (at most
 * 64), or NULL for any name (a tenant's, a template's: then at most
 * SBX_YAML_MAP_ANY of them).  Each key at most once; for each, fn is
 * called with the value's first event current, k its index in keys (-1
 * when keys is NULL), km the key's mark and path the value's ("WHERE.KEY",
 * or "KEY" at the top level).  One wording for every file:
 * "unknown key 'K' in WHERE (expected one of: ...)" ("at the top level"
 * for WHERE ""), "duplicate key 'K' in WHERE".  *seen (unless NULL) gets
 * the mask of the keys given. */
#define SBX_YAML_MAP_ANY 256
typedef int (*sbx_yaml_key_fn)(struct sbx_yaml *c, int k, const char *key, yaml_mark_t km, const char *path, void *arg);
int sbx_yaml_map(struct sbx_yaml *c, const char *where, const char *const *keys, size_t nkeys, sbx_yaml_key_fn fn,
		 void *arg, uint64_t *seen);
/* Set err at a mark (or a line and column, 1-based); always -1. */
int sbx_yaml_failm(struct sbx_yaml *c, yaml_mark_t m, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
int sbx_yaml_failat(struct sbx_yaml *c, size_t line, size_t col, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));

/* Untrusted text fit for a message: valid UTF-8, anything odd as '?',
 * cut after max characters. */
const char *sbx_yaml_show(char *out, size_t outn, const char *s, size_t max);
#define SBX_YAML_SHOW(s) sbx_yaml_show((char[256]){ 0 }, 256, (s), 48)
/* One UTF-8 sequence at p (at most n bytes): its length, 0 when invalid. */
size_t sbx_utf8_dec(const unsigned char *p, size_t n, uint32_t *cp);
/* Characters no configuration needs (controls but tab and line ends
 * outside values, DEL, C1, U+2028/9, non-characters). */
int sbx_text_bad_char(uint32_t cp, int in_scalar);

#endif
