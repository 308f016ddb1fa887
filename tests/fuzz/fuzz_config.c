/* tests/fuzz/fuzz_config.c - libFuzzer target: any bytes as a configuration
 * must give DLOCK_OK or DLOCK_ECONFIG with a message, never a crash, a leak
 * or a hang. Inputs with @include are passed over: includes read the file
 * system (by design: an administrator's feature), which a fuzzer must not. */
#include "config.h"

#include "../../core/internal.h"

#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = malloc(size + 1);
    if (!text)
        return 0;
    memcpy(text, data, size);
    text[size] = 0;
    if (!strstr(text, "@include")) {
        struct dlock__diag diag = { 0 };
        struct dlock__config cfg;
        int rc = dlock__config_load(&cfg, NULL, text, &diag);
        if (rc == DLOCK_OK)
            dlock__config_free(&cfg);
        else if (rc != DLOCK_ECONFIG || diag.errors == 0 || !diag.first_error[0])
            abort(); /* a failure must be a config error that says where */
    }
    free(text);
    return 0;
}
