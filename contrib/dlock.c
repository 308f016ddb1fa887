/* contrib/dlock.c - the dlock command: run a command under a lock (like
 * flock(1), for any backend), look at a lock, check a config file. */
#include "config.h"

#include "cli/cli.h"
#include "cli/escape.h"

#include <dlock.h>

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/prctl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

const char *progname = "dlock";

static void usage(FILE *f)
{
    fprintf(f,
            "Usage: %s [-c FILE] COMMAND [ARGS]\n"
            "\n"
            "Commands:\n"
            "  run [--wait T] [--lease T] [--kill-after T] [--shared | --permits N]\n"
            "      NAME -- CMD [ARGS...]\n"
            "        run CMD while holding the lock NAME, then release it. CMD gets\n"
            "        DLOCK_NAME and DLOCK_FENCE in its environment. T is milliseconds,\n"
            "        or a number with ms, s or m; --wait -1 (the default) waits forever,\n"
            "        --wait 0 tries once. --lease sets a fixed lease (default: the\n"
            "        watchdog keeps the lock while CMD runs). --shared holds NAME\n"
            "        shared (beside other shared holders; flock -s); --permits N holds\n"
            "        one of N permits of the semaphore NAME.\n"
            "  elect [--value V] [--wait T] [--kill-after T] NAME -- CMD [ARGS...]\n"
            "        run CMD while this process leads the election NAME, publishing V;\n"
            "        a standby waits its turn. CMD gets DLOCK_TERM (and DLOCK_FENCE,\n"
            "        the same token) and DLOCK_NAME; exit statuses as for run\n"
            "  leader [--json] [--watch] NAME\n"
            "                        print the leader's value and term (exit 1: none);\n"
            "                        --watch prints a line per change until interrupted\n"
            "  status NAME           show whether NAME is held, by whom, and its fence\n"
            "  list [--json] [--prefix P] [--limit N] [--cursor C]\n"
            "                        list the names held or waited for (all, or the\n"
            "                        first N), with holders, fence, lease and waiters\n"
            "  break --yes NAME      take NAME from its holders (stuck ones): the fence\n"
            "                        moves past their tokens, they learn it at their\n"
            "                        next renewal\n"
            "  serve [--listen ADDR:PORT] [--stale-after S]\n"
            "        [--token-file F | --basic-auth-file F]\n"
            "                        serve a read-only web panel of the listed names,\n"
            "                        their JSON (/api/locks) and gauges (/metrics)\n"
            "  top [--interval S] [--sort age|waiters] [--once]\n"
            "                        the listed names as a table refreshed in the terminal\n"
            "  check-config FILE     report every error in a configuration file\n"
            "  metrics [NAME]        print the client's metrics (Prometheus text); with\n"
            "                        NAME, first take and release NAME once as a probe\n"
            "\n"
            "Options:\n"
            "  -c, --config FILE     configuration (default: $DLOCK_CONFIG, else the\n"
            "                        local backend in ${TMPDIR:-/tmp}/dlock-$UID)\n"
            "  -h, --help            this text\n"
            "  -V, --version         print the version\n"
            "\n"
            "Exit status of run and elect: CMD's own; 75 the lock was not had within the wait;\n"
            "69 the backend is unavailable; 78 configuration error; 70 the lock was\n"
            "lost while CMD ran (CMD got SIGTERM, and SIGKILL after --kill-after);\n"
            "64 usage error. See dlock(1).\n",
            progname);
}

/* Parses "250", "250ms", "2s", "1m", "-1", "forever". */
static bool parse_duration(const char *s, bool allow_forever, int64_t *out)
{
    if (allow_forever && (strcmp(s, "forever") == 0 || strcmp(s, "-1") == 0)) {
        *out = -1;
        return true;
    }
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || end == s || v < 0)
        return false;
    long long scale = 1;
    if (strcmp(end, "") == 0 || strcmp(end, "ms") == 0)
        scale = 1;
    else if (strcmp(end, "s") == 0)
        scale = 1000;
    else if (strcmp(end, "m") == 0)
        scale = 60000;
    else
        return false;
    if (v > INT64_MAX / scale)
        return false;
    *out = v * scale;
    return true;
}

