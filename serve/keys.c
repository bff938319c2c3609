/* sbx-serve's API keys (keys.h). */
#include "keys.h"

#include <errno.h>
#include <fcntl.h>
#include <openssl/crypto.h>
#include <sha2.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "util.h"

static int key_text_ok(const char *k)
{
	if (strncmp(k, "e2b_", 4) || strlen(k) != SERVE_KEY_LEN)
		return 0;
	for (const char *p = k + 4; *p; p++)
		if (!((*p >= '0' && *p <= '9') || (*p >= 'a' && *p <= 'f')))
			return 0;
	return 1;
}

static int id_ok(const char *id)
{
	if (strlen(id) != SERVE_KEY_ID_LEN)
		return 0;
	for (const char *p = id; *p; p++)
		if (!((*p >= '0' && *p <= '9') || (*p >= 'a' && *p <= 'f')))
			return 0;
	return 1;
}

int serve_keys_dir(struct sbx_state *st, struct sbx_err *err)
{
	if (mkdirat(st->lib_fd, "serve", 0700) < 0 && errno != EEXIST)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot make %s/serve", st->lib);
	_cleanup_close_ int s = openat(st->lib_fd, "serve", O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
	if (s < 0 || (mkdirat(s, "keys", 0700) < 0 && errno != EEXIST))
		return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot make %s/serve/keys", st->lib);
	int k = openat(s, "keys", O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
	if (k < 0)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot open %s/serve/keys", st->lib);
	return k;
}

int serve_key_add(struct sbx_state *st, const char *tenant, char *key, char *id, struct sbx_err *err)
{
	unsigned char rnd[20];
	if (getrandom(rnd, sizeof rnd, 0) != (ssize_t)sizeof rnd)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot make a key");
	memcpy(key, "e2b_", 4);
	for (size_t i = 0; i < sizeof rnd; i++)
		snprintf(key + 4 + 2 * i, 3, "%02x", rnd[i]);
	explicit_bzero(rnd, sizeof rnd);
	char hex[SHA256_DIGEST_STRING_LENGTH];
	SHA256Data((const unsigned char *)key, SERVE_KEY_LEN, hex);
	snprintf(id, SERVE_KEY_ID_LEN + 1, "%.*s", SERVE_KEY_ID_LEN, hex);
	_cleanup_close_ int kd = serve_keys_dir(st, err);
	if (kd < 0)
		return -1;
	json_t *j = json_pack("{s:s, s:s, s:s, s:I}", "id", id, "tenant", tenant ? tenant : "", "sha256", hex,
			      "created", (json_int_t)time(NULL));
	char *txt = j ? json_dumps(j, JSON_COMPACT) : NULL;
	json_decref(j);
	if (!txt)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, ENOMEM, "cannot make a key");
	char name[SERVE_KEY_ID_LEN + 8];
	snprintf(name, sizeof name, "%s.json", id);
	int rc = faccessat(kd, name, F_OK, AT_SYMLINK_NOFOLLOW) == 0
			 ? sbx_err_set(err, SBX_EXIT_CONFLICT, 0, "a key with ID %s exists already: try again", id)
			 : sbx_atomic_write_at(kd, name, txt, strlen(txt), 0600, err);
	free(txt);
	return rc;
}

/* LIB/serve/keys/NAME read whole, as JSON; NULL when missing or bad. */
static json_t *key_read(int kd, const char *name)
{
	_cleanup_close_ int fd = openat(kd, name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
	struct stat sb;
	if (fd < 0 || fstat(fd, &sb) < 0 || !S_ISREG(sb.st_mode) || sb.st_size > 4096)
		return NULL;
	return json_loadfd(fd, JSON_REJECT_DUPLICATES, NULL);
}

int serve_key_list(struct sbx_state *st, json_t **out, struct sbx_err *err)
{
	*out = json_array();
	_cleanup_close_ int kd = serve_keys_dir(st, err);
	if (kd < 0 || !*out)
		return kd < 0 ? -1 : sbx_err_set(err, SBX_EXIT_INTERNAL, ENOMEM, "cannot list the keys");
	DIR *d = fdopendir(dup(kd));
	if (!d)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot list the keys");
	char **names;
	size_t n;
	if (sbx_dir_ids(d, 0, &names, &n) < 0)
		return sbx_err_set(err, SBX_EXIT_INTERNAL, ENOMEM, "cannot list the keys");
	for (size_t i = 0; i < n; i++) {
		size_t l = strlen(names[i]);
		json_t *j = l == SERVE_KEY_ID_LEN + 5 && !strcmp(names[i] + SERVE_KEY_ID_LEN, ".json")
				    ? key_read(kd, names[i])
				    : NULL;
		if (j) {
			json_object_del(j, "sha256");
			json_array_append_new(*out, j);
		}
		free(names[i]);
	}
	free(names);
	return 0;
}

int serve_key_rm(struct sbx_state *st, const char *id, struct sbx_err *err)
{
	if (!id_ok(id))
		return sbx_err_set(err, SBX_EXIT_INVALID, 0,
				   "'%.40s' is not a key ID (12 hex digits: sbx-serve key list)", id);
	_cleanup_close_ int kd = serve_keys_dir(st, err);
	if (kd < 0)
		return -1;
	char name[SERVE_KEY_ID_LEN + 8];
	snprintf(name, sizeof name, "%s.json", id);
	if (unlinkat(kd, name, 0) < 0)
		return errno == ENOENT ? sbx_err_set(err, SBX_EXIT_NOENT, 0, "no key %s", id)
				       : sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot remove key %s", id);
	fsync(kd);
	return 0;
}

int serve_key_check(int keys_fd, const char *key, char *tenant, size_t tn, char *id, struct sbx_err *err)
{
	if (!key || !key_text_ok(key))
		return 0;
	char hex[SHA256_DIGEST_STRING_LENGTH];
	SHA256Data((const unsigned char *)key, SERVE_KEY_LEN, hex);
	char name[SERVE_KEY_ID_LEN + 8];
	snprintf(name, sizeof name, "%.*s.json", SERVE_KEY_ID_LEN, hex);
	json_t *j = key_read(keys_fd, name);
	if (!j)
		return errno == ENOENT || errno == 0
			       ? 0
			       : sbx_err_set(err, SBX_EXIT_INTERNAL, errno, "cannot read the keys");
	const char *h = json_string_value(json_object_get(j, "sha256"));
	const char *t = json_string_value(json_object_get(j, "tenant"));
	int ok = h && t && strlen(h) == strlen(hex) && CRYPTO_memcmp(h, hex, strlen(hex)) == 0 && strlen(t) < tn;
	if (ok) {
		snprintf(tenant, tn, "%s", t);
		snprintf(id, SERVE_KEY_ID_LEN + 1, "%.*s", SERVE_KEY_ID_LEN, hex);
	}
	json_decref(j);
	return ok;
}
