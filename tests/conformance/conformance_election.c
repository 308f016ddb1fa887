/* tests/conformance/conformance_election.c - leader election on every
 * backend that claims DLOCK_CAP_ELECTION: one leader at a time, terms that
 * grow, the value readable by anyone and changed in place, a standby
 * elected on a resignation and on the leader's death, a waiting campaign
 * cancelled, a loss reported and the deposed leader's write refused by its
 * term, and observers that see each change in order. A backend without the
 * capability must refuse every entry point with DLOCK_ENOTSUP. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "conformance.h"
#include "../support/campaigner.h"
#include "../support/test_time.h"

#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static const struct conformance_target *target;

static dlock_election *candidate(dlock_client *c, const char *name, const char *value)
{
    dlock_election *e = NULL;
    assert_int_equal(dlock_election_new(c, name, strlen(name), value, strlen(value), &e), DLOCK_OK);
    return e;
}

/* The leader of name as a reader sees it: its term (0 for nobody) and
 * value as a string. */
static uint64_t leader_of(dlock_client *c, const char *name, char *value, size_t cap)
{
    size_t len = 0;
    uint64_t term = 99;
    assert_int_equal(dlock_leader(c, name, strlen(name), value, cap - 1, &len, &term), DLOCK_OK);
    assert_true(len < cap);
    value[len] = 0;
    if (term == 0)
        assert_int_equal(len, 0);
    return term;
}

static void one_leader_with_growing_terms(void **state)
{
    (void)state;
    dlock_client *a = conformance_open_client(30000, 100), *b = conformance_open_client(30000, 100),
                 *reader = conformance_open_client(30000, 100);
    dlock_election *ea = candidate(a, "conf-elect", "a:1"), *eb = candidate(b, "conf-elect", "b:2");
    char value[64];
    assert_int_equal(leader_of(reader, "conf-elect", value, sizeof value), 0);
    assert_int_equal(dlock_campaign(ea, 0), DLOCK_OK);
    assert_int_equal(dlock_campaign(ea, 0), DLOCK_OK); /* already leading */
    uint64_t ta = 0, tb = 0;
    assert_int_equal(dlock_election_term(ea, &ta), DLOCK_OK);
    assert_true(ta > 0);
    assert_int_equal(dlock_campaign(eb, 0), DLOCK_EBUSY);
    assert_int_equal(dlock_election_term(eb, &tb), DLOCK_ENOTOWNER);
    assert_int_equal(leader_of(reader, "conf-elect", value, sizeof value), ta);
    assert_string_equal(value, "a:1");
    assert_int_equal(dlock_resign(ea), DLOCK_OK);
    assert_int_equal(dlock_resign(ea), DLOCK_ENOTOWNER);
    assert_int_equal(leader_of(reader, "conf-elect", value, sizeof value), 0);
    assert_int_equal(dlock_campaign(eb, 0), DLOCK_OK);
    assert_int_equal(dlock_election_term(eb, &tb), DLOCK_OK);
    assert_true(tb > ta);
    assert_int_equal(leader_of(reader, "conf-elect", value, sizeof value), tb);
    assert_string_equal(value, "b:2");
    /* A short buffer gets the start and the full length. */
    char two[2];
    size_t len = 0;
    assert_int_equal(dlock_leader(reader, "conf-elect", 10, two, sizeof two, &len, NULL), DLOCK_OK);
    assert_int_equal(len, 3);
    assert_memory_equal(two, "b:", 2);
    dlock_election_free(ea);
    dlock_election_free(eb); /* resigns */
    assert_int_equal(leader_of(reader, "conf-elect", value, sizeof value), 0);
    dlock_client_close(a);
    dlock_client_close(b);
    dlock_client_close(reader);
}