/* ---- run ------------------------------------------------------------------------ */

struct run_state {
    dlock_lock *lock;
    dlock_election *election; /* dlock elect: the candidate, instead of lock */
    pthread_mutex_t mu;
    pid_t child;            /* > 0 while CMD runs */
    int interrupted;        /* signal that arrived before CMD started */
    int lost_pipe[2];
    int lost;               /* set by on_lost on the watchdog thread (atomic) */
};

static struct run_state run;

/* Signals are blocked in every thread and taken here, so they can cancel a
 * waiting acquire (not async-signal-safe, so not from a handler) and are
 * passed on to CMD while it runs. */
static void *signal_thread(void *arg)
{
    sigset_t *set = arg;
    for (;;) {
        int sig;
        if (sigwait(set, &sig) != 0)
            continue;
        pthread_mutex_lock(&run.mu);
        if (run.child > 0) {
            kill(run.child, sig);
        } else if (!run.interrupted) {
            run.interrupted = sig;
            if (run.election)
                dlock_election_cancel(run.election);
            else if (run.lock)
                dlock_cancel(run.lock);
        }
        pthread_mutex_unlock(&run.mu);
    }
    return NULL;
}

static void note_lost(void)
{
    __atomic_store_n(&run.lost, 1, __ATOMIC_SEQ_CST);
    char byte = 'L';
    ssize_t ignored = write(run.lost_pipe[1], &byte, 1);
    (void)ignored;
}

static void on_lost(dlock_lock *lock, void *arg)
{
    (void)lock;
    (void)arg;
    note_lost();
}

static void on_leadership_lost(dlock_election *election, void *arg)
{
    (void)election;
    (void)arg;
    note_lost();
}

/* The variables dlock sets in CMD's environment. */
static bool is_ours(const char *entry)
{
    return strncmp(entry, "DLOCK_NAME=", 11) == 0 || strncmp(entry, "DLOCK_FENCE=", 12) == 0 ||
           strncmp(entry, "DLOCK_TERM=", 11) == 0;
}

/* A copy of environ with DLOCK_NAME and DLOCK_FENCE set, and DLOCK_TERM
 * (the same token) for an election. */
static char **child_environment(const char *name, const char *fence, bool term)
{
    size_t n = 0;
    while (environ[n])
        n++;
    char **env = calloc(n + 4, sizeof *env);
    if (!env)
        return NULL;
    size_t o = 0;
    for (size_t i = 0; i < n; i++)
        if (!is_ours(environ[i]))
            env[o++] = environ[i];
    if (asprintf(&env[o++], "DLOCK_NAME=%s", name) < 0)
        env[--o] = NULL;
    if (fence && asprintf(&env[o++], "DLOCK_FENCE=%s", fence) < 0)
        env[--o] = NULL;
    if (fence && term && asprintf(&env[o++], "DLOCK_TERM=%s", fence) < 0)
        env[--o] = NULL;
    return env;
}

/* Frees the election (the lock goes with the client) once the signal
 * thread can no longer reach either. */
static void forget_hold(void)
{
    pthread_mutex_lock(&run.mu);
    dlock_election *election = run.election;
    run.election = NULL;
    run.lock = NULL;
    pthread_mutex_unlock(&run.mu);
    dlock_election_free(election);
}

static int open_pidfd(pid_t pid)
{
#ifdef SYS_pidfd_open
    return (int)syscall(SYS_pidfd_open, pid, 0);
#else
    (void)pid;
    errno = ENOSYS;
    return -1;
#endif
}

/* Starts CMD. In the child, before exec: the caller's signal mask and
 * default dispositions; SIGKILL when dlock dies (the parent-death signal,
 * checked after it is set, since dlock may already be gone), so that a
 * killed or OOM-killed dlock does not leave CMD running without the lock;
 * and no descriptor but 0-2, so that CMD cannot write on, or close, the
 * backend's authenticated connections. An exec failure comes back through
 * a close-on-exec pipe. Returns 0 and *pid, or an errno value. */
