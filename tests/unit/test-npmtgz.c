/* Unit tests for the npm install-script check (proxy/npmtgz.h, TAP): the
 * tarballs are written here with libarchive, as a publisher could shape
 * them; the cache end to end is tests/t1440-npm-scripts.t. */
#include <archive.h>
#include <archive_entry.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "npmtgz.h"

#include "tap.h"

struct ent {
	const char *path;
	const char *data; /* a regular file's bytes, or a symlink's target */
	int type;         /* AE_IFREG (0 means it), AE_IFLNK, AE_IFDIR */
	long long size;   /* a declared size other than strlen(data), for a bomb's header */
};

/* A tarball of the entries (gzip'd unless plain) in a memfd. */
static int tgz(const struct ent *e, size_t cnt, int plain)
{
	int fd = memfd_create("t", MFD_CLOEXEC);
	struct archive *a = archive_write_new();
	archive_write_set_format_pax_restricted(a);
	if (!plain)
		archive_write_add_filter_gzip(a);
	archive_write_open_fd(a, fd);
	for (size_t i = 0; i < cnt; i++) {
		struct archive_entry *x = archive_entry_new();
		archive_entry_set_pathname(x, e[i].path);
		int type = e[i].type ? e[i].type : (int)AE_IFREG;
		archive_entry_set_filetype(x, type);
		archive_entry_set_perm(x, 0644);
		if (type == AE_IFLNK)
			archive_entry_set_symlink(x, e[i].data);
		size_t len = type == AE_IFREG && e[i].data ? strlen(e[i].data) : 0;
		archive_entry_set_size(x, e[i].size ? e[i].size : (la_int64_t)len);
		archive_write_header(a, x);
		if (len)
			archive_write_data(a, e[i].data, len);
		archive_entry_free(x);
	}
	archive_write_close(a);
	archive_write_free(a);
	return fd;
}

static int verdict(const struct ent *e, size_t cnt, int plain, char *why, size_t wn)
{
	int fd = tgz(e, cnt, plain);
	int r = sbx_npm_tgz_scripts(fd, why, wn);
	close(fd);
	return r;
}

#define R(p, d)                                                                                                        \
	{                                                                                                              \
		(p), (d), AE_IFREG, 0                                                                                  \
	}
#define L(p, t)                                                                                                        \
	{                                                                                                              \
		(p), (t), AE_IFLNK, 0                                                                                  \
	}
#define V(arr, plain) verdict(arr, sizeof(arr) / sizeof(arr[0]), plain, why, sizeof why)

