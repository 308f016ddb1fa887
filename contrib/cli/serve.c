/* contrib/cli/serve.c - dlock serve: the operator's web panel. Reads the
 * options and the secret, binds the address (loopback unless a secret
 * guards it), and answers until SIGINT or SIGTERM (serve_http.c). */
#include "config.h"

#include "cli.h"
#include "serve.h"
#include "../http/http_listen.h"

#include <arpa/inet.h>
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define DEFAULT_LISTEN "127.0.0.1:9465"
#define DEFAULT_STALE_S 300
/* The longest secret read from a file: a token or user:password, not a
 * key file. */
#define SECRET_MAX 1024

#ifdef DLOCK_HAVE_MICROHTTPD

static void base64(const unsigned char *in, size_t len, char *out)
{
    static const char abc[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    size_t o = 0;
    for (size_t i = 0; i < len; i += 3) {
        unsigned v = (unsigned)in[i] << 16 | (i + 1 < len ? (unsigned)in[i + 1] << 8 : 0) |
                     (i + 2 < len ? in[i + 2] : 0);
        out[o++] = abc[v >> 18 & 63];
        out[o++] = abc[v >> 12 & 63];
        out[o++] = i + 1 < len ? abc[v >> 6 & 63] : '=';
        out[o++] = i + 2 < len ? abc[v & 63] : '=';
    }
    out[o] = 0;
}

/* Reads the one-line secret of path into buf; false after a message that
 * names the file and the problem but never shows what is in it. */
static bool read_secret(const char *option, const char *path, char *buf, size_t size)
{
    FILE *f = fopen(path, "r");
    if (!f) {
        fprintf(stderr, "%s: serve: %s %s: %s\n", progname, option, path, strerror(errno));
        return false;
    }
    struct stat st;
    if (fstat(fileno(f), &st) == 0 && (st.st_mode & 077))
        fprintf(stderr, "%s: serve: warning: %s can be read by other users: chmod 600 %s\n", progname, path, path);
    size_t n = fread(buf, 1, size - 1, f);
    bool longer = fgetc(f) != EOF;
    fclose(f);
    buf[n] = 0;
    while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == '\r'))
        buf[--n] = 0;
    const char *problem = longer ? "is longer than 1024 bytes"
                          : n == 0 ? "is empty"
                                   : NULL;
    for (size_t i = 0; !problem && i < n; i++)
        if ((unsigned char)buf[i] <= 0x20 || buf[i] == 0x7F)
            problem = "must hold one line of printable characters without spaces";
    if (problem) {
        fprintf(stderr, "%s: serve: %s %s %s\n", progname, option, path, problem);
        return false;
    }
    return true;
}

/* The Authorization value a request must carry, from the secret file. */
static char *expected_authorization(enum serve_auth auth, const char *path)
{
    char secret[SECRET_MAX + 1];
    const char *option = auth == AUTH_TOKEN ? "--token-file" : "--basic-auth-file";
    if (!read_secret(option, path, secret, sizeof secret))
        return NULL;
    char *out = NULL;
    size_t n = strlen(secret);
    if (auth == AUTH_TOKEN) {
        if (n < 16)
            fprintf(stderr, "%s: serve: --token-file %s holds a token shorter than 16 characters: make a longer "
                    "one (head -c 24 /dev/urandom | base64)\n", progname, path);
        else if (asprintf(&out, "Bearer %s", secret) < 0)
            out = NULL;
    } else {
        const char *colon = strchr(secret, ':');
        if (!colon || colon == secret || !colon[1])
            fprintf(stderr, "%s: serve: --basic-auth-file %s must hold USER:PASSWORD on one line\n", progname,
                    path);
        else if ((out = malloc(6 + 4 * (n / 3 + 1) + 1)) != NULL) {
            memcpy(out, "Basic ", 6);
            base64((const unsigned char *)secret, n, out + 6);
        }
    }
    memset(secret, 0, sizeof secret);
    return out;
}

/* The bound socket, its errno explained; -1 after a message. */
static int bind_listen(const struct http_address *a, const char *text)
{
    char why[512];
    int fd = http_listen_bind(a, 32, "--listen", why, sizeof why);
    if (fd < 0)
        fprintf(stderr, "%s: serve: --listen %s: %s\n", progname, text, why);
    return fd;
}