static int start_command(pid_t *pid, char **cmd, char **env, const sigset_t *mask, const sigset_t *defaults)
{
    int report[2];
    if (pipe2(report, O_CLOEXEC) != 0)
        return errno;
    pid_t parent = getpid();
    pid_t child = fork();
    if (child < 0) {
        int err = errno;
        close(report[0]);
        close(report[1]);
        return err;
    }
    if (child == 0) {
        struct sigaction dfl = { .sa_handler = SIG_DFL };
        for (int s = 1; s < NSIG; s++)
            if (sigismember(defaults, s) == 1)
                sigaction(s, &dfl, NULL);
        sigprocmask(SIG_SETMASK, mask, NULL);
        int err = 0;
        if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0)
            err = errno;
        else if (getppid() != parent)
            _exit(EXIT_SOFTWARE); /* dlock died before the signal was armed */
        int keep = report[1];
        if (keep > 3)
            syscall(SYS_close_range, 3U, (unsigned)keep - 1, 0U);
        syscall(SYS_close_range, (unsigned)keep + 1, ~0U, 0U);
        if (err == 0) {
            execvpe(cmd[0], cmd, env);
            err = errno;
        }
        ssize_t ignored = write(keep, &err, sizeof err);
        (void)ignored;
        _exit(127);
    }
    close(report[1]);
    int err = 0;
    ssize_t n;
    while ((n = read(report[0], &err, sizeof err)) < 0 && errno == EINTR)
        ;
    close(report[0]);
    if (n == (ssize_t)sizeof err && err != 0) {
        waitpid(child, NULL, 0);
        return err;
    }
    *pid = child;
    return 0;
}

/* Waits for CMD; on loss sends SIGTERM, then SIGKILL after kill_after_ms. */
static int wait_child(pid_t pid, int64_t kill_after_ms)
{
    int pidfd = open_pidfd(pid); /* readable when CMD exits; else poll every 20 ms */
    int64_t termed_at = -1;
    bool killed = false;
    for (;;) {
        int status;
        pid_t r = waitpid(pid, &status, WNOHANG);
        if (r == pid) {
            if (pidfd >= 0)
                close(pidfd);
            if (WIFEXITED(status))
                return WEXITSTATUS(status);
            return 128 + WTERMSIG(status);
        }
        if (r < 0 && errno != EINTR) {
            fprintf(stderr, "%s: waitpid: %s\n", progname, strerror(errno));
            return EXIT_SOFTWARE;
        }
        if (__atomic_load_n(&run.lost, __ATOMIC_SEQ_CST) && termed_at < 0) {
            fprintf(stderr, "%s: lock lost while the command ran; sending it SIGTERM\n", progname);
            kill(pid, SIGTERM);
            termed_at = monotonic_ms();
        }
        if (termed_at >= 0 && !killed && monotonic_ms() - termed_at >= kill_after_ms) {
            fprintf(stderr, "%s: the command ignored SIGTERM for %lld ms; sending SIGKILL\n", progname,
                    (long long)kill_after_ms);
            kill(pid, SIGKILL);
            killed = true;
        }
        struct pollfd p[2] = { { .fd = run.lost_pipe[0], .events = POLLIN }, { .fd = pidfd, .events = POLLIN } };
        int timeout = pidfd < 0 ? 20 : termed_at >= 0 && !killed ? 50 : -1;
        if (poll(p, pidfd >= 0 ? 2 : 1, timeout) > 0 && (p[0].revents & POLLIN)) {
            char buf[16];
            while (read(run.lost_pipe[0], buf, sizeof buf) > 0)
                ;
        }
    }
}

/* --permits N: 1..65535. */
static bool parse_permits(const char *text, unsigned *out)
{
    char *end;
    unsigned long v = strtoul(text, &end, 10);
    if (!*text || *end || v < 1 || v > 65535) {
        fprintf(stderr, "%s: --permits takes a number of permits, 1..65535, not '%s'\n", progname, text);
        return false;
    }
    *out = (unsigned)v;
    return true;
}

/* Takes "--wait T", "--wait=T" (and --lease, --kill-after, --shared,
 * --permits N) at argv[*i], for options written after NAME as in
 * `dlock run NAME --wait 5s -- cmd`. */
