/* tests/backends/zookeeper/test_zk_wanted.c - the zookeeper backend's watch
 * for requests (zk_wanted.c), built into this program and driven step by
 * step against a real ZooKeeper it starts: which changes of a name's
 * requests tell a holder, whatever the order in which the client library's
 * threads deliver the grant's answer and the watch's event. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "../../../backends/zookeeper/zk_backend.h"
#include "../../support/service.h"
#include "../../support/test_time.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static struct test_service server = { .script = "zookeeper" };

/* What the core is told: how many times another owner asked. */
static int told;

static void count_told(struct dlock_provider_lock *lk)
{
    (void)lk;
    __atomic_add_fetch(&told, 1, __ATOMIC_SEQ_CST);
}

static int told_now(void)
{
    return __atomic_load_n(&told, __ATOMIC_SEQ_CST);
}

static void quiet(const char *message)
{
    (void)message;
}

/* A second session: another owner, whose requests are nodes under the
 * name's parent, as the backend's are. */
static zhandle_t *other_owner(void)
{
    char hosts[64];
    snprintf(hosts, sizeof hosts, "127.0.0.1:%d", server.port);
    zhandle_t *zh = zookeeper_init2(hosts, NULL, 4000, NULL, NULL, 0, quiet);
    for (int i = 0; zh && zoo_state(zh) != ZOO_CONNECTED_STATE && i < 500; i++)
        sleep_ms(10);
    if (!zh || zoo_state(zh) != ZOO_CONNECTED_STATE)
        fail_msg("a second session with ZooKeeper on port %d was not established", server.port);
    return zh;
}

static void request(zhandle_t *zh, const char *parent)
{
    char path[256];
    snprintf(path, sizeof path, "%s/other-lock-", parent);
    assert_int_equal(zoo_create(zh, path, "", 0, &ZOO_OPEN_ACL_UNSAFE, ZOO_EPHEMERAL | ZOO_SEQUENCE, NULL, 0), ZOK);
}

/* ---- the client library's completion thread, caught up -------------------------------- */

struct caught_up {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool done;
};

static void answered(int rc, const struct Stat *st, const void *data)
{
    (void)rc;
    (void)st;
    struct caught_up *k = (struct caught_up *)data;
    pthread_mutex_lock(&k->mu);
    k->done = true;
    pthread_cond_signal(&k->cv);
    pthread_mutex_unlock(&k->mu);
}

/* Returns once the completion thread has run every watcher whose event
 * came before the answer to a request sent now: the server sends a watch
 * event before its answers to later requests, and the completion thread
 * runs events and answers in the order they came. */
static void catch_up(zhandle_t *zh, const char *path)
{
    struct caught_up k = { PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, false };
    assert_int_equal(zoo_aexists(zh, path, 0, answered, &k), ZOK);
    pthread_mutex_lock(&k.mu);
    while (!k.done)
        pthread_cond_wait(&k.cv, &k.mu);
    pthread_mutex_unlock(&k.mu);
}

/* ---- a name held by this program's instance -------------------------------------------- */

struct fixture {
    struct zk_instance inst;
    struct dlock_provider_lock lk;
    struct zk_lock zl;
    zhandle_t *zh;          /* the instance's session */
    uint64_t generation;
    zhandle_t *other;
};

static int setup(void **state)
{
    static int names;
    struct fixture *f = calloc(1, sizeof *f);
    assert_non_null(f);
    snprintf(f->inst.session.hosts, sizeof f->inst.session.hosts, "127.0.0.1:%d", server.port);
    f->inst.session.timeout_ms = 4000;
    f->inst.session.connect_timeout_ms = 10000;
    pthread_mutex_init(&f->inst.wanted_mu, NULL);
    f->inst.tell_wanted = count_told;
    assert_int_equal(zk_session_open(&f->inst.session), DLOCK_OK);
    assert_int_equal(zk_session_get(&f->inst.session, &f->zh, &f->generation), DLOCK_OK);
    zk_session_put(&f->inst.session);

    char parent[64], node[128];
    snprintf(parent, sizeof parent, "/wanted-%d", ++names);
    assert_int_equal(zoo_create(f->zh, parent, "", 0, &ZOO_OPEN_ACL_UNSAFE, 0, NULL, 0), ZOK);
    char prefix[96];
    snprintf(prefix, sizeof prefix, "%s/ours-lock-", parent);
    assert_int_equal(zoo_create(f->zh, prefix, "", 0, &ZOO_OPEN_ACL_UNSAFE, ZOO_EPHEMERAL | ZOO_SEQUENCE, node,
                                (int)sizeof node),
                     ZOK);
    f->lk.priv = &f->zl;
    f->zl.parent = strdup(parent);
    f->zl.node = strdup(node);
    f->zl.generation = f->generation;
    assert_non_null(f->zl.parent);
    assert_non_null(f->zl.node);
    f->other = other_owner();
    told = 0;
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    struct fixture *f = *state;
    zk_wanted_unwatch(&f->inst, &f->lk);
    zookeeper_close(f->other);
    zk_session_close(&f->inst.session);
    zk_wanted_close(&f->inst);
    pthread_mutex_destroy(&f->inst.wanted_mu);
    free(f->zl.parent);
    free(f->zl.node);
    free(f);
    return 0;
}

