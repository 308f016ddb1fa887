/* tests/metrics/test_metrics.c - the `metrics` group of the configuration:
 * series of their own for the names it lists, and the HTTP server of
 * metrics.listen, scraped with the curl program and read back with a real
 * Prometheus parser (prometheus_client's, tests/metrics/check_exposition.py):
 * 200 with the formatter's text, 404, 405, a taken port refused at open,
 * and a close that frees the port, its thread and its descriptors.
 *
 * Both curl and the parser are needed: without one a case fails, saying
 * what to install. A build without libmicrohttpd runs the cases that need
 * no server, and one that checks that `listen` is refused there. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "config.h"

#include <dlock.h>
#include "../support/test_client.h"
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static char dir[256];        /* the local backend's lock directory */
static char scratch[300];    /* curl's output files */

static int make_dirs(void **state)
{
    (void)state;
    snprintf(dir, sizeof dir, "/tmp/dlock-test-metrics-XXXXXX");
    assert_non_null(mkdtemp(dir));
    snprintf(scratch, sizeof scratch, "%s/scratch", dir);
    assert_int_equal(mkdir(scratch, 0700), 0);
    return 0;
}

static void remove_tree(const char *path)
{
    DIR *d = opendir(path);
    struct dirent *ent;
    char sub[1024];
    while (d && (ent = readdir(d))) {
        if (strcmp(ent->d_name, ".") == 0 || strcmp(ent->d_name, "..") == 0)
            continue;
        snprintf(sub, sizeof sub, "%s/%s", path, ent->d_name);
        if (ent->d_type == DT_DIR)
            remove_tree(sub);
        else
            unlink(sub);
    }
    if (d)
        closedir(d);
    rmdir(path);
}

static int remove_dirs(void **state)
{
    (void)state;
    remove_tree(dir);
    return 0;
}

/* The configuration of a client on the test's lock directory: extra is
 * put in as it is (the metrics group, or nothing). */
static int open_with(dlock_client **c, const char *extra)
{
    char text[4096];
    snprintf(text, sizeof text, "backend = \"local\";\nlocal = { dir = \"%s\"; };\n%s\n", dir, extra);
    return dlock_client_open_string(c, text);
}

static dlock_client *open_ok(const char *extra)
{
    dlock_client *c = NULL;
    int rc = open_with(&c, extra);
    if (rc != DLOCK_OK)
        fail_msg("open: %s: %s", dlock_errname(rc), dlock_errmsg());
    return c;
}

/* Takes NAME once and gives it back. */
static void take_and_release(dlock_client *c, const char *name)
{
    dlock_lock *l = test_lock_named(c, name);
    assert_int_equal(dlock_acquire(l, 0), DLOCK_OK);
    assert_int_equal(dlock_release(l), DLOCK_OK);
    dlock_lock_free(l);
}

/* The value of one exact series in a text, -1 if it is not there. */
static long long series_value(const char *text, const char *series)
{
    char needle[1200];
    snprintf(needle, sizeof needle, "\n%s ", series);
    const char *at = strstr(text, needle);
    return at ? atoll(at + strlen(needle)) : -1;
}

/* ---- the names list, with or without a server ------------------------------ */

/* Listed names get series of their own in dlock_client_metrics(), shared
 * holders of them too; other names get none, however busy. */