static bool run_option_after_name(int argc, char **argv, int *i, int64_t *wait_ms, int64_t *lease_ms,
                                  int64_t *kill_after_ms, bool *shared, unsigned *permits, const char **published)
{
    const char *arg = argv[*i];
    if (strcmp(arg, "--value") == 0 && *i + 1 < argc) {
        *published = argv[*i + 1];
        *i += 2;
        return true;
    }
    if (strncmp(arg, "--value=", 8) == 0) {
        *published = arg + 8;
        *i += 1;
        return true;
    }
    if (strcmp(arg, "--shared") == 0) {
        *shared = true;
        *i += 1;
        return true;
    }
    if (strcmp(arg, "--permits") == 0 && *i + 1 < argc) {
        *i += 2;
        return parse_permits(argv[*i - 1], permits);
    }
    if (strncmp(arg, "--permits=", 10) == 0) {
        *i += 1;
        return parse_permits(arg + 10, permits);
    }
    const char *names[3] = { "--wait", "--lease", "--kill-after" };
    int64_t *targets[3] = { wait_ms, lease_ms, kill_after_ms };
    for (int k = 0; k < 3; k++) {
        size_t n = strlen(names[k]);
        const char *value = NULL;
        if (strcmp(arg, names[k]) == 0 && *i + 1 < argc) {
            value = argv[*i + 1];
            *i += 2;
        } else if (strncmp(arg, names[k], n) == 0 && arg[n] == '=') {
            value = arg + n + 1;
            *i += 1;
        } else {
            continue;
        }
        if (!parse_duration(value, k == 0, targets[k])) {
            fprintf(stderr, "%s: %s takes milliseconds (or 2s, 1m%s), not '%s'\n", progname, names[k],
                    k == 0 ? ", -1" : "", value);
            return false;
        }
        return true;
    }
    fprintf(stderr, "%s: unexpected '%s' before -- (expected --wait, --lease, --kill-after, --shared, --permits "
            "or --value)\n", progname, arg);
    return false;
}

/* dlock run, and dlock elect (elect: CMD runs while this process leads
 * the election NAME). */
