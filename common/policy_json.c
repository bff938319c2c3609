/* The effective policy as JSON (policy.h): sbx_policy_json writes it
 * (LIB/sessions/ID/policy.json), and the sections the session's proxy and
 * monitor read back are checked as strictly as the YAML. */
#include "policy.h"
#include "policy_check.h"

#include "yamlstrict.h"

#include <arpa/inet.h>

int sbx_policy_ports_from_json(json_t *o, struct sbx_policy *p, struct sbx_err *err)
{
	json_t *a = json_object_get(o, "ports"), *e;
	size_t i;
	p->ports.set = false;
	p->ports.n = 0;
	if (!a || json_is_null(a))
		return 0;
	if (!json_is_array(a) || json_array_size(a) > SBX_POLICY_FWD_MAX)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, 0, "the policy's ports are malformed");
	json_array_foreach (a, i, e) {
		json_t *f = json_object_get(e, "from"), *t = json_object_get(e, "to");
		json_int_t lo = json_integer_value(f), hi = json_integer_value(t);
		if (!json_is_object(e) || json_object_size(e) != 2 || !json_is_integer(f) || !json_is_integer(t) ||
		    lo < 1 || hi > 65535 || lo > hi)
			return sbx_err_set(err, SBX_EXIT_INTERNAL, 0, "the policy's ports[%zu] is malformed", i);
		p->ports.lo[i] = (uint16_t)lo;
		p->ports.hi[i] = (uint16_t)hi;
	}
	p->ports.n = (unsigned)json_array_size(a);
	p->ports.set = true;
	return 0;
}

/* packages.allow, deny, pins, lock: only the ones set, so a policy
 * without them says (and hashes, create.c's spec_hash) as before. */
static void pkg_rules_json(json_t *pkg, const struct sbx_policy *p)
{
	static const char *const keys[] = { "allow", "deny", "pins", "lock" };
	for (int k = 0; pkg && k < 4; k++) {
		json_t *o = json_object();
		for (int t = 0; o && t < 3; t++) { /* pypi, npm, apt */
			const struct sbx_policy_pkgnames *l = k == 0 ? &p->packages.allow[t] : &p->packages.deny[t];
			const struct sbx_policy_pins *pn = &p->packages.pins[t];
			json_t *a = NULL;
			if (k == 3 && p->packages.lock[t][0]) {
				a = json_string(p->packages.lock[t]);
			} else if (k == 2 && pn->set) {
				a = json_array();
				for (unsigned i = 0; a && i < pn->n; i++)
					json_array_append_new(a, json_string(pn->v[i]));
			} else if (k < 2 && l->set) {
				a = json_array();
				for (unsigned i = 0; a && i < l->n; i++)
					json_array_append_new(a, json_string(l->v[i]));
			}
			if (a)
				json_object_set_new(o, sbx_policy_registry_names[t], a);
		}
		if (o && json_object_size(o))
			json_object_set_new(pkg, keys[k], o);
		else
			json_decref(o);
	}
}

static json_t *fwd_json(const struct sbx_policy *p)
{
	if (!p->ports.set)
		return json_null();
	json_t *a = json_array();
	for (unsigned i = 0; a && i < p->ports.n; i++)
		json_array_append_new(a,
				      json_pack("{s:i, s:i}", "from", (int)p->ports.lo[i], "to", (int)p->ports.hi[i]));
	return a;
}

static json_t *paths_json(const struct sbx_policy_paths *ps)
{
	json_t *a = json_array();
	for (unsigned i = 0; a && i < ps->n; i++)
		json_array_append_new(a, json_string(ps->path[i]));
	return a;
}

static json_t *rule_json(const struct sbx_policy_rule *r)
{
	json_t *ports = json_array();
	for (unsigned i = 0; ports && i < r->nports; i++)
		json_array_append_new(ports, json_integer(r->ports[i]));
	if (r->domain[0])
		return json_pack("{s:s, s:o}", "domain", r->domain, "ports", ports);
	char a[INET6_ADDRSTRLEN], cidr[INET6_ADDRSTRLEN + 8];
	inet_ntop(r->family, r->addr, a, sizeof a);
	snprintf(cidr, sizeof cidr, "%s/%u", a, r->prefix);
	return json_pack("{s:s, s:o}", "cidr", cidr, "ports", ports);
}

/* The network section of an effective policy as sbx_policy_json wrote it
 * (LIB/sessions/ID/policy.json, read by the session's proxy), checked as
 * strictly as the YAML: anything unexpected is an error, never a wider
 * grant. */