static void listed_names_get_their_own_series(void **state)
{
    (void)state;
    const char *group = "metrics = { names = ( \"jobs/nightly\", \"reports\" ); };";
    dlock_client *a = open_ok(group);
    dlock_client *b = open_ok(group);
    take_and_release(a, "jobs/nightly");
    take_and_release(a, "jobs/nightly");
    take_and_release(a, "not/listed");
    /* a holds it: b waits 50 ms in vain */
    dlock_lock *held = test_lock_named(a, "jobs/nightly");
    assert_int_equal(dlock_acquire(held, 0), DLOCK_OK);
    dlock_lock *waiting = test_lock_named(b, "jobs/nightly");
    assert_int_equal(dlock_acquire(waiting, 50), DLOCK_ETIMEDOUT);
    dlock_lock_free(waiting);
    assert_int_equal(dlock_release(held), DLOCK_OK);
    dlock_lock_free(held);
    /* a shared holder of a listed name has a state of its own: it counts too */
    dlock_lock_options shared = DLOCK_LOCK_OPTIONS_INIT;
    shared.mode = DLOCK_MODE_SHARED;
    dlock_lock *reader;
    assert_int_equal(dlock_lock_new(a, "reports", 7, &shared, &reader), DLOCK_OK);
    assert_int_equal(dlock_acquire(reader, 0), DLOCK_OK);
    assert_int_equal(dlock_release(reader), DLOCK_OK);
    dlock_lock_free(reader);

    char *text = NULL;
    assert_int_equal(dlock_client_metrics(a, &text), DLOCK_OK);
    assert_int_equal(series_value(text, "dlock_grants_total{backend=\"local\"}"), 5);
    assert_int_equal(series_value(text, "dlock_name_grants_total{backend=\"local\",name=\"jobs/nightly\"}"), 3);
    assert_int_equal(series_value(text, "dlock_name_releases_total{backend=\"local\",name=\"jobs/nightly\"}"), 3);
    assert_int_equal(series_value(text, "dlock_name_hold_seconds_count{backend=\"local\",name=\"jobs/nightly\"}"), 3);
    assert_int_equal(series_value(text, "dlock_name_grants_total{backend=\"local\",name=\"reports\"}"), 1);
    assert_null(strstr(text, "not/listed"));
    free(text);
    assert_int_equal(dlock_client_metrics(b, &text), DLOCK_OK);
    assert_int_equal(series_value(text, "dlock_name_timeouts_total{backend=\"local\",name=\"jobs/nightly\"}"), 1);
    assert_int_equal(series_value(text, "dlock_name_grants_total{backend=\"local\",name=\"jobs/nightly\"}"), 0);
    free(text);
    dlock_client_close(b);
    dlock_client_close(a);
}

/* A hold of a listed name that runs out of its fixed lease is a loss of
 * that name. */
static void a_lost_hold_counts_for_its_name(void **state)
{
    (void)state;
    dlock_client *c = open_ok("metrics = { names = ( \"short\" ); };");
    dlock_lock_options o = DLOCK_LOCK_OPTIONS_INIT;
    o.lease_ms = 150;
    dlock_lock *l;
    assert_int_equal(dlock_lock_new(c, "short", 5, &o, &l), DLOCK_OK);
    assert_int_equal(dlock_acquire(l, 0), DLOCK_OK);
    for (int i = 0; i < 400 && dlock_validity_ms(l) != DLOCK_ELOST; i++)
        usleep(50 * 1000);
    assert_int_equal(dlock_release(l), DLOCK_ELOST);
    dlock_lock_free(l);
    char *text = NULL;
    assert_int_equal(dlock_client_metrics(c, &text), DLOCK_OK);
    assert_int_equal(series_value(text, "dlock_name_losses_total{backend=\"local\",name=\"short\"}"), 1);
    assert_int_equal(series_value(text, "dlock_name_releases_total{backend=\"local\",name=\"short\"}"), 0);
    free(text);
    dlock_client_close(c);
}

/* A list that is not a list of distinct UTF-8 lock names, or too long a
 * one, is refused with the reason. */
static void bad_names_are_config_errors(void **state)
{
    (void)state;
    char many[4096] = "metrics = { names = ( \"n0\"";
    for (int i = 1; i <= 100; i++)
        snprintf(many + strlen(many), sizeof many - strlen(many), ", \"n%d\"", i);
    strcat(many, " ); };");
    const struct {
        const char *group, *says;
    } cases[] = {
        { "metrics = { names = \"jobs\"; };", "'metrics.names' must be a list of strings" },
        { "metrics = { names = ( \"a\", 1 ); };", "'metrics.names' must be a list of strings" },
        { "metrics = { names = ( \"a\", \"a\" ); };", "lists \"a\" twice" },
        { "metrics = { names = ( \"\" ); };", "item 1 is not a lock name" },
        { "metrics = { names = ( \"ok\", \"\\xff\" ); };", "item 2 is not a lock name: names here must be 1..512 bytes of UTF-8" },
        { many, "lists 101 names, more than 100" },
        { "metrics = { name = ( \"a\" ); };", "unknown setting 'name' in group 'metrics' (did you mean 'names'?)" },
        { "metrics = 1;", "'metrics' must be a group" },
        { "metric = { names = ( \"a\" ); };", "unknown group 'metric' (did you mean 'metrics'?)" },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        dlock_client *c = (dlock_client *)1;
        assert_int_equal(open_with(&c, cases[i].group), DLOCK_ECONFIG);
        assert_null(c);
        if (!strstr(dlock_errmsg(), cases[i].says))
            fail_msg("case %zu: '%s' does not say '%s'", i, dlock_errmsg(), cases[i].says);
    }
}