static int cmd_run(const char *config, int argc, char **argv, bool elect)
{
    int64_t wait_ms = -1, lease_ms = 0, kill_after_ms = 5000;
    bool shared = false;
    unsigned permits = 0;
    const char *value = NULL;
    const char *what = elect ? "elect" : "run";
    const char *kind = elect ? "election" : "lock";
    static const struct option opts[] = {
        { "value", required_argument, NULL, 'v' },
        { "wait", required_argument, NULL, 'w' },
        { "lease", required_argument, NULL, 'l' },
        { "kill-after", required_argument, NULL, 'k' },
        { "shared", no_argument, NULL, 's' },
        { "permits", required_argument, NULL, 'p' },
        { "help", no_argument, NULL, 'h' },
        { NULL, 0, NULL, 0 },
    };
    optind = 1;
    int c;
    while ((c = getopt_long(argc, argv, "+w:l:k:sp:v:h", opts, NULL)) != -1) {
        switch (c) {
        case 'v':
            value = optarg;
            break;
        case 's':
            shared = true;
            break;
        case 'p':
            if (!parse_permits(optarg, &permits))
                return EXIT_USAGE;
            break;
        case 'w':
            if (!parse_duration(optarg, true, &wait_ms))
                return fprintf(stderr, "%s: --wait takes milliseconds (or 2s, 1m, -1), not '%s'\n", progname, optarg), EXIT_USAGE;
            break;
        case 'l':
            if (!parse_duration(optarg, false, &lease_ms))
                return fprintf(stderr, "%s: --lease takes milliseconds (or 30s, 1m), not '%s'\n", progname, optarg), EXIT_USAGE;
            break;
        case 'k':
            if (!parse_duration(optarg, false, &kill_after_ms))
                return fprintf(stderr, "%s: --kill-after takes milliseconds, not '%s'\n", progname, optarg), EXIT_USAGE;
            break;
        case 'h':
            usage(stdout);
            return 0;
        default:
            return EXIT_USAGE;
        }
    }
    /* NAME, then --, then CMD; options may also follow NAME. */
    if (optind >= argc) {
        fprintf(stderr, "%s: %s needs a%s NAME and a command after --\n", progname, what,
                elect ? "n election" : " lock");
        return EXIT_USAGE;
    }
    const char *name = argv[optind++];
    while (optind < argc && strcmp(argv[optind], "--") != 0) {
        if (!run_option_after_name(argc, argv, &optind, &wait_ms, &lease_ms, &kill_after_ms, &shared, &permits,
                                   &value))
            return EXIT_USAGE;
    }
    if (elect && (shared || permits || lease_ms)) {
        fprintf(stderr, "%s: elect takes no --shared, --permits or --lease: a leader holds its election "
                "exclusively, kept by the watchdog\n", progname);
        return EXIT_USAGE;
    }
    if (!elect && value) {
        fprintf(stderr, "%s: --value is for dlock elect (the value a leader publishes)\n", progname);
        return EXIT_USAGE;
    }
    if (shared && permits) {
        fprintf(stderr, "%s: --shared and --permits do not go together: a name is a lock or a semaphore\n",
                progname);
        return EXIT_USAGE;
    }
    if (optind >= argc || strcmp(argv[optind], "--") != 0 || optind + 1 >= argc) {
        fprintf(stderr, "%s: %s needs a command after --\n", progname, what);
        return EXIT_USAGE;
    }
    char **cmd = argv + optind + 1;

    sigset_t sigs, old;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGINT);
    sigaddset(&sigs, SIGTERM);
    sigaddset(&sigs, SIGHUP);
    sigaddset(&sigs, SIGQUIT);
    pthread_sigmask(SIG_BLOCK, &sigs, &old);
    pthread_mutex_init(&run.mu, NULL);
    if (pipe2(run.lost_pipe, O_CLOEXEC | O_NONBLOCK) != 0) {
        fprintf(stderr, "%s: pipe: %s\n", progname, strerror(errno));
        return EXIT_SOFTWARE;
    }

    dlock_client *client;
    int code = open_client(&client, config);
    if (code != 0)
        return code;
    dlock_lock_options lo = DLOCK_LOCK_OPTIONS_INIT;
    lo.lease_ms = lease_ms;
    lo.on_lost = on_lost;
    lo.mode = shared ? DLOCK_MODE_SHARED : permits ? DLOCK_MODE_SEMAPHORE : DLOCK_MODE_EXCLUSIVE;
    lo.permits = permits;
    int rc;
    if (elect) {
        rc = dlock_election_new(client, name, strlen(name), value, value ? strlen(value) : 0, &run.election);
        if (rc == DLOCK_OK)
            rc = dlock_election_on_lost(run.election, on_leadership_lost, NULL);
    } else {
        rc = dlock_lock_new(client, name, strlen(name), &lo, &run.lock);
    }
    if (rc != DLOCK_OK) {
        code = fail(rc, elect ? "elect" : "bad lock");
        forget_hold();
        dlock_client_close(client);
        return code;
    }
    pthread_t sig_thread;
    pthread_create(&sig_thread, NULL, signal_thread, &sigs);

    rc = elect ? dlock_campaign(run.election, wait_ms) : dlock_acquire(run.lock, wait_ms);
    if (rc != DLOCK_OK) {
        const char *verb = elect ? "not elected" : "not acquired";
        if (rc == DLOCK_EBUSY || rc == DLOCK_ETIMEDOUT)
            fprintf(stderr, "%s: %s '%s' %s: %s\n", progname, kind, name, verb, dlock_strerror(rc));
        else if (rc == DLOCK_ECANCELLED)
            fprintf(stderr, "%s: %s '%s' %s: interrupted by signal %d\n", progname, kind, name, verb,
                    run.interrupted);
        else
            fprintf(stderr, "%s: %s '%s' %s: %s (%s)\n", progname, kind, name, verb, dlock_strerror(rc),
                    dlock_errmsg());
        forget_hold();
        dlock_client_close(client);
        return rc == DLOCK_ECANCELLED ? 128 + run.interrupted : exit_code_for(rc);
    }

    char fence_text[32];
    uint64_t fence;
    const char *fence_env = NULL;
    if ((elect ? dlock_election_term(run.election, &fence) : dlock_fence(run.lock, &fence)) == DLOCK_OK) {
        snprintf(fence_text, sizeof fence_text, "%llu", (unsigned long long)fence);
        fence_env = fence_text;
    }
    char **env = child_environment(name, fence_env, elect);
    pid_t pid = 0;
    pthread_mutex_lock(&run.mu);
    int spawn_rc = run.interrupted ? EINTR : start_command(&pid, cmd, env ? env : environ, &old, &sigs);
    if (spawn_rc == 0)
        run.child = pid;
    pthread_mutex_unlock(&run.mu);

    if (spawn_rc != 0) {
        if (spawn_rc == EINTR)
            code = 128 + run.interrupted;
        else {
            fprintf(stderr, "%s: cannot run %s: %s\n", progname, cmd[0], strerror(spawn_rc));
            code = spawn_rc == ENOENT ? 127 : 126;
        }
    } else {
        code = wait_child(pid, kill_after_ms);
        pthread_mutex_lock(&run.mu);
        run.child = 0;
        pthread_mutex_unlock(&run.mu);
    }

    rc = elect ? dlock_resign(run.election) : dlock_release(run.lock);
    if (rc == DLOCK_ELOST || __atomic_load_n(&run.lost, __ATOMIC_SEQ_CST)) {
        fprintf(stderr, "%s: %s '%s' was lost while the command ran (%s)\n", progname,
                elect ? "the leadership of" : "lock", name, dlock_errmsg());
        code = EXIT_SOFTWARE;
    } else if (rc != DLOCK_OK) {
        fprintf(stderr, "%s: warning: %s of '%s' failed: %s (%s); its lease will free it\n", progname,
                elect ? "resignation" : "release", name, dlock_strerror(rc), dlock_errmsg());
    }
    if (env) {
        for (size_t i = 0; env[i]; i++)
            if (is_ours(env[i]))
                free(env[i]);
        free(env);
    }
    forget_hold();
    dlock_client_close(client);
    return code;
}