static void test_tarballs(void)
{
	char why[300];
	const struct ent clean[] = { R("package/package.json",
				       "{\"name\":\"a\",\"scripts\":{\"test\":\"x\",\"prepare\":\"y\"}}"),
				     R("package/index.js", "1") };
	ok(V(clean, 0) == 0, "a package with only test and prepare scripts: none npm runs at install");
	ok(V(clean, 1) == 0, "the same, not gzip'd");
	const struct ent post[] = { R("package/package.json", "{\"scripts\":{\"postinstall\":\"node evil\"}}") };
	ok(V(post, 0) == 1 && strstr(why, "postinstall") && strstr(why, "package.json"), "postinstall: named");
	const struct ent pre[] = { R("x/package.json", "{\"scripts\":{\"preinstall\":\"sh\"}}") };
	ok(V(pre, 0) == 1 && strstr(why, "preinstall"), "preinstall, under a top directory of any name");
	const struct ent inst[] = { R("./package/package.json", "{\"scripts\":{\"install\":[1]}}") };
	ok(V(inst, 0) == 1 && strstr(why, "install"), "install as a list, under ./package/");
	const struct ent empty[] = { R("package/package.json",
				       "{\"scripts\":{\"install\":\"\",\"postinstall\":null}}") };
	ok(V(empty, 0) == 0, "an empty or null install script is none");
	const struct ent gyp[] = { R("package/package.json", "{}"), R("package/binding.gyp", "{}") };
	ok(V(gyp, 0) == 1 && strstr(why, "binding.gyp"), "a binding.gyp: node-gyp rebuild");
	const struct ent gyplink[] = { R("package/package.json", "{}"), L("package/binding.gyp", "/etc/passwd") };
	ok(V(gyplink, 0) == 1, "a binding.gyp of any type");
	const struct ent nested[] = { R("package/package.json", "{}"),
				      R("package/node_modules/x/package.json", "{\"scripts\":{\"install\":\"x\"}}"),
				      R("package/sub/binding.gyp", "{}") };
	ok(V(nested, 0) == 0, "a package.json or binding.gyp deeper down is not the package's");
	const struct ent two[] = { R("package/package.json", "{}"),
				   R("other/package.json", "{\"scripts\":{\"install\":\"x\"}}") };
	ok(V(two, 0) == 1, "two tops: the second package.json lands on the first, and is checked");
	const struct ent again[] = { R("package/package.json", "{}"),
				     R("package//./package.json", "{\"scripts\":{\"install\":\"x\"}}") };
	ok(V(again, 0) == 1, "the same path spelled otherwise, later in the tarball");
	const struct ent link[] = { R("package/real.json", "{\"scripts\":{\"install\":\"x\"}}"),
				    L("package/package.json", "real.json") };
	ok(V(link, 0) == -1 && strstr(why, "not a regular file"), "a package.json that is a symlink: cannot tell");
	const struct ent dir[] = { { "package/package.json", NULL, AE_IFDIR, 0 } };
	ok(V(dir, 0) == -1, "one that is a directory");
	const struct ent none[] = { R("package/index.js", "1") };
	ok(V(none, 0) == -1 && strstr(why, "no package.json"), "no package.json at all");
	const struct ent notjson[] = { R("package/package.json", "{\"scripts\":") };
	ok(V(notjson, 0) == -1 && strstr(why, "JSON"), "a package.json that is not JSON");
	const struct ent dup[] = { R("package/package.json", "{\"scripts\":{},\"scripts\":{\"install\":\"x\"}}") };
	ok(V(dup, 0) == -1, "one with a key twice (which one npm takes is not ours to guess)");
	const struct ent climb[] = { R("package/../package.json", "{\"scripts\":{\"install\":\"x\"}}"),
				     R("package/package.json", "{}") };
	ok(V(climb, 0) == 0, "a path with .. (node-tar does not unpack it)");
	const struct ent bomb[] = { R("package/package.json", "{}"),
				    { "package/big", NULL, 0, (long long)SBX_NPMTGZ_MAX_BYTES + 1 } };
	ok(V(bomb, 0) == -1 && strstr(why, "larger than sbx inspects"),
	   "an entry declared past the bound: refused before its data is unpacked");

	int fd = memfd_create("t", MFD_CLOEXEC);
	ok(write(fd, "not a tarball at all", 20) == 20 && sbx_npm_tgz_scripts(fd, why, sizeof why) == -1,
	   "bytes that are no tarball");
	close(fd);
}

static void test_meta(void)
{
	char why[300];
	struct {
		const char *doc;
		int want;
		const char *what;
	} c[] = {
		{ "{\"name\":\"a\",\"version\":\"1.0.0\"}", 0, "plain metadata: none" },
		{ "{\"hasInstallScript\":true}", 1, "hasInstallScript (npm's abbreviated metadata)" },
		{ "{\"hasInstallScript\":false,\"scripts\":{\"test\":\"x\"}}", 0,
		  "hasInstallScript false, a test script" },
		{ "{\"scripts\":{\"postinstall\":\"x\"}}", 1, "scripts.postinstall (the full document)" },
		{ "{\"gypfile\":true}", 1, "gypfile" },
		{ "{\"scripts\":\"install\"}", 0, "scripts that are no object" },
	};
	for (size_t i = 0; i < sizeof c / sizeof c[0]; i++) {
		json_t *v = json_loads(c[i].doc, 0, NULL);
		ok(sbx_npm_meta_scripts(v, why, sizeof why) == c[i].want, c[i].what);
		json_decref(v);
	}
}

int main(void)
{
	test_tarballs();
	test_meta();
	return tap_done();
}
