/* Short-token keys of the scanner's small table (run by tests/test_scan_table.py). A token of at
 * most 16 bytes without a NUL byte is matched by its zero-padded bytes in the slot; "ab", "ab\0"
 * and "ab\0\0" have the same padded bytes, so only the NUL check keeps them apart where the keyed
 * hash puts them in one probe chain. Scans 20,000 texts of such triples from distinct stems, in
 * random order, through qg_scan (its table sized down for short texts, so chains meet often) and
 * qg_scan_index, and prints "wrong probes left": the scans whose distinct count is not the number
 * of tokens, the slots stepped past in all (how often tokens met), and the shared index's slots or
 * key bytes found non-zero after a scan (a query's words must not stay behind in it). */
#include <stdio.h>
#include <string.h>

#include "scan.h"

static qg_scan_table shared;

int main(void)
{
    qg_scan_rules rules;
    memset(&rules, 0, sizeof rules);
    rules.max_tokens = rules.max_model_tokens = -1;
    rules.min_blob_len = 32;
    rules.min_percent_run = 2;
    rules.encoded_payloads = 1;
    static uint8_t text[4096];
    static unsigned order[3 * 64];
    uint64_t x = 0x9E3779B97F4A7C15ull;
    long wrong = 0, probes = 0, left = 0;
    for (int c = 0; c < 20000; c++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        unsigned k = 1 + (unsigned)(x % 64), base = (unsigned)(x >> 32) % 100000;
        for (unsigned j = 0; j < 3 * k; j++)
            order[j] = j;
        for (unsigned j = 3 * k - 1; j > 0; j--) {
            x ^= x << 13, x ^= x >> 7, x ^= x << 17;
            unsigned r = (unsigned)(x % (j + 1)), t = order[j];
            order[j] = order[r];
            order[r] = t;
        }
        size_t n = 0;
        for (unsigned j = 0; j < 3 * k; j++) {
            /* stem: base + token / 3 in base 26 (distinct stems), then token % 3 NUL bytes */
            for (unsigned v = base + order[j] / 3;; v /= 26) {
                text[n++] = (uint8_t)('a' + v % 26);
                if (v < 26)
                    break;
            }
            for (unsigned z = 0; z < order[j] % 3; z++)
                text[n++] = 0;
            text[n++] = ' ';
        }
        for (int shared_index = 0; shared_index < 2; shared_index++) {
            qg_scan_out out;
            memset(&out, 0, sizeof out);
            int rc = shared_index ? qg_scan_index(text, n, &rules, &out, &shared) : qg_scan(text, n, &rules, &out);
            if (rc != QG_SCAN_OK || out.unique_tokens != 3 * (int64_t)k)
                wrong++;
            probes += out.probes;
            qg_scan_out_free(&out);
            if (shared_index)
                for (size_t slot = 0; slot < QG_SCAN_INDEX_SLOTS; slot++) {
                    left += shared.slots[slot] != 0;
                    for (size_t b = 0; b < 16; b++)
                        left += shared.keys[slot][b] != 0;
                }
        }
    }
    printf("%ld %ld %ld\n", wrong, probes, left);
    return 0;
}
