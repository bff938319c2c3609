/* The host's apt sources as sbx reads them for {type: apt} (aptsrc.h):
 * the one-line and deb822 formats, what is kept, what is skipped, and
 * what is refused. */
#include <stdio.h>
#include <string.h>

#include "aptsrc.h"
#include "tap.h"

static int parse(const char *text, int deb822, struct sbx_aptsrc_list *l, char *why)
{
	memset(l, 0, sizeof *l);
	why[0] = 0;
	return sbx_aptsrc_parse(text, strlen(text), deb822, l, why, 200);
}

int main(void)
{
	struct sbx_aptsrc_list l;
	char why[200];

	/* One-line: options, comments, several components, trailing slash. */
	ok(parse("# a comment\n"
		 "deb [arch=amd64 signed-by=/usr/share/keyrings/k.gpg] http://deb.example.org/debian/ bookworm main "
		 "contrib # trailing\n"
		 "deb-src http://deb.example.org/debian bookworm main\n"
		 "deb http://security.example.org/debian-security bookworm-security main\n",
		 0, &l, why) == 0,
	   "a sources.list parses");
	ok(l.n == 2, "deb lines only (deb-src left out)");
	ok(!strcmp(l.v[0].uri, "http://deb.example.org/debian") && !strcmp(l.v[0].suite, "bookworm") &&
		   !strcmp(l.v[0].components, "main contrib") && !strcmp(l.v[0].signed_by, "/usr/share/keyrings/k.gpg"),
	   "URI (its trailing slash dropped), suite, components, signed-by");
	ok(!strcmp(l.v[1].suite, "bookworm-security") && !l.v[1].signed_by[0], "no signed-by: empty");
	ok(parse("deb [ arch=amd64 ] http://deb.example.org/debian bookworm main\n", 0, &l, why) == 0 && l.n == 1,
	   "an option list with blanks inside its brackets");
	ok(parse("deb file:/srv/mirror bookworm main\ndeb cdrom:[Debian]/ bookworm main\n"
		 "deb mirror+http://m.example.org/list bookworm main\n",
		 0, &l, why) == 0 &&
		   l.n == 0,
	   "file:, cdrom: and mirror+ sources are skipped: the cache cannot fetch them");
	ok(parse("deb http://deb.example.org/debian bookworm/updates\n", 0, &l, why) == 0 && l.n == 0,
	   "an exact-path source (no components) is skipped");
	ok(parse("deb [arch=amd64 http://deb.example.org/debian bookworm main\n", 0, &l, why) < 0 && strstr(why, "']'"),
	   "an option list without its ']': refused");
	ok(parse("deb http://user:pw@deb.example.org/debian bookworm main\n", 0, &l, why) == 0 && l.n == 0,
	   "a URI with user info is skipped (never fetched with credentials)");

	/* deb822. */
	ok(parse("Types: deb deb-src\n"
		 "# comment\n"
		 "URIs: http://deb.example.org/debian\n"
		 "Suites: bookworm bookworm-updates\n"
		 "Components: main\n"
		 "Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg\n"
		 "\n"
		 "Types: deb\n"
		 "URIs: http://security.example.org/debian-security\n"
		 "Suites: bookworm-security\n"
		 "Components: main non-free-firmware\n"
		 "Enabled: no\n"
		 "\n"
		 "Types: deb\n"
		 "URIs: http://security.example.org/debian-security\n"
		 "Suites: bookworm-security\n"
		 "Components: main\n",
		 1, &l, why) == 0,
	   "a .sources file parses");
	ok(l.n == 3, "a stanza per URI and suite; Enabled: no left out");
	ok(!strcmp(l.v[1].suite, "bookworm-updates") &&
		   !strcmp(l.v[1].signed_by, "/usr/share/keyrings/debian-archive-keyring.gpg"),
	   "each suite of a stanza, with its keyring");
	ok(parse("Types: deb\nURIs: http://deb.example.org/debian\nSuites: bookworm\nComponents: main\n"
		 "Signed-By:\n -----BEGIN PGP PUBLIC KEY BLOCK-----\n .\n mQINBF\n -----END PGP PUBLIC KEY "
		 "BLOCK-----\n",
		 1, &l, why) == 0 &&
		   l.n == 1 && !strcmp(l.v[0].signed_by, "-"),
	   "an inline key is marked, for the create to refuse with a reason");
	ok(parse("Types: deb\nTypes: deb\n", 1, &l, why) < 0 && strstr(why, "twice"), "a field twice: refused");
	ok(parse(" continued\n", 1, &l, why) < 0, "a continuation line with no field: refused");
	ok(parse("not a field\n", 1, &l, why) < 0, "a line that is not Field: value: refused");
	ok(parse("Types: deb\nURIs: http://a.example.org/\0\n", 1, &l, why) == 0, "a text ends at its length");
	const char nul[] = "deb http://a.example.org/ x main\0";
	memset(&l, 0, sizeof l);
	ok(sbx_aptsrc_parse(nul, sizeof nul, 0, &l, why, sizeof why) < 0 && strstr(why, "NUL"), "a NUL byte: refused");

	/* Bounds: more deb entries than a list holds. */
	char big[8192];
	size_t o = 0;
	for (int i = 0; i < 40; i++)
		o += (size_t)snprintf(big + o, sizeof big - o, "deb http://m%d.example.org/debian bookworm main\n", i);
	ok(parse(big, 0, &l, why) < 0 && strstr(why, "more than"), "more than 32 deb entries: refused");

	return tap_done();
}