int sbx_policy_network_from_json(json_t *o, struct sbx_policy *p, struct sbx_err *err)
{
	json_t *n = json_object_get(o, "network"), *allow = json_object_get(n, "allow"), *r;
	const char *eg = json_string_value(json_object_get(n, "egress"));
	json_t *mc = json_object_get(n, "max_connections"), *mb = json_object_get(n, "max_bytes");
	char why[300];
	size_t i;
	if (!json_is_object(n) || !eg || !json_is_array(allow) || json_array_size(allow) > SBX_POLICY_ALLOW_MAX ||
	    !json_is_boolean(json_object_get(n, "dns")) || !json_is_integer(mc) || json_integer_value(mc) < 1 ||
	    json_integer_value(mc) > 65536 || !json_is_integer(mb) || json_integer_value(mb) < 1)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, 0, "the policy's network section is malformed");
	if (!strcmp(eg, "none"))
		p->network.egress = SBX_EGRESS_NONE;
	else if (!strcmp(eg, "allowlist"))
		p->network.egress = SBX_EGRESS_ALLOWLIST;
	else
		return sbx_err_set(err, SBX_EXIT_INTERNAL, 0, "the policy's network.egress is unknown");
	p->network.dns = json_is_true(json_object_get(n, "dns"));
	p->network.max_connections = (unsigned)json_integer_value(mc);
	p->network.max_bytes = (uint64_t)json_integer_value(mb);
	p->network.nallow = 0;
	json_array_foreach (allow, i, r) {
		struct sbx_policy_rule *rule = &p->network.allow[p->network.nallow];
		const char *d = json_string_value(json_object_get(r, "domain"));
		const char *c = json_string_value(json_object_get(r, "cidr"));
		json_t *ports = json_object_get(r, "ports"), *pv;
		size_t j;
		memset(rule, 0, sizeof *rule);
		if (!d == !c || !json_is_array(ports) || !json_array_size(ports) ||
		    json_array_size(ports) > SBX_POLICY_PORTS_MAX)
			return sbx_err_set(err, SBX_EXIT_INTERNAL, 0, "network.allow[%zu] is malformed", i);
		if ((d && sbx_policy_check_domain(d, true, rule->domain, sizeof rule->domain, why, sizeof why) < 0) ||
		    (c && sbx_policy_check_cidr(c, rule, why, sizeof why) < 0))
			return sbx_err_set(err, SBX_EXIT_INTERNAL, 0, "network.allow[%zu]: %s", i, why);
		json_array_foreach (ports, j, pv) {
			json_int_t v = json_integer_value(pv);
			if (!json_is_integer(pv) || v < 1 || v > 65535)
				return sbx_err_set(err, SBX_EXIT_INTERNAL, 0, "network.allow[%zu] has a bad port", i);
			rule->ports[rule->nports++] = (uint16_t)v;
		}
		p->network.nallow++;
	}
	return 0;
}

#define JI(v) ((json_int_t)(v))

json_t *sbx_policy_json(const struct sbx_policy *p)
{
	const typeof(p->resources) *r = &p->resources;
	json_t *allow = json_array(), *regs = json_array(), *secrets = json_array();
	for (unsigned i = 0; allow && i < p->network.nallow; i++)
		json_array_append_new(allow, rule_json(&p->network.allow[i]));
	for (unsigned i = 0; regs && i < p->packages.nregistries; i++) {
		const struct sbx_policy_registry *g = &p->packages.registries[i];
		json_t *e = json_pack("{s:s}", "type", sbx_policy_registry_names[g->type]);
		if (e && g->url[0])
			json_object_set_new(e, "url", json_string(g->url));
		if (e && g->keyring[0])
			json_object_set_new(e, "keyring", json_string(g->keyring));
		json_array_append_new(regs, e);
	}
	for (unsigned i = 0; secrets && i < p->nsecrets; i++) {
		const struct sbx_policy_secret *s = &p->secrets[i];
		json_array_append_new(secrets, json_pack("{s:s, s:s}", "name", s->name,
							 s->from_env[0] ? "from_env" : "from_file",
							 s->from_env[0] ? s->from_env : s->from_file));
	}
	json_t *res = json_pack("{s:i, s:I, s:I, s:f, s:{s:i, s:i}, s:I, s:{s:I, s:I}, s:I, s:I, s:I, s:b, s:I, s:I}",
				"vcpus", (int)r->vcpus, "memory", JI(r->memory), "disk", JI(r->disk), "cpu_limit",
				sbx_policy_cpu_limit_milli(p) / 1000.0, "pids", "per_exec", (int)r->pids_per_exec,
				"per_session", (int)r->pids_per_session, "exec_memory", JI(r->exec_memory),
				"exec_timeout", "default", JI(r->exec_timeout_default_ms), "max",
				JI(r->exec_timeout_max_ms), "ttl", JI(r->ttl_ms), "output_cap", JI(r->output_cap),
				"output_session_cap", JI(r->output_session_cap), "require_kvm", r->require_kvm,
				"disk_bps", JI(r->disk_bps), "disk_iops", JI(r->disk_iops));
	json_t *net =
		json_pack("{s:s, s:o, s:b, s:i, s:I, s:I}", "egress", sbx_policy_egress_names[p->network.egress],
			  "allow", allow, "dns", p->network.dns, "max_connections", (int)p->network.max_connections,
			  "max_bytes", JI(p->network.max_bytes), "rate", JI(p->network.rate));
	json_t *pkg = json_pack("{s:s, s:o, s:I, s:b, s:s}", "mode", sbx_policy_mode_names[p->packages.mode],
				"registries", regs, "max_download", JI(p->packages.max_download), "require_hashes",
				p->packages.require_hashes, "npm_scripts",
				sbx_policy_npm_scripts_names[p->packages.npm_scripts]);
	pkg_rules_json(pkg, p);
	json_t *files = json_pack("{s:o, s:o, s:I, s:I}", "writable", paths_json(&p->files.writable), "exportable",
				  paths_json(&p->files.exportable), "max_transfer", JI(p->files.max_transfer),
				  "max_session_transfer", JI(p->files.max_session_transfer));
	json_t *ws = json_pack("{s:I, s:I}", "size", JI(p->workspace.size), "retention", JI(p->workspace.retention_ms));
	json_t *lc = json_pack("{s:I, s:I, s:s, s:s}", "idle_pause", JI(p->lifecycle.idle_pause_ms), "idle_suspend",
			       JI(p->lifecycle.idle_suspend_ms), "ttl_counts",
			       sbx_policy_ttl_counts_names[p->lifecycle.ttl_counts], "on_ttl",
			       sbx_policy_on_ttl_names[p->lifecycle.on_ttl]);
	return json_pack("{s:i, s:s?, s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:o}", "schema", 1, "source",
			 p->source[0] ? p->source : NULL, "resources", res, "network", net, "packages", pkg, "files",
			 files, "secrets", secrets, "workspace", ws, "ports", fwd_json(p), "lifecycle", lc);
}