static void standby_is_elected_when_the_leader_resigns(void **state)
{
    (void)state;
    dlock_client *a = conformance_open_client(30000, 100), *b = conformance_open_client(30000, 100);
    dlock_election *ea = candidate(a, "conf-standby", "a"), *eb = candidate(b, "conf-standby", "b");
    assert_int_equal(dlock_campaign(ea, 0), DLOCK_OK);
    struct campaigner standby = { eb, -1, -99, 0 };
    pthread_t t;
    pthread_create(&t, NULL, campaigner_run, &standby);
    sleep_ms(slack_ms(200));
    assert_int_equal(__atomic_load_n(&standby.rc, __ATOMIC_ACQUIRE), -99); /* still waiting */
    /* The leadership is the election object's: resigned from a thread
     * that did not campaign. */
    int64_t resigned_at = now_ms();
    assert_int_equal(dlock_resign(ea), DLOCK_OK);
    pthread_join(t, NULL);
    assert_int_equal(standby.rc, DLOCK_OK);
    if (standby.done_at - resigned_at > slack_ms(1000))
        fail_msg("the standby was elected %lld ms after the resignation",
                 (long long)(standby.done_at - resigned_at));
    char value[16];
    assert_true(leader_of(a, "conf-standby", value, sizeof value) > 0);
    assert_string_equal(value, "b");
    dlock_election_free(ea);
    dlock_election_free(eb);
    dlock_client_close(a);
    dlock_client_close(b);
}

static void *resign_thread(void *arg)
{
    struct campaigner *c = arg;
    c->rc = dlock_resign(c->e);
    return NULL;
}

static void leadership_belongs_to_the_election_not_the_thread(void **state)
{
    (void)state;
    dlock_client *a = conformance_open_client(30000, 100);
    dlock_election *e1 = candidate(a, "conf-owner-e", "one"), *e2 = candidate(a, "conf-owner-e", "two");
    assert_int_equal(dlock_campaign(e1, 0), DLOCK_OK);
    /* Another candidate of the same client and thread is another holder. */
    assert_int_equal(dlock_campaign(e2, 0), DLOCK_EBUSY);
    struct campaigner r = { e1, 0, -99, 0 };
    pthread_t t;
    pthread_create(&t, NULL, resign_thread, &r);
    pthread_join(t, NULL);
    assert_int_equal(r.rc, DLOCK_OK);
    assert_int_equal(dlock_campaign(e2, 0), DLOCK_OK);
    dlock_election_free(e1);
    dlock_election_free(e2);
    dlock_client_close(a);
}

static void proclaim_changes_the_value_not_the_term(void **state)
{
    (void)state;
    dlock_client *a = conformance_open_client(30000, 100), *b = conformance_open_client(30000, 100);
    dlock_election *ea = candidate(a, "conf-proclaim", "first"), *eb = candidate(b, "conf-proclaim", "other");
    assert_int_equal(dlock_campaign(ea, 0), DLOCK_OK);
    uint64_t term = 0;
    assert_int_equal(dlock_election_term(ea, &term), DLOCK_OK);
    assert_int_equal(dlock_proclaim(ea, "second", 6), DLOCK_OK);
    char value[16];
    assert_int_equal(leader_of(b, "conf-proclaim", value, sizeof value), term);
    assert_string_equal(value, "second");
    /* A value of no bytes is a value. */
    assert_int_equal(dlock_proclaim(ea, NULL, 0), DLOCK_OK);
    assert_int_equal(leader_of(b, "conf-proclaim", value, sizeof value), term);
    assert_string_equal(value, "");
    /* Not leading: refused, kept for the next campaign. */
    assert_int_equal(dlock_proclaim(eb, "mine", 4), DLOCK_ENOTOWNER);
    assert_int_equal(leader_of(b, "conf-proclaim", value, sizeof value), term);
    assert_string_equal(value, "");
    assert_int_equal(dlock_resign(ea), DLOCK_OK);
    assert_int_equal(dlock_campaign(eb, 0), DLOCK_OK);
    assert_true(leader_of(a, "conf-proclaim", value, sizeof value) > term);
    assert_string_equal(value, "mine");
    dlock_election_free(ea);
    dlock_election_free(eb);
    dlock_client_close(a);
    dlock_client_close(b);
}