/* A read of the children as an attempt makes it, leaving the watch. */
static void read_as_an_attempt(struct fixture *f)
{
    struct String_vector children = { 0, NULL };
    struct Stat st;
    assert_int_equal(zk_wanted_read_children(&f->inst, f->zh, f->generation, &f->zl, &children, &st), ZOK);
    deallocate_String_vector(&children);
    f->zl.held_cversion = st.cversion;
}

/* The name watched while held, as the core asks after a keepable grant;
 * then that hold's release. */
static void watched_then_released(struct fixture *f)
{
    f->zl.held_cversion = 0;
    read_as_an_attempt(f); /* the grant's read: nobody has asked since */
    assert_int_equal(zk_wanted_watch(&f->inst, &f->lk), DLOCK_OK);
    catch_up(f->zh, f->zl.parent);
    assert_int_equal(told_now(), 0);
    zk_wanted_held(&f->inst, &f->zl, false);
}

/* ---- cases ----------------------------------------------------------------------------- */

static void a_request_after_the_granting_read_is_told(void **state)
{
    struct fixture *f = *state;
    watched_then_released(f);
    read_as_an_attempt(f); /* it finds our node first: the grant */
    zk_wanted_held(&f->inst, &f->zl, true);
    request(f->other, f->zl.parent);
    catch_up(f->zh, f->zl.parent);
    assert_int_equal(told_now(), 1);
}

static void a_request_heard_before_the_grant_is_known_is_told(void **state)
{
    struct fixture *f = *state;
    watched_then_released(f);
    read_as_an_attempt(f); /* it finds our node first: the grant */
    /* Another owner asks, and the watch's event runs on the completion
     * thread before the attempt has said that the read granted. */
    request(f->other, f->zl.parent);
    catch_up(f->zh, f->zl.parent);
    zk_wanted_held(&f->inst, &f->zl, true);
    assert_int_equal(told_now(), 1);
}

static void a_change_before_the_granting_read_is_not_told(void **state)
{
    struct fixture *f = *state;
    watched_then_released(f);
    read_as_an_attempt(f); /* say it found a predecessor: busy */
    request(f->other, f->zl.parent); /* the predecessor's going, as it were */
    read_as_an_attempt(f);           /* the grant */
    zk_wanted_held(&f->inst, &f->zl, true);
    /* The first read's event, however late it runs, came before the
     * granting read. */
    catch_up(f->zh, f->zl.parent);
    assert_int_equal(told_now(), 0);
    request(f->other, f->zl.parent);
    catch_up(f->zh, f->zl.parent);
    assert_int_equal(told_now(), 1);
}

static void nothing_is_told_between_holds(void **state)
{
    struct fixture *f = *state;
    watched_then_released(f);
    read_as_an_attempt(f);
    request(f->other, f->zl.parent);
    catch_up(f->zh, f->zl.parent);
    assert_int_equal(told_now(), 0);
    /* That read did not grant: the attempt gives up (a try answered busy). */
    zk_wanted_unwatch(&f->inst, &f->lk);
    request(f->other, f->zl.parent);
    catch_up(f->zh, f->zl.parent);
    assert_int_equal(told_now(), 0);
}

int main(void)
{
    if (getenv("CMOCKA_FILTER"))
        cmocka_set_test_filter(getenv("CMOCKA_FILTER"));
    if (test_service_start(&server) != 0) {
        printf("[  FAILED  ] 1 test(s), listed below:\n[  FAILED  ] zookeeper did not start\n");
        return 1;
    }
    const struct CMUnitTest cases[] = {
        cmocka_unit_test_setup_teardown(a_request_after_the_granting_read_is_told, setup, teardown),
        cmocka_unit_test_setup_teardown(a_request_heard_before_the_grant_is_known_is_told, setup, teardown),
        cmocka_unit_test_setup_teardown(a_change_before_the_granting_read_is_not_told, setup, teardown),
        cmocka_unit_test_setup_teardown(nothing_is_told_between_holds, setup, teardown),
    };
    int failed = cmocka_run_group_tests_name("zookeeper: the watch for requests", cases, NULL, NULL);
    test_service_stop(&server);
    return failed ? 1 : 0;
}