/* An address that is not ADDRESS:PORT is a configuration error at its
 * line, with examples of what is, in a build with or without a server. */
static void a_bad_listen_address_is_a_config_error(void **state)
{
    (void)state;
    const char *bad[] = { "9464", "localhost:0", "localhost", "127.0.0.1", "127.0.0.1:", "127.0.0.1:0", "127.0.0.1:65536",
                          "127.0.0.1:94x4", "::1:9464", "[::1]9464", "[nonsense]:9464", "300.0.0.1:9464", "" };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char group[256], expect[128];
        snprintf(group, sizeof group, "metrics = { listen = \"%s\"; };", bad[i]);
        snprintf(expect, sizeof expect, "<string>:3: 'metrics.listen' is \"%s\": it must be ADDRESS:PORT", bad[i]);
        dlock_client *c = (dlock_client *)1;
        assert_int_equal(open_with(&c, group), DLOCK_ECONFIG);
        assert_null(c);
        if (!strstr(dlock_errmsg(), expect) || !strstr(dlock_errmsg(), "e.g. \"127.0.0.1:9464\""))
            fail_msg("'%s': %s", bad[i], dlock_errmsg());
    }
    dlock_client *c = (dlock_client *)1;
    assert_int_equal(open_with(&c, "metrics = { listen = 9464; };"), DLOCK_ECONFIG);
    assert_non_null(strstr(dlock_errmsg(), "'metrics.listen' must be a string"));
}

#ifdef DLOCK_HAVE_MICROHTTPD

/* ---- the server ------------------------------------------------------------------ */

static int count_entries(const char *path)
{
    DIR *d = opendir(path);
    assert_non_null(d);
    int n = 0;
    struct dirent *ent;
    while ((ent = readdir(d)))
        n += ent->d_name[0] != '.';
    closedir(d);
    return n;
}

static int open_fds(void)
{
    return count_entries("/proc/self/fd") - 1; /* less the one opendir holds */
}

static int threads(void)
{
    return count_entries("/proc/self/task");
}

/* A port nobody listens on now: the kernel's choice for port 0. */
static int free_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    assert_true(fd >= 0);
    struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
    assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof a), 0);
    socklen_t len = sizeof a;
    assert_int_equal(getsockname(fd, (struct sockaddr *)&a, &len), 0);
    close(fd);
    return ntohs(a.sin_port);
}

static char *read_file(const char *path)
{
    FILE *f = fopen(path, "re");
    if (!f)
        fail_msg("cannot read %s: %s", path, strerror(errno));
    char *buf = NULL;
    size_t size = 0;
    FILE *out = open_memstream(&buf, &size);
    assert_non_null(out);
    char chunk[4096];
    size_t n;
    while ((n = fread(chunk, 1, sizeof chunk, f)) > 0)
        fwrite(chunk, 1, n, out);
    fclose(f);
    fclose(out);
    return buf;
}

/* Runs argv with stdout and stderr into out_path; returns its exit status
 * (127: it could not be started). */