static void a_waiting_campaign_is_cancelled(void **state)
{
    (void)state;
    dlock_client *a = conformance_open_client(30000, 100), *b = conformance_open_client(30000, 100);
    dlock_election *ea = candidate(a, "conf-cancel-e", "a"), *eb = candidate(b, "conf-cancel-e", "b");
    assert_int_equal(dlock_campaign(ea, 0), DLOCK_OK);
    struct campaigner standby = { eb, -1, -99, 0 };
    pthread_t t;
    pthread_create(&t, NULL, campaigner_run, &standby);
    sleep_ms(slack_ms(200));
    int64_t cancelled_at = now_ms();
    assert_int_equal(dlock_election_cancel(eb), DLOCK_OK);
    pthread_join(t, NULL);
    assert_int_equal(standby.rc, DLOCK_ECANCELLED);
    assert_true(standby.done_at - cancelled_at < slack_ms(500));
    char value[16];
    assert_true(leader_of(b, "conf-cancel-e", value, sizeof value) > 0);
    assert_string_equal(value, "a");
    dlock_election_free(ea);
    dlock_election_free(eb);
    dlock_client_close(a);
    dlock_client_close(b);
}

/* A child process leading name with a lease of 1 s, until killed. */
static pid_t child_leading(const char *name)
{
    int p[2];
    assert_int_equal(pipe(p), 0);
    pid_t pid = fork();
    if (pid == 0) {
        close(p[0]);
        dlock_client *c = conformance_open_client(1000, 100);
        dlock_election *e = NULL;
        if (dlock_election_new(c, name, strlen(name), "child", 5, &e) != DLOCK_OK || dlock_campaign(e, 2000) != DLOCK_OK)
            _exit(1);
        (void)!write(p[1], "x", 1);
        for (;;)
            pause();
    }
    close(p[1]);
    char x;
    assert_int_equal(read(p[0], &x, 1), 1);
    close(p[0]);
    return pid;
}

static void a_killed_leader_is_replaced_within_its_lease(void **state)
{
    (void)state;
    pid_t pid = child_leading("conf-killed-e");
    dlock_client *b = conformance_open_client(1000, 100);
    dlock_election *eb = candidate(b, "conf-killed-e", "standby");
    char value[16];
    uint64_t old = leader_of(b, "conf-killed-e", value, sizeof value);
    assert_true(old > 0);
    assert_string_equal(value, "child");
    assert_int_equal(dlock_campaign(eb, 0), DLOCK_EBUSY);
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    int64_t t0 = now_ms();
    assert_int_equal(dlock_campaign(eb, 5000), DLOCK_OK);
    int64_t took = now_ms() - t0;
    if (took > 1000 + slack_ms(250) + target->expiry_slack_ms)
        fail_msg("the killed leader was replaced after %lld ms", (long long)took);
    uint64_t term = 0;
    assert_int_equal(dlock_election_term(eb, &term), DLOCK_OK);
    assert_true(term > old);
    assert_int_equal(leader_of(b, "conf-killed-e", value, sizeof value), term);
    assert_string_equal(value, "standby");
    dlock_election_free(eb);
    dlock_client_close(b);
}

struct lost_note {
    pthread_mutex_t mu;
    int calls;
    int term_rc;
};

static void note_lost(dlock_election *e, void *arg)
{
    struct lost_note *n = arg;
    uint64_t term;
    int rc = dlock_election_term(e, &term);
    pthread_mutex_lock(&n->mu);
    n->calls++;
    n->term_rc = rc;
    pthread_mutex_unlock(&n->mu);
}

/* The hold taken away on the server: the leader hears of it (on_lost) at
 * its next renewal, the next leader's term is greater, and a resource
 * that checks terms refuses the deposed leader's late write. */
