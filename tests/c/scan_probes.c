/* Collision check for the scanner's token table (run by tests/test_scan_table.py): scans a text
 * of many distinct tokens given on stdin and prints "tokens distinct probes". */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "scan.h"

int main(void)
{
    size_t cap = 1 << 20, n = 0, got;
    uint8_t *buf = malloc(cap);
    if (!buf)
        return 2;
    while ((got = fread(buf + n, 1, cap - n, stdin)) > 0) {
        n += got;
        if (n == cap) {
            uint8_t *more = realloc(buf, cap *= 2);
            if (!more)
                return 2;
            buf = more;
        }
    }
    qg_scan_rules rules;
    memset(&rules, 0, sizeof rules);
    rules.max_tokens = rules.max_model_tokens = -1;
    rules.min_blob_len = 32;
    rules.min_percent_run = 2;
    rules.encoded_payloads = 1;
    qg_scan_out out;
    memset(&out, 0, sizeof out);
    if (qg_scan(buf, n, &rules, &out) != QG_SCAN_OK)
        return 1;
    printf("%lld %lld %lld\n", (long long)out.token_count, (long long)out.unique_tokens,
           (long long)out.probes);
    qg_scan_out_free(&out);
    free(buf);
    return 0;
}