static int run(char *const argv[], const char *out_path)
{
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        int fd = open(out_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
        if (fd < 0 || dup2(fd, 1) < 0 || dup2(fd, 2) < 0)
            _exit(126);
        execvp(argv[0], argv);
        _exit(127);
    }
    int status;
    while (waitpid(pid, &status, 0) < 0)
        assert_int_equal(errno, EINTR);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

/* One answer: the status, the headers as curl wrote them, the body. */
struct reply {
    int status;
    char *headers;
    char *body;
    char body_path[400];
};

static void reply_free(struct reply *r)
{
    free(r->headers);
    free(r->body);
}

/* Sends METHOD PATH to the client's server with the curl program (not
 * HEAD: curl would wait for the body that Content-Length announces), with
 * a Host header of host when it is not NULL. */
static void http_to(const char *method, int port, const char *path, const char *host, struct reply *r)
{
    char url[128], headers_path[400], out_path[400];
    snprintf(url, sizeof url, "http://127.0.0.1:%d%s", port, path);
    snprintf(headers_path, sizeof headers_path, "%s/headers", scratch);
    snprintf(r->body_path, sizeof r->body_path, "%s/body", scratch);
    snprintf(out_path, sizeof out_path, "%s/curl.out", scratch);
    char host_header[200];
    snprintf(host_header, sizeof host_header, "Host: %s", host ? host : "");
    char *argv[] = { "curl", "-sS", "--max-time", "20", "-D", headers_path, "-o", r->body_path,
                     "-w", "%{http_code}", "-X", (char *)method, url, host ? "-H" : NULL, host_header, NULL };
    int rc = run(argv, out_path);
    char *out = read_file(out_path);
    if (rc == 127)
        fail_msg("the curl program is not installed: apt-get install curl (scripts/setup.sh does)");
    if (rc != 0)
        fail_msg("curl %s %s exited %d: %s", method, url, rc, out);
    r->status = atoi(out);
    free(out);
    r->headers = read_file(headers_path);
    r->body = read_file(r->body_path);
}

static void http(const char *method, int port, const char *path, struct reply *r)
{
    http_to(method, port, path, NULL, r);
}

/* The value of a header (matched without case), or NULL; in a static
 * buffer valid until the next call. */
static const char *header(const struct reply *r, const char *name)
{
    static char value[256];
    for (const char *line = r->headers; line && *line; line = strchr(line, '\n') ? strchr(line, '\n') + 1 : NULL) {
        size_t n = strlen(name);
        if (strncasecmp(line, name, n) == 0 && line[n] == ':') {
            const char *v = line + n + 1;
            v += strspn(v, " ");
            size_t len = strcspn(v, "\r\n");
            snprintf(value, sizeof value, "%.*s", (int)len, v);
            return value;
        }
    }
    return NULL;
}

/* Fails the case unless METHOD PATH is answered with status and, when
 * allow is not NULL, with that Allow header. */
static void expect_status(int port, const char *method, const char *path, int status, const char *allow)
{
    struct reply r;
    http(method, port, path, &r);
    if (r.status != status)
        fail_msg("%s %s: %d, not %d", method, path, r.status, status);
    if (allow && (!header(&r, "allow") || strcmp(header(&r, "allow"), allow) != 0))
        fail_msg("%s %s: Allow is '%s', not '%s'", method, path, header(&r, "allow"), allow);
    reply_free(&r);
}

/* A socket connected to the client's server, or -1 with errno. */
static int connect_to(int port)
{
    int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    assert_true(s >= 0);
    struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port),
                             .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
    if (connect(s, (struct sockaddr *)&a, sizeof a) != 0) {
        int err = errno;
        close(s);
        errno = err;
        return -1;
    }
    return s;
}

/* Reads the file at body_path with the Prometheus parser and applies the
 * checks (see check_exposition.py). Returns the checker's exit status (0:
 * all hold, 1: some do not) and its output in *out (free it); fails the
 * case when the checker cannot run at all. */
static int parser_run(const char *body_path, const char *const *checks, char **out)
{
    const char *srcdir = getenv("DLOCK_TEST_SRCDIR");
    const char *python = getenv("DLOCK_TEST_PYTHON");
    char script[512], out_path[400];
    if (!srcdir || !*srcdir)
        fail_msg("DLOCK_TEST_SRCDIR is not set: run this through make check");
    /* Debian's interpreter, where python3-prometheus-client is installed,
     * whatever python3 comes first in PATH. */
    if (!python || !*python)
        python = "/usr/bin/python3";
    snprintf(script, sizeof script, "%s/metrics/check_exposition.py", srcdir);
    snprintf(out_path, sizeof out_path, "%s/parser.out", scratch);
    char *argv[40] = { (char *)python, script, (char *)body_path };
    size_t n = 3;
    for (size_t i = 0; checks[i] && n < sizeof argv / sizeof argv[0] - 1; i++)
        argv[n++] = (char *)checks[i];
    argv[n] = NULL;
    int rc = run(argv, out_path);
    *out = read_file(out_path);
    if (rc == 127)
        fail_msg("%s is not installed: apt-get install python3 python3-prometheus-client", python);
    if (rc != 0 && rc != 1)
        fail_msg("the Prometheus parser could not check (exit %d):\n%s", rc, *out);
    return rc;
}