/* ---- status, check-config, metrics -------------------------------------------- */

static int cmd_status(const char *config, int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "%s: status takes one lock NAME\n", progname);
        return EXIT_USAGE;
    }
    const char *name = argv[1];
    dlock_client *client;
    int code = open_client(&client, config);
    if (code != 0)
        return code;
    dlock_status_info info = DLOCK_STATUS_INFO_INIT;
    int rc = dlock_status(client, name, strlen(name), &info);
    if (rc != DLOCK_OK) {
        code = fail(rc, "status");
    } else if (info.held == 1) {
        /* The name and the owner as dlock list shows them: the owner is
         * whatever the backend stores, which anyone who may write the lock
         * keys can set, so nothing of it reaches the terminal raw. */
        escape_text(stdout, name, strlen(name));
        printf(": held");
        if (info.holder_pid > 0)
            printf(" by pid %lld", (long long)info.holder_pid);
        if (info.holder[0]) {
            printf(" (owner ");
            escape_text(stdout, info.holder, strnlen(info.holder, sizeof info.holder));
            printf(")");
        }
        if (info.ttl_ms >= 0)
            printf(", %lld ms of lease left", (long long)info.ttl_ms);
        printf(", fence %llu, backend %s\n", (unsigned long long)info.fence, dlock_client_backend(client));
        code = 1;
    } else if (info.held == 0) {
        escape_text(stdout, name, strlen(name));
        printf(": free, last fence %llu, backend %s\n", (unsigned long long)info.fence, dlock_client_backend(client));
        code = 0;
    } else {
        escape_text(stdout, name, strlen(name));
        printf(": unknown, backend %s\n", dlock_client_backend(client));
        code = EXIT_SOFTWARE;
    }
    dlock_client_close(client);
    return code;
}

