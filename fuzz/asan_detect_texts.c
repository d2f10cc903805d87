/* Runs qg_detect (native/detect.c) over the texts of a file, separated by NUL bytes, each in a heap
 * buffer of exactly its length, and checks that the findings are sorted, disjoint and inside the
 * text. Built with -fsanitize=address,undefined by scripts/asan_detect.sh: a read one byte past a
 * text is invisible to the Python binding (a bytes object ends in a NUL) but not to ASan here. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "detect.h"

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: %s TEXTS (NUL-separated)\n", argv[0]);
        return 2;
    }
    FILE *fp = fopen(argv[1], "rb");
    if (!fp) {
        perror(argv[1]);
        return 2;
    }
    fseek(fp, 0, SEEK_END);
    long size = ftell(fp);
    fseek(fp, 0, SEEK_SET);
    char *all = malloc((size_t)size + 1);
    if (!all || fread(all, 1, (size_t)size, fp) != (size_t)size) {
        fprintf(stderr, "asan-detect: cannot read %s\n", argv[1]);
        return 2;
    }
    fclose(fp);
    all[size] = 0;
    long texts = 0;
    for (long p = 0; p < size; texts++) {
        size_t n = strlen(all + p);
        unsigned char *buf = malloc(n ? n : 1);
        if (!buf) abort();
        memcpy(buf, all + p, n);
        qg_findings f = {0};
        if (qg_detect(buf, n, &f) != 0) {
            fprintf(stderr, "asan-detect: qg_detect failed on text %ld\n", texts);
            return 1;
        }
        int64_t prev_end = 0;
        for (size_t k = 0; k < f.len; k++) {
            if (f.items[k].start < prev_end || f.items[k].end <= f.items[k].start || f.items[k].end > (int64_t)n) {
                fprintf(stderr, "asan-detect: text %ld: finding %zu [%lld, %lld) out of order or bounds\n", texts, k,
                        (long long)f.items[k].start, (long long)f.items[k].end);
                return 1;
            }
            prev_end = f.items[k].end;
        }
        qg_findings_free(&f);
        free(buf);
        p += (long)n + 1;
    }
    free(all);
    printf("asan-detect: %ld texts, no report\n", texts);
    return 0;
}