/* Fails the case unless every check holds. */
static void check_with_parser(const char *body_path, const char *const *checks)
{
    char *out = NULL;
    if (parser_run(body_path, checks, &out) != 0)
        fail_msg("the Prometheus parser says:\n%s", out);
    free(out);
}

static dlock_client *open_serving(int port, const char *names)
{
    char group[1024];
    snprintf(group, sizeof group, "metrics = { listen = \"127.0.0.1:%d\";%s%s%s };", port,
             names ? " names = ( " : "", names ? names : "", names ? " );" : "");
    return open_ok(group);
}

/* GET /metrics answers the formatter's text as version 0.0.4 of the text
 * format, and Prometheus's parser reads it with the counts of what was
 * done; per-name series are there for the listed names only, their
 * labels escaped so that the parser gives back the names as written. */
static void scrape_reads_back_with_the_prometheus_parser(void **state)
{
    (void)state;
    int port = free_port();
    /* the second name has a quote and a backslash, as libconfig reads it */
    dlock_client *c = open_serving(port, "\"jobs/nightly\", \"we\\\"ird\\\\name\"");
    take_and_release(c, "jobs/nightly");
    take_and_release(c, "other");

    struct reply r;
    http("GET", port, "/metrics", &r);
    assert_int_equal(r.status, 200);
    assert_string_equal(header(&r, "content-type"), "text/plain; version=0.0.4");
    char *text = NULL;
    assert_int_equal(dlock_client_metrics(c, &text), DLOCK_OK);
    assert_string_equal(r.body, text);
    free(text);

    const char *checks[] = {
        "type dlock_grants counter",
        "type dlock_wait_seconds histogram",
        "type dlock_renewal_round_seconds summary",
        "type dlock_name_grants counter",
        "type dlock_name_wait_seconds histogram",
        "type dlock_name_hold_seconds histogram",
        "dlock_grants_total{backend=\"local\"} 2",
        "dlock_acquire_attempts_total{backend=\"local\"} 2",
        "dlock_releases_total{backend=\"local\"} 2",
        "dlock_wait_seconds_count{backend=\"local\"} 2",
        "dlock_name_grants_total{backend=\"local\",name=\"jobs/nightly\"} 1",
        "dlock_name_releases_total{backend=\"local\",name=\"jobs/nightly\"} 1",
        "dlock_name_wait_seconds_count{backend=\"local\",name=\"jobs/nightly\"} 1",
        "dlock_name_hold_seconds_count{backend=\"local\",name=\"jobs/nightly\"} 1",
        "dlock_name_timeouts_total{backend=\"local\",name=\"jobs/nightly\"} 0",
        "dlock_name_grants_total{backend=\"local\",name=\"we\\\"ird\\\\name\"} 0",
        "absent dlock_name_grants_total{backend=\"local\",name=\"other\"}",
        "labels name [\"jobs/nightly\", \"we\\\"ird\\\\name\"]",
        NULL,
    };
    check_with_parser(r.body_path, checks);
    reply_free(&r);

    /* a query string is not part of the path */
    expect_status(port, "GET", "/metrics?x=1", 200, NULL);
    dlock_client_close(c);
}

/* The parser is not so lenient that the checks above mean nothing: a
 * wrong count is reported. */
static void the_parser_check_catches_a_wrong_count(void **state)
{
    (void)state;
    int port = free_port();
    dlock_client *c = open_serving(port, NULL);
    take_and_release(c, "x");
    struct reply r;
    http("GET", port, "/metrics", &r);
    const char *checks[] = { "dlock_grants_total{backend=\"local\"} 7", NULL };
    char *out = NULL;
    assert_int_equal(parser_run(r.body_path, checks, &out), 1);
    assert_non_null(strstr(out, "dlock_grants_total{backend=\"local\"} is 1.0, not 7.0"));
    free(out);
    reply_free(&r);
    dlock_client_close(c);
}

/* Bound to loopback, the server answers only requests addressed to a
 * loopback name: a web page whose own name was rebound to 127.0.0.1
 * (DNS rebinding) must not read the metrics through the visitor's
 * browser. */
