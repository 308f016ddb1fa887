/* contrib/cli/election_view.c - see election_view.h. */
#include "config.h"

#include "election_view.h"
#include "escape.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

void entry_election_read(dlock_client *client, const dlock_list_entry *e, struct entry_election *out)
{
    memset(out, 0, sizeof *out);
    if (!client || e->kind != DLOCK_MODE_EXCLUSIVE || e->holder_count == 0 ||
        !(dlock_client_capabilities(client) & DLOCK_CAP_ELECTION))
        return;
    char *buf = malloc(DLOCK_VALUE_MAX);
    size_t len = 0;
    uint64_t term = 0;
    if (!buf || dlock_leader(client, e->name, e->name_len, buf, DLOCK_VALUE_MAX, &len, &term) != DLOCK_OK ||
        term == 0) {
        free(buf);
        return;
    }
    out->term = term;
    out->value = buf;
    out->value_len = len < DLOCK_VALUE_MAX ? len : DLOCK_VALUE_MAX;
    out->candidates = e->waiters >= 0 ? 1 + e->waiters : -1;
}

void entry_election_free(struct entry_election *el)
{
    if (!el)
        return;
    free(el->value);
    memset(el, 0, sizeof *el);
}

void entry_election_json(FILE *f, const struct entry_election *el)
{
    if (!el || el->term == 0)
        return;
    fprintf(f, ",\"election\":{\"term\":%" PRIu64 ",\"value\":", el->term);
    bool exact = escape_json(f, el->value ? el->value : "", el->value_len);
    if (!exact) {
        fputs(",\"value_hex\":\"", f);
        escape_hex(f, el->value, el->value_len);
        fputs("\"", f);
    }
    if (el->candidates >= 0)
        fprintf(f, ",\"candidates\":%" PRId64 "}", el->candidates);
    else
        fputs(",\"candidates\":null}", f);
}

void entry_election_line(FILE *f, const struct entry_election *el)
{
    if (!el || el->term == 0)
        return;
    fprintf(f, "    election: leader term %" PRIu64 ", value ", el->term);
    escape_text(f, el->value ? el->value : "", el->value_len);
    if (el->candidates >= 0)
        fprintf(f, ", %" PRId64 " candidate%s", el->candidates, el->candidates == 1 ? "" : "s");
    fputc('\n', f);
}