static void a_deposed_leader_learns_it_and_its_term_is_refused(void **state)
{
    (void)state;
    dlock_client *a = conformance_open_client(900, 100), *b = conformance_open_client(900, 100);
    dlock_election *ea = candidate(a, "conf-deposed", "a"), *eb = candidate(b, "conf-deposed", "b");
    struct lost_note note = { PTHREAD_MUTEX_INITIALIZER, 0, 0 };
    assert_int_equal(dlock_election_on_lost(ea, note_lost, &note), DLOCK_OK);
    assert_int_equal(dlock_campaign(ea, 0), DLOCK_OK);
    uint64_t ta = 0, tb = 0;
    assert_int_equal(dlock_election_term(ea, &ta), DLOCK_OK);
    target->break_hold("conf-deposed");
    assert_int_equal(dlock_campaign(eb, 3000), DLOCK_OK);
    assert_int_equal(dlock_election_term(eb, &tb), DLOCK_OK);
    assert_true(tb > ta);
    /* The old leader's next renewal (a third of 900 ms) finds it gone. */
    int64_t end = now_ms() + slack_ms(2000);
    for (;;) {
        pthread_mutex_lock(&note.mu);
        int seen = note.calls;
        pthread_mutex_unlock(&note.mu);
        if (seen > 0 || now_ms() > end)
            break;
        sleep_ms(10);
    }
    pthread_mutex_lock(&note.mu);
    int calls = note.calls, term_rc = note.term_rc;
    pthread_mutex_unlock(&note.mu);
    assert_int_equal(calls, 1);
    assert_int_equal(term_rc, DLOCK_ELOST);
    assert_int_equal(dlock_election_term(ea, &ta), DLOCK_ELOST);
    assert_int_equal(dlock_proclaim(ea, "late", 4), DLOCK_ELOST);
    /* A lost leadership is no leadership to campaign on. */
    assert_int_equal(dlock_campaign(ea, 0), DLOCK_ELOST);
    char value[16];
    assert_int_equal(leader_of(a, "conf-deposed", value, sizeof value), tb);
    assert_string_equal(value, "b");
    uint64_t highest = 0;
    assert_int_equal(dlock_fence_admit(&highest, tb), DLOCK_OK);
    assert_int_equal(dlock_fence_admit(&highest, ta), DLOCK_ESTALE);
    assert_int_equal(dlock_resign(ea), DLOCK_ELOST);
    assert_int_equal(dlock_resign(ea), DLOCK_ENOTOWNER);
    dlock_election_free(ea);
    dlock_election_free(eb);
    dlock_client_close(a);
    dlock_client_close(b);
}

static int child_lost;

static void child_note_lost(dlock_election *e, void *arg)
{
    (void)e;
    (void)arg;
    __atomic_store_n(&child_lost, 1, __ATOMIC_RELEASE);
}

/* The leader stopped (SIGSTOP) past its lease: the server frees the hold,
 * a standby is elected with a greater term, and the old leader, resumed,
 * learns of its loss (on_lost) and cannot publish; its late write with
 * the old term is refused by a resource that saw the new one. */
static void a_paused_leader_learns_its_loss_on_resuming(void **state)
{
    (void)state;
    int ready[2], told[2];
    assert_int_equal(pipe(ready), 0);
    assert_int_equal(pipe(told), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        close(ready[0]);
        close(told[0]);
        dlock_client *c = conformance_open_client(1000, 100);
        dlock_election *e = NULL;
        uint64_t term = 0;
        if (dlock_election_new(c, "conf-paused-e", 13, "old", 3, &e) != DLOCK_OK ||
            dlock_election_on_lost(e, child_note_lost, NULL) != DLOCK_OK || dlock_campaign(e, 2000) != DLOCK_OK ||
            dlock_election_term(e, &term) != DLOCK_OK)
            _exit(1);
        (void)!write(ready[1], &term, sizeof term);
        while (!__atomic_load_n(&child_lost, __ATOMIC_ACQUIRE))
            usleep(5000);
        int rc = dlock_proclaim(e, "late", 4);
        (void)!write(told[1], &rc, sizeof rc);
        /* Closed before the exit: the client's threads (the zookeeper
         * library's among them) are joined, which TSan checks in the
         * child too. */
        dlock_election_free(e);
        dlock_client_close(c);
        _exit(0);
    }
    close(ready[1]);
    close(told[1]);
    uint64_t old = 0;
    assert_int_equal(read(ready[0], &old, sizeof old), (ssize_t)sizeof old);
    kill(pid, SIGSTOP);
    dlock_client *b = conformance_open_client(1000, 100);
    dlock_election *eb = candidate(b, "conf-paused-e", "new");
    assert_int_equal(dlock_campaign(eb, 1000 + slack_ms(2000) + target->expiry_slack_ms), DLOCK_OK);
    uint64_t term = 0, highest = 0;
    assert_int_equal(dlock_election_term(eb, &term), DLOCK_OK);
    assert_true(term > old);
    assert_int_equal(dlock_fence_admit(&highest, term), DLOCK_OK); /* the new leader writes */
    kill(pid, SIGCONT);
    struct pollfd p = { told[0], POLLIN, 0 };
    assert_int_equal(poll(&p, 1, (int)slack_ms(3000)), 1);
    int late = 0;
    assert_int_equal(read(told[0], &late, sizeof late), (ssize_t)sizeof late);
    assert_int_equal(late, DLOCK_ELOST);
    assert_int_equal(dlock_fence_admit(&highest, old), DLOCK_ESTALE);
    char value[16];
    assert_int_equal(leader_of(b, "conf-paused-e", value, sizeof value), term);
    assert_string_equal(value, "new");
    int status = -1;
    waitpid(pid, &status, 0);
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    close(ready[0]);
    close(told[0]);
    dlock_election_free(eb);
    dlock_client_close(b);
}

