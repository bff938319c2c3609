/* The policy's value checks, shared by policy.c (the YAML loader) and
 * policy_json.c (the effective policy's JSON).  Internal to the policy
 * module; the interface is policy.h.  Each returns 0, or -1 with the
 * reason in why (n bytes) where it takes one. */
#ifndef SBX_POLICY_CHECK_H
#define SBX_POLICY_CHECK_H

#include <stdbool.h>
#include <stddef.h>

#include "policy.h"

/* policy.c: the reason into why, then -1. */
int sbx_policy_whyf(char *why, size_t n, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* policy_check.c */
int sbx_policy_check_domain(const char *s, bool wild_ok, char *out, size_t outn, char *why, size_t n);
int sbx_policy_check_cidr(const char *s, struct sbx_policy_rule *r, char *why, size_t n);
int sbx_policy_check_url(const char *s, char *why, size_t n);
int sbx_policy_check_path(const char *s, char *why, size_t n);
int sbx_policy_check_ident(const char *s, bool upper_only, size_t max);

/* policy.c: the names of the enums, indexed by their value. */
extern const char *const sbx_policy_egress_names[];
extern const char *const sbx_policy_registry_names[];
extern const char *const sbx_policy_mode_names[];
extern const char *const sbx_policy_npm_scripts_names[];
extern const char *const sbx_policy_ttl_counts_names[];
extern const char *const sbx_policy_on_ttl_names[];

#endif