static void print_finding(int is_error, const char *file, int line, const char *msg, void *arg)
{
    int *count = arg;
    count[is_error ? 0 : 1]++;
    if (line > 0)
        fprintf(stderr, "%s:%d: %s: %s\n", file, line, is_error ? "error" : "warning", msg);
    else
        fprintf(stderr, "%s: %s: %s\n", file, is_error ? "error" : "warning", msg);
}

static int cmd_check_config(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "%s: check-config takes one FILE\n", progname);
        return EXIT_USAGE;
    }
    int counts[2] = { 0, 0 };
    int rc = dlock_config_check(argv[1], print_finding, counts);
    if (rc == DLOCK_OK) {
        printf("%s: OK%s\n", argv[1], counts[1] ? " (with warnings)" : "");
        return 0;
    }
    if (rc == DLOCK_ECONFIG) {
        fprintf(stderr, "%s: %d error%s\n", argv[1], counts[0], counts[0] == 1 ? "" : "s");
        return EXIT_CONFIG;
    }
    return fail(rc, "check-config");
}

static int cmd_metrics(const char *config, int argc, char **argv)
{
    if (argc > 2) {
        fprintf(stderr, "%s: metrics takes at most one lock NAME\n", progname);
        return EXIT_USAGE;
    }
    dlock_client *client;
    int code = open_client(&client, config);
    if (code != 0)
        return code;
    if (argc == 2) {
        dlock_lock *lock;
        int rc = dlock_lock_new(client, argv[1], strlen(argv[1]), NULL, &lock);
        if (rc == DLOCK_OK) {
            rc = dlock_acquire(lock, 0);
            if (rc == DLOCK_OK)
                rc = dlock_release(lock);
            if (rc != DLOCK_OK && rc != DLOCK_EBUSY)
                code = fail(rc, "probe");
            dlock_lock_free(lock);
        } else {
            code = fail(rc, "probe");
        }
    }
    char *text;
    int rc = dlock_client_metrics(client, &text);
    if (rc == DLOCK_OK) {
        fputs(text, stdout);
        free(text);
    } else {
        code = fail(rc, "metrics");
    }
    dlock_client_close(client);
    return code;
}

int main(int argc, char **argv)
{
    const char *config = NULL;
    static const struct option opts[] = {
        { "config", required_argument, NULL, 'c' },
        { "help", no_argument, NULL, 'h' },
        { "version", no_argument, NULL, 'V' },
        { NULL, 0, NULL, 0 },
    };
    int c;
    while ((c = getopt_long(argc, argv, "+c:hV", opts, NULL)) != -1) {
        switch (c) {
        case 'c': config = optarg; break;
        case 'h': usage(stdout); return 0;
        case 'V': printf("dlock %s\n", dlock_version()); return 0;
        default: usage(stderr); return EXIT_USAGE;
        }
    }
    if (optind >= argc) {
        usage(stderr);
        return EXIT_USAGE;
    }
    const char *command = argv[optind];
    int sub_argc = argc - optind;
    char **sub_argv = argv + optind;
    if (strcmp(command, "run") == 0)
        return cmd_run(config, sub_argc, sub_argv, false);
    if (strcmp(command, "elect") == 0)
        return cmd_run(config, sub_argc, sub_argv, true);
    if (strcmp(command, "leader") == 0)
        return cmd_leader(config, sub_argc, sub_argv);
    if (strcmp(command, "status") == 0)
        return cmd_status(config, sub_argc, sub_argv);
    if (strcmp(command, "list") == 0)
        return cmd_list(config, sub_argc, sub_argv);
    if (strcmp(command, "break") == 0)
        return cmd_break(config, sub_argc, sub_argv);
    if (strcmp(command, "serve") == 0)
        return cmd_serve(config, sub_argc, sub_argv);
    if (strcmp(command, "top") == 0)
        return cmd_top(config, sub_argc, sub_argv);
    if (strcmp(command, "check-config") == 0)
        return cmd_check_config(sub_argc, sub_argv);
    if (strcmp(command, "metrics") == 0)
        return cmd_metrics(config, sub_argc, sub_argv);
    fprintf(stderr, "%s: unknown command '%s' (run, elect, leader, status, list, break, serve, top, "
            "check-config, metrics)\n",
            progname, command);
    return EXIT_USAGE;
}