/* What an observer saw, in order. */
struct seen {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int n;
    uint64_t term[32];
    char value[32][16];
};

static void see(const void *value, size_t len, uint64_t term, void *arg)
{
    struct seen *s = arg;
    pthread_mutex_lock(&s->mu);
    if (s->n < 32) {
        s->term[s->n] = term;
        snprintf(s->value[s->n], sizeof s->value[0], "%.*s", (int)len, value ? (const char *)value : "");
        s->n++;
    }
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
}

/* How many reports came, and the terms of the last two (0 if none). */
static int seen_count(struct seen *s, uint64_t *last, uint64_t *before)
{
    pthread_mutex_lock(&s->mu);
    int n = s->n;
    *last = n > 0 ? s->term[n - 1] : 0;
    *before = n > 1 ? s->term[n - 2] : 0;
    pthread_mutex_unlock(&s->mu);
    return n;
}

/* Waits until the last thing seen is (term, value); fails after a while. */
static void await_seen(struct seen *s, uint64_t term, const char *value)
{
    int64_t end = now_ms() + slack_ms(3000);
    pthread_mutex_lock(&s->mu);
    while (!(s->n > 0 && s->term[s->n - 1] == term && strcmp(s->value[s->n - 1], value) == 0)) {
        if (now_ms() > end) {
            pthread_mutex_unlock(&s->mu);
            fail_msg("the observer did not see term %llu \"%s\" (last of %d: term %llu \"%s\")",
                     (unsigned long long)term, value, s->n, s->n ? (unsigned long long)s->term[s->n - 1] : 0ULL,
                     s->n ? s->value[s->n - 1] : "");
        }
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 20 * 1000000L;
        if (ts.tv_nsec >= 1000000000L) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000L;
        }
        pthread_cond_timedwait(&s->cv, &s->mu, &ts);
    }
    pthread_mutex_unlock(&s->mu);
}

static void an_observer_sees_each_change_in_order(void **state)
{
    (void)state;
    /* The observer's client has a short lease: it reads every 100 ms. */
    dlock_client *a = conformance_open_client(30000, 100), *b = conformance_open_client(30000, 100),
                 *o = conformance_open_client(300, 100);
    struct seen s;
    memset(&s, 0, sizeof s);
    pthread_mutex_init(&s.mu, NULL);
    pthread_cond_init(&s.cv, NULL);
    dlock_observer *obs = NULL;
    assert_int_equal(dlock_observe(o, "conf-observed", 13, see, &s, &obs), DLOCK_OK);
    await_seen(&s, 0, "");
    /* Reads that find the same state report nothing. */
    sleep_ms(350);
    uint64_t last, before;
    assert_int_equal(seen_count(&s, &last, &before), 1);
    dlock_election *ea = candidate(a, "conf-observed", "a"), *eb = candidate(b, "conf-observed", "b");
    assert_int_equal(dlock_campaign(ea, 0), DLOCK_OK);
    uint64_t ta = 0, tb = 0;
    assert_int_equal(dlock_election_term(ea, &ta), DLOCK_OK);
    await_seen(&s, ta, "a");
    assert_int_equal(dlock_proclaim(ea, "a2", 2), DLOCK_OK);
    await_seen(&s, ta, "a2");
    assert_int_equal(dlock_resign(ea), DLOCK_OK);
    await_seen(&s, 0, "");
    sleep_ms(350);
    seen_count(&s, &last, &before);
    assert_int_equal(last, 0);
    assert_int_equal(before, ta); /* nobody once, after the leader */
    assert_int_equal(dlock_campaign(eb, 0), DLOCK_OK);
    assert_int_equal(dlock_election_term(eb, &tb), DLOCK_OK);
    await_seen(&s, tb, "b");
    dlock_observe_stop(obs);
    /* Never an older leader after a newer one, never the same state twice
     * in a row. */
    uint64_t highest = 0;
    for (int i = 0; i < s.n; i++) {
        if (s.term[i] != 0) {
            assert_true(s.term[i] >= highest);
            highest = s.term[i];
        }
        if (i > 0)
            assert_false(s.term[i] == s.term[i - 1] && strcmp(s.value[i], s.value[i - 1]) == 0);
    }
    int calls = s.n;
    sleep_ms(50);
    assert_int_equal(s.n, calls); /* stopped: no more calls */
    dlock_election_free(ea);
    dlock_election_free(eb);
    pthread_cond_destroy(&s.cv);
    pthread_mutex_destroy(&s.mu);
    dlock_client_close(a);
    dlock_client_close(b);
    dlock_client_close(o);
}