/* The address as a URL, with the port the kernel chose for port 0. */
static void url_of(int fd, char *buf, size_t size)
{
    struct sockaddr_storage ss = { 0 };
    socklen_t len = sizeof ss;
    char host[INET6_ADDRSTRLEN] = "?";
    unsigned port = 0;
    if (getsockname(fd, (struct sockaddr *)&ss, &len) == 0) {
        if (ss.ss_family == AF_INET6) {
            struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)&ss;
            inet_ntop(AF_INET6, &s6->sin6_addr, host, sizeof host);
            port = ntohs(s6->sin6_port);
        } else {
            struct sockaddr_in *s4 = (struct sockaddr_in *)&ss;
            inet_ntop(AF_INET, &s4->sin_addr, host, sizeof host);
            port = ntohs(s4->sin_port);
        }
    }
    snprintf(buf, size, ss.ss_family == AF_INET6 ? "http://[%s]:%u/" : "http://%s:%u/", host, port);
}

int cmd_serve(const char *config, int argc, char **argv)
{
    const char *listen_text = DEFAULT_LISTEN, *token_file = NULL, *basic_file = NULL;
    size_t stale_s = DEFAULT_STALE_S;
    static const struct option opts[] = {
        { "listen", required_argument, NULL, 'l' },
        { "stale-after", required_argument, NULL, 's' },
        { "token-file", required_argument, NULL, 't' },
        { "basic-auth-file", required_argument, NULL, 'b' },
        { NULL, 0, NULL, 0 },
    };
    optind = 1;
    int c;
    while ((c = getopt_long(argc, argv, "+l:s:t:b:", opts, NULL)) != -1) {
        switch (c) {
        case 'l': listen_text = optarg; break;
        case 't': token_file = optarg; break;
        case 'b': basic_file = optarg; break;
        case 's':
            if (!parse_count(optarg, 365 * 86400, &stale_s))
                return fprintf(stderr, "%s: --stale-after takes seconds, 1 or more, not '%s'\n", progname, optarg),
                       EXIT_USAGE;
            break;
        default: return EXIT_USAGE;
        }
    }
    if (optind != argc) {
        fprintf(stderr, "%s: serve takes no NAME, only options\n", progname);
        return EXIT_USAGE;
    }
    if (token_file && basic_file) {
        fprintf(stderr, "%s: serve: give --token-file or --basic-auth-file, not both\n", progname);
        return EXIT_USAGE;
    }
    struct http_address addr;
    if (!http_address_parse(listen_text, &addr)) {
        fprintf(stderr, "%s: serve: --listen takes ADDRESS:PORT (127.0.0.1:9465, [::1]:9465, 0.0.0.0:9465), "
                "not '%s'\n", progname, listen_text);
        return EXIT_USAGE;
    }
    enum serve_auth auth = token_file ? AUTH_TOKEN : basic_file ? AUTH_BASIC : AUTH_NONE;
    if (!addr.loopback && auth == AUTH_NONE) {
        fprintf(stderr, "%s: serve: %s is not a loopback address, and every lock name and holder would be open "
                "to anyone who reaches it: give --token-file F or --basic-auth-file F, or listen on 127.0.0.1\n",
                progname, listen_text);
        return EXIT_USAGE;
    }
    struct serve_settings s = { .stale_ms = (int64_t)stale_s * 1000, .auth = auth };
    if (auth != AUTH_NONE && !(s.expected = expected_authorization(auth, token_file ? token_file : basic_file)))
        return EXIT_USAGE;

    /* The signals are blocked before libmicrohttpd starts its threads, so
     * they all inherit the mask and the signal comes to sigwait below. */
    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGINT);
    sigaddset(&sigs, SIGTERM);
    sigaddset(&sigs, SIGHUP);
    pthread_sigmask(SIG_BLOCK, &sigs, NULL);

    int code = open_client(&s.client, config);
    if (code != 0) {
        free(s.expected);
        return code;
    }
    s.backend = dlock_client_backend(s.client);
    int fd = bind_listen(&addr, listen_text);
    char url[128];
    if (fd >= 0)
        url_of(fd, url, sizeof url);
    struct serve_http *server = fd < 0 ? NULL : serve_http_start(fd, &addr, &s);
    if (!server) {
        dlock_client_close(s.client);
        free(s.expected);
        return EXIT_UNAVAILABLE;
    }
    printf("%s: serving the %s backend's locks at %s (holds older than %zu s are stale)\n", progname, s.backend,
           url, stale_s);
    fflush(stdout);
    int sig;
    while (sigwait(&sigs, &sig) != 0)
        ;
    if (serve_http_stop(server))
        dlock_client_close(s.client);
    else
        fprintf(stderr, "%s: serve: listings of the backend still running at exit\n", progname);
    free(s.expected);
    return 0;
}

#else /* !DLOCK_HAVE_MICROHTTPD */

int cmd_serve(const char *config, int argc, char **argv)
{
    (void)config; (void)argc; (void)argv;
    fprintf(stderr, "%s: serve: this dlock was built without libmicrohttpd: install it (Debian: "
            "libmicrohttpd-dev) and configure with --with-microhttpd=yes\n", progname);
    return EXIT_UNAVAILABLE;
}

#endif