static void a_foreign_host_name_is_refused_on_loopback(void **state)
{
    (void)state;
    int port = free_port();
    dlock_client *c = open_serving(port, NULL);
    char host[64];
    const char *ok_names[] = { "127.0.0.1", "localhost", "LocalHost" };
    for (size_t i = 0; i < sizeof ok_names / sizeof ok_names[0]; i++) {
        struct reply r;
        snprintf(host, sizeof host, "%s:%d", ok_names[i], port);
        http_to("GET", port, "/metrics", host, &r);
        assert_int_equal(r.status, 200);
        reply_free(&r);
    }
    const char *foreign[] = { "evil.example", "evil.example:80", "127.0.0.1.evil.example", "localhost.evil" };
    for (size_t i = 0; i < sizeof foreign / sizeof foreign[0]; i++) {
        struct reply r;
        http_to("GET", port, "/metrics", foreign[i], &r);
        if (r.status != 421)
            fail_msg("Host: %s was answered %d", foreign[i], r.status);
        assert_null(strstr(r.body, "dlock_"));
        reply_free(&r);
    }
    dlock_client_close(c);
}

/* The address grammar is dlock serve's: localhost is 127.0.0.1 (never
 * looked up), and the server on it keeps the loopback Host check. */
static void localhost_is_the_loopback_address(void **state)
{
    (void)state;
    int port = free_port();
    char group[128];
    snprintf(group, sizeof group, "metrics = { listen = \"localhost:%d\"; };", port);
    dlock_client *c = open_ok(group);
    struct reply r;
    http("GET", port, "/metrics", &r);
    assert_int_equal(r.status, 200);
    assert_non_null(strstr(r.body, "dlock_"));
    reply_free(&r);
    http_to("GET", port, "/metrics", "evil.example", &r);
    assert_int_equal(r.status, 421);
    reply_free(&r);
    dlock_client_close(c);
}

/* Only /metrics is served. */
static void other_paths_are_not_found(void **state)
{
    (void)state;
    int port = free_port();
    dlock_client *c = open_serving(port, NULL);
    const char *paths[] = { "/", "/metrics/", "/metricsx", "/Metrics", "/other" };
    for (size_t i = 0; i < sizeof paths / sizeof paths[0]; i++)
        expect_status(port, "GET", paths[i], 404, NULL);
    expect_status(port, "POST", "/other", 404, NULL);
    dlock_client_close(c);
}

/* GET and HEAD only, and a 405 says so in Allow. */
static void other_methods_are_not_allowed(void **state)
{
    (void)state;
    int port = free_port();
    dlock_client *c = open_serving(port, NULL);
    const char *methods[] = { "POST", "PUT", "DELETE", "PATCH", "OPTIONS" };
    for (size_t i = 0; i < sizeof methods / sizeof methods[0]; i++)
        expect_status(port, methods[i], "/metrics", 405, "GET, HEAD");
    /* HEAD by hand: the answer ends with its headers, no body follows. */
    int s = connect_to(port);
    assert_true(s >= 0);
    const char *request = "HEAD /metrics HTTP/1.0\r\n\r\n";
    assert_int_equal(write(s, request, strlen(request)), (ssize_t)strlen(request));
    char answer[4096];
    size_t got = 0;
    ssize_t n;
    while (got < sizeof answer - 1 && (n = read(s, answer + got, sizeof answer - 1 - got)) > 0)
        got += (size_t)n;
    answer[got] = 0;
    close(s);
    assert_true(strncmp(answer, "HTTP/1.0 200 ", 13) == 0 || strncmp(answer, "HTTP/1.1 200 ", 13) == 0);
    assert_non_null(strstr(answer, "\r\nContent-Type: text/plain; version=0.0.4\r\n"));
    assert_non_null(strstr(answer, "\r\n\r\n"));
    assert_string_equal(strstr(answer, "\r\n\r\n"), "\r\n\r\n");
    dlock_client_close(c);
}

/* A port another socket (or another client) listens on fails the open
 * with what to do, and leaves nothing behind. */