/* Two observers of one name in one client: each sees each change. */
static void two_observers_in_one_client_both_see_changes(void **state)
{
    (void)state;
    dlock_client *a = conformance_open_client(30000, 100), *o = conformance_open_client(30000, 100);
    struct seen s1, s2;
    memset(&s1, 0, sizeof s1);
    memset(&s2, 0, sizeof s2);
    pthread_mutex_init(&s1.mu, NULL);
    pthread_cond_init(&s1.cv, NULL);
    pthread_mutex_init(&s2.mu, NULL);
    pthread_cond_init(&s2.cv, NULL);
    dlock_observer *o1 = NULL, *o2 = NULL;
    assert_int_equal(dlock_observe(o, "conf-two-obs", 12, see, &s1, &o1), DLOCK_OK);
    assert_int_equal(dlock_observe(o, "conf-two-obs", 12, see, &s2, &o2), DLOCK_OK);
    await_seen(&s1, 0, "");
    await_seen(&s2, 0, "");
    dlock_election *ea = candidate(a, "conf-two-obs", "a");
    assert_int_equal(dlock_campaign(ea, 0), DLOCK_OK);
    uint64_t ta = 0;
    assert_int_equal(dlock_election_term(ea, &ta), DLOCK_OK);
    await_seen(&s1, ta, "a");
    await_seen(&s2, ta, "a");
    /* One stops: the other still hears. */
    dlock_observe_stop(o1);
    assert_int_equal(dlock_proclaim(ea, "a2", 2), DLOCK_OK);
    await_seen(&s2, ta, "a2");
    dlock_observe_stop(o2);
    dlock_election_free(ea);
    pthread_cond_destroy(&s1.cv);
    pthread_mutex_destroy(&s1.mu);
    pthread_cond_destroy(&s2.cv);
    pthread_mutex_destroy(&s2.mu);
    dlock_client_close(a);
    dlock_client_close(o);
}

static void bad_election_input_is_refused(void **state)
{
    (void)state;
    dlock_client *a = conformance_open_client(30000, 100);
    dlock_election *e = NULL;
    static char big[DLOCK_VALUE_MAX + 1];
    assert_int_equal(dlock_election_new(a, "conf-bad-e", 10, big, sizeof big, &e), DLOCK_EINVAL);
    assert_null(e);
    assert_int_equal(dlock_election_new(a, "conf-bad-e", 10, NULL, 3, &e), DLOCK_EINVAL);
    assert_int_equal(dlock_election_new(a, "", 0, "v", 1, &e), DLOCK_EINVAL);
    assert_int_equal(dlock_election_new(a, "conf-bad-e", 10, "v", 1, NULL), DLOCK_EINVAL);
    assert_int_equal(dlock_campaign(NULL, 0), DLOCK_EINVAL);
    assert_int_equal(dlock_resign(NULL), DLOCK_EINVAL);
    assert_int_equal(dlock_proclaim(NULL, "v", 1), DLOCK_EINVAL);
    assert_int_equal(dlock_election_term(NULL, NULL), DLOCK_EINVAL);
    e = candidate(a, "conf-bad-e", "v");
    assert_int_equal(dlock_proclaim(e, big, sizeof big), DLOCK_EINVAL);
    assert_int_equal(dlock_leader(a, "conf-bad-e", 10, NULL, 4, NULL, NULL), DLOCK_EINVAL);
    assert_int_equal(dlock_leader(a, NULL, 3, NULL, 0, NULL, NULL), DLOCK_EINVAL);
    dlock_observer *o = NULL;
    assert_int_equal(dlock_observe(a, "conf-bad-e", 10, NULL, NULL, &o), DLOCK_EINVAL);
    assert_null(o);
    dlock_election_free(e);
    dlock_election_free(NULL);
    dlock_observe_stop(NULL);
    dlock_client_close(a);
}