static void a_taken_port_fails_the_open(void **state)
{
    (void)state;
    int port = free_port();
    int other = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port),
                             .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
    assert_int_equal(bind(other, (struct sockaddr *)&a, sizeof a), 0);
    assert_int_equal(listen(other, 1), 0);

    int fds = open_fds(), tasks = threads();
    char group[256], expect[128];
    snprintf(group, sizeof group, "metrics = { listen = \"127.0.0.1:%d\"; };", port);
    snprintf(expect, sizeof expect, "metrics.listen \"127.0.0.1:%d\": cannot listen there: Address already in use", port);
    dlock_client *c = (dlock_client *)1;
    assert_int_equal(open_with(&c, group), DLOCK_EUNAVAILABLE);
    assert_null(c);
    assert_non_null(strstr(dlock_errmsg(), expect));
    assert_non_null(strstr(dlock_errmsg(), "give each client its own port"));
    assert_int_equal(open_fds(), fds);
    assert_int_equal(threads(), tasks);
    close(other);

    /* the same with a client in the port */
    dlock_client *first = open_serving(port, NULL);
    c = (dlock_client *)1;
    assert_int_equal(open_with(&c, group), DLOCK_EUNAVAILABLE);
    assert_null(c);
    assert_non_null(strstr(dlock_errmsg(), expect));
    expect_status(port, "GET", "/metrics", 200, NULL); /* the first one still serves */
    dlock_client_close(first);
}

/* Closing the client stops the server: its thread and every descriptor
 * are gone, and a new client can listen on the same port at once. */
static void close_frees_the_port_the_thread_and_the_descriptors(void **state)
{
    (void)state;
    /* The calling thread's wake descriptor, made by its first acquire,
     * lives as long as the thread: made before counting. */
    dlock_client *warm = open_ok("");
    take_and_release(warm, "warm-up");
    dlock_client_close(warm);

    int port = free_port();
    int fds = open_fds(), tasks = threads();
    for (int round = 0; round < 3; round++) {
        dlock_client *c = open_serving(port, "\"a\"");
        take_and_release(c, "a");
        struct reply r;
        http("GET", port, "/metrics", &r);
        assert_int_equal(r.status, 200);
        assert_non_null(strstr(r.body, "dlock_name_grants_total{backend=\"local\",name=\"a\"} 1\n"));
        reply_free(&r);
        dlock_client_close(c);
        assert_int_equal(open_fds(), fds);
        assert_int_equal(threads(), tasks);
    }
    /* and nothing answers there any more */
    assert_int_equal(connect_to(port), -1);
    assert_int_equal(errno, ECONNREFUSED);
}

/* A scraper that connects and says nothing does not hold up the close. */
static void close_does_not_wait_for_an_idle_connection(void **state)
{
    (void)state;
    int port = free_port();
    dlock_client *c = open_serving(port, NULL);
    int s = connect_to(port);
    assert_true(s >= 0);
    assert_int_equal(write(s, "GET /met", 8), 8);
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    dlock_client_close(c);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double took = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
    assert_true(took < 5.0); /* the connection timeout is 10 s */
    char byte;
    assert_true(read(s, &byte, 1) <= 0); /* closed by the server */
    close(s);
}

#else /* !DLOCK_HAVE_MICROHTTPD */

/* Without libmicrohttpd, `listen` is refused and the message says why
 * and what to do; the names list still works. */
static void listen_is_refused_without_microhttpd(void **state)
{
    (void)state;
    dlock_client *c = (dlock_client *)1;
    assert_int_equal(open_with(&c, "metrics = { listen = \"127.0.0.1:9464\"; };"), DLOCK_ECONFIG);
    assert_null(c);
    assert_non_null(strstr(dlock_errmsg(), "this libdlock was built without libmicrohttpd"));
    assert_non_null(strstr(dlock_errmsg(), "--with-microhttpd=yes"));
}

#endif

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(listed_names_get_their_own_series),
        cmocka_unit_test(a_lost_hold_counts_for_its_name),
        cmocka_unit_test(bad_names_are_config_errors),
        cmocka_unit_test(a_bad_listen_address_is_a_config_error),
#ifdef DLOCK_HAVE_MICROHTTPD
        cmocka_unit_test(scrape_reads_back_with_the_prometheus_parser),
        cmocka_unit_test(the_parser_check_catches_a_wrong_count),
        cmocka_unit_test(other_paths_are_not_found),
        cmocka_unit_test(a_foreign_host_name_is_refused_on_loopback),
        cmocka_unit_test(localhost_is_the_loopback_address),
        cmocka_unit_test(other_methods_are_not_allowed),
        cmocka_unit_test(a_taken_port_fails_the_open),
        cmocka_unit_test(close_frees_the_port_the_thread_and_the_descriptors),
        cmocka_unit_test(close_does_not_wait_for_an_idle_connection),
#else
        cmocka_unit_test(listen_is_refused_without_microhttpd),
#endif
    };
    return cmocka_run_group_tests(tests, make_dirs, remove_dirs);
}