/* A backend without elections refuses them, clearly. */
static void elections_are_refused(void **state)
{
    (void)state;
    dlock_client *a = conformance_open_client(30000, 100);
    assert_false(dlock_client_capabilities(a) & DLOCK_CAP_ELECTION);
    dlock_election *e = NULL;
    assert_int_equal(dlock_election_new(a, "conf-no-e", 9, "v", 1, &e), DLOCK_ENOTSUP);
    assert_null(e);
    assert_non_null(strstr(dlock_errmsg(), "cannot hold elections"));
    assert_int_equal(dlock_leader(a, "conf-no-e", 9, NULL, 0, NULL, NULL), DLOCK_ENOTSUP);
    dlock_observer *o = NULL;
    assert_int_equal(dlock_observe(a, "conf-no-e", 9, see, NULL, &o), DLOCK_ENOTSUP);
    dlock_client_close(a);
}

int conformance_run_election(const struct conformance_target *t)
{
    target = t;
    char group[128];
    snprintf(group, sizeof group, "%s: election", t->name);
    dlock_client *probe = conformance_open_client(30000, 100);
    bool can = dlock_client_capabilities(probe) & DLOCK_CAP_ELECTION;
    dlock_client_close(probe);
    if (!can) {
        const struct CMUnitTest refused[] = { cmocka_unit_test_setup(elections_are_refused, conformance_before_each) };
        return _cmocka_run_group_tests(group, refused, 1, NULL, conformance_group_teardown);
    }
    const struct CMUnitTest cases[] = {
        cmocka_unit_test_setup(one_leader_with_growing_terms, conformance_before_each),
        cmocka_unit_test_setup(standby_is_elected_when_the_leader_resigns, conformance_before_each),
        cmocka_unit_test_setup(leadership_belongs_to_the_election_not_the_thread, conformance_before_each),
        cmocka_unit_test_setup(proclaim_changes_the_value_not_the_term, conformance_before_each),
        cmocka_unit_test_setup(a_waiting_campaign_is_cancelled, conformance_before_each),
        cmocka_unit_test_setup(a_killed_leader_is_replaced_within_its_lease, conformance_before_each),
        cmocka_unit_test_setup(an_observer_sees_each_change_in_order, conformance_before_each),
        cmocka_unit_test_setup(two_observers_in_one_client_both_see_changes, conformance_before_each),
        cmocka_unit_test_setup(bad_election_input_is_refused, conformance_before_each),
    };
    /* Where the server frees an expired hold, and where a hold can be taken
     * away from outside. */
    const struct CMUnitTest paused[] = {
        cmocka_unit_test_setup(a_paused_leader_learns_its_loss_on_resuming, conformance_before_each),
    };
    const struct CMUnitTest deposed[] = {
        cmocka_unit_test_setup(a_deposed_leader_learns_it_and_its_term_is_refused, conformance_before_each),
    };
    dlock_client *c = conformance_open_client(30000, 100);
    bool expires = dlock_client_capabilities(c) & DLOCK_CAP_SERVER_EXPIRY;
    dlock_client_close(c);
    int failed = _cmocka_run_group_tests(group, cases, sizeof cases / sizeof cases[0], NULL,
                                         conformance_group_teardown);
    if (expires)
        failed += _cmocka_run_group_tests(group, paused, 1, NULL, conformance_group_teardown);
    if (t->break_hold)
        failed += _cmocka_run_group_tests(group, deposed, 1, NULL, conformance_group_teardown);
    return failed;
}
